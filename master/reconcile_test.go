package master

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
)

// fataler is what sessionReconcile needs of a *testing.T or *rapid.T.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// digestOfKeys is the node side of a reconcile: the digest of keys at
// resolution slots.
func digestOfKeys(keys []string, slots int) masterapi.SlotDigest {
	d := masterapi.NewSlotDigest(slots)
	for _, k := range keys {
		d.Add(masterapi.KeyHash(k))
	}
	return d
}

// reconciled is the outcome of a whole reconcile session: the replicas
// ReconcileEnd dropped and the keys every ReconcileKeys answered unwanted
// (in the order sent).
type reconciled struct {
	Dropped  int64
	Unwanted []string
}

// runReconcile runs a whole reconcile session for node holding keys, at
// digest resolution slots, sending the keys of differing slots in batches
// of batch. It returns the session's Differ and the outcome.
func runReconcile(api masterapi.API, node string, keys []string, slots, batch int) ([]uint32, reconciled, error) {
	var res reconciled
	ses, err := api.ReconcileBegin(bg, node, digestOfKeys(keys, slots))
	if err != nil || len(ses.Differ) == 0 {
		return nil, res, err
	}
	var send []string
	for _, k := range keys {
		if slices.Contains(ses.Differ, uint32(masterapi.SlotOf(masterapi.KeyHash(k), slots))) {
			send = append(send, k)
		}
	}
	for len(send) > 0 {
		part := send[:min(batch, len(send))]
		send = send[len(part):]
		kr, err := api.ReconcileKeys(bg, node, ses.ID, part)
		if err != nil {
			return nil, res, fmt.Errorf("ReconcileKeys: %w", err)
		}
		res.Unwanted = append(res.Unwanted, kr.Unwanted...)
	}
	if res.Dropped, err = api.ReconcileEnd(bg, node, ses.ID); err != nil {
		return nil, res, fmt.Errorf("ReconcileEnd: %w", err)
	}
	return ses.Differ, res, nil
}

// sessionReconcile is runReconcile that fails the test on an error.
func sessionReconcile(t fataler, api masterapi.API, node string, keys []string, slots, batch int) ([]uint32, reconciled) {
	t.Helper()
	differ, res, err := runReconcile(api, node, keys, slots, batch)
	if err != nil {
		t.Fatalf("reconcile of %s: %v", node, err)
	}
	return differ, res
}

// reconcileAll reconciles node holding keys in one slot and one batch:
// every key sent, the replicas of every other key dropped.
func reconcileAll(api masterapi.API, node string, keys []string) (reconciled, error) {
	_, res, err := runReconcile(api, node, keys, 1, len(keys)+1)
	return res, err
}

// TestReconcileSession is TestReconcile through a session: the same
// replicas dropped, the same keys unwanted, at every digest resolution.
func TestReconcileSession(t *testing.T) {
	for _, slots := range []int{1, 2, 64, masterapi.MaxReconcileSlots} {
		t.Run(fmt.Sprint(slots), func(t *testing.T) {
			s, _ := offloadService(t, nil)
			mount(t, s, "a", 1<<20)
			mount(t, s, "b", 1<<20)
			var objs []masterapi.SSDObject
			for i := range 6 {
				objs = append(objs, masterapi.SSDObject{Key: fmt.Sprint("d", i), Size: 10, CRC: 1})
			}
			s.ReRegisterSSDObjects(bg, "a", objs)
			s.ReRegisterSSDObjects(bg, "b", objs[:3])
			_, res := sessionReconcile(t, s, "a", []string{"d0", "d2", "d4", "unknown"}, slots, 1)
			if res.Dropped != 3 || fmt.Sprint(res.Unwanted) != "[unknown]" {
				t.Fatalf("reconcile %+v", res)
			}
			want := map[string]string{
				"d0": "SSD@a SSD@b ", "d1": "SSD@b ", "d2": "SSD@a SSD@b ",
				"d4": "SSD@a ",
			}
			for k, w := range want {
				info, err := s.GetReplicaList(masterapi.WithOffloadPath(bg), k)
				if err != nil || kinds(info) != w {
					t.Errorf("%s: %s %v, want %s", k, kinds(info), err, w)
				}
			}
			for _, k := range []string{"d3", "d5"} {
				if _, err := s.GetReplicaList(bg, k); !codesIs(err, errcode.ErrObjectNotFound) {
					t.Errorf("%s: %v, want not found", k, err)
				}
			}
			// Nothing changed since: the digests agree, nothing to send.
			if differ, res := sessionReconcile(t, s, "a", []string{"d0", "d2", "d4"}, slots, 1); differ != nil || res.Dropped != 0 {
				t.Fatalf("second reconcile: differ %v, %+v", differ, res)
			}
			if err := s.Remove(bg, "d0", true); err != nil {
				t.Fatal(err)
			}
			s.EvictSSDReplica(bg, "a", []string{"d2"})
			_, res = sessionReconcile(t, s, "a", []string{"d0", "d2", "d4"}, slots, 2)
			if res.Dropped != 0 || fmt.Sprint(res.Unwanted) != "[d0 d2]" {
				t.Fatalf("reconcile after remove %+v", res)
			}
			_, err := s.ReconcileBegin(bg, "ghost", digestOfKeys(nil, slots))
			mustIs(t, err, errcode.ErrNeedRemount)
		})
	}
}

// TestReconcileSessionOnlyDifferingRanges: with 2000 keys on the node and
// two of them out of step (one the master lacks, one the node lacks), only
// their slots differ; a replica of another slot that the node does not
// name in its batches is not dropped (End touches only differing slots).
func TestReconcileSessionOnlyDifferingRanges(t *testing.T) {
	s, _ := offloadService(t, nil)
	mount(t, s, "a", 1<<20)
	var objs []masterapi.SSDObject
	var keys []string
	for i := range 2000 {
		k := fmt.Sprint("k", i)
		objs = append(objs, masterapi.SSDObject{Key: k, Size: 10, CRC: 1})
		keys = append(keys, k)
	}
	if _, err := s.ReRegisterSSDObjects(bg, "a", objs); err != nil {
		t.Fatal(err)
	}
	held := append(slices.Clone(keys[1:]), "extra") // the node lost k0 and has an unknown key
	const slots = 1024
	ses, err := s.ReconcileBegin(bg, "a", digestOfKeys(held, slots))
	if err != nil {
		t.Fatal(err)
	}
	want := []uint32{uint32(masterapi.SlotOf(masterapi.KeyHash("k0"), slots)), uint32(masterapi.SlotOf(masterapi.KeyHash("extra"), slots))}
	slices.Sort(want)
	want = slices.Compact(want)
	if !slices.Equal(ses.Differ, want) {
		t.Fatalf("differ %v, want %v", ses.Differ, want)
	}
	// Send only "extra": the other keys of the differing slots are not
	// named, so End drops them too; keys of other slots stay.
	kr, err := s.ReconcileKeys(bg, "a", ses.ID, []string{"extra", "k1"})
	if err != nil || fmt.Sprint(kr.Unwanted) != "[extra]" {
		t.Fatalf("keys: %+v %v", kr, err)
	}
	inDiffer := 0
	for _, k := range keys {
		if slices.Contains(ses.Differ, uint32(masterapi.SlotOf(masterapi.KeyHash(k), slots))) {
			inDiffer++
		}
	}
	dropped, err := s.ReconcileEnd(bg, "a", ses.ID)
	if err != nil || dropped != int64(inDiffer) {
		t.Fatalf("End dropped %d (%v), want %d: the keys of the differing slots only", dropped, err, inDiffer)
	}
	if st, _ := s.Stats(bg); st.SSDReplicas != int64(len(keys)-inDiffer) {
		t.Fatalf("SSD replicas %d, want %d", st.SSDReplicas, len(keys)-inDiffer)
	}
}

// TestReconcileSessionRefusals: a superseded, ended or foreign session
// changes nothing; bad digests and unknown nodes are refused.
func TestReconcileSessionRefusals(t *testing.T) {
	s, _ := offloadService(t, nil)
	mount(t, s, "a", 1<<20)
	s.ReRegisterSSDObjects(bg, "a", []masterapi.SSDObject{{Key: "x", Size: 1, CRC: 1}, {Key: "y", Size: 1, CRC: 1}})
	d := digestOfKeys([]string{"x"}, 4) // the node lost y
	s1, err := s.ReconcileBegin(bg, "a", d)
	if err != nil || len(s1.Differ) != 1 {
		t.Fatalf("begin %+v %v", s1, err)
	}
	s2, err := s.ReconcileBegin(bg, "a", d)
	if err != nil || s2.ID == s1.ID {
		t.Fatalf("second begin %+v %v", s2, err)
	}
	_, err = s.ReconcileKeys(bg, "a", s1.ID, []string{"x"})
	mustIs(t, err, errcode.ErrInvalidParams)
	_, err = s.ReconcileEnd(bg, "a", s1.ID)
	mustIs(t, err, errcode.ErrInvalidParams)
	// s2 named nothing: every replica of a in its differing slots goes
	// (y's slot; x's too if they share it).
	want := int64(0)
	for _, k := range []string{"x", "y"} {
		if slices.Contains(s2.Differ, uint32(masterapi.SlotOf(masterapi.KeyHash(k), 4))) {
			want++
		}
	}
	if n, err := s.ReconcileEnd(bg, "a", s2.ID); err != nil || n != want || want == 0 {
		t.Fatalf("end s2: %d %v, want %d", n, err, want)
	}
	_, err = s.ReconcileEnd(bg, "a", s2.ID)
	mustIs(t, err, errcode.ErrInvalidParams) // ended
	// A session begun by an earlier incarnation is void after a restart.
	s.ReRegisterSSDObjects(bg, "a", []masterapi.SSDObject{{Key: "z", Size: 1, CRC: 1}})
	s3, err := s.ReconcileBegin(bg, "a", digestOfKeys(nil, 1))
	if err != nil || len(s3.Differ) != 1 {
		t.Fatalf("begin s3 %+v %v", s3, err)
	}
	if err := s.MountSegment(bg, masterapi.MountRequest{Node: "a", Endpoint: "a:1", Segment: "seg0", Size: 1 << 20, Incarnation: "new"}); err != nil {
		t.Fatal(err)
	}
	_, err = s.ReconcileEnd(bg, "a", s3.ID)
	mustIs(t, err, errcode.ErrInvalidParams)
	for _, bad := range []masterapi.SlotDigest{
		{Counts: make([]uint32, 3), Sums: make([]uint64, 3)},
		{Counts: make([]uint32, 4), Sums: make([]uint64, 2)},
		{Counts: make([]uint32, 2*masterapi.MaxReconcileSlots), Sums: make([]uint64, 2*masterapi.MaxReconcileSlots)},
		{},
	} {
		_, err := s.ReconcileBegin(bg, "a", bad)
		mustIs(t, err, errcode.ErrInvalidParams)
	}
	_, err = s.ReconcileKeys(bg, "ghost", 1, nil)
	mustIs(t, err, errcode.ErrNeedRemount)
	_, err = s.ReconcileBegin(bg, "", digestOfKeys(nil, 1))
	mustIs(t, err, errcode.ErrInvalidParams)
}

// TestReconcileSessionKeepsReplicasRecordedMeanwhile: a replica recorded
// during the session (a notify or re-registration that overtook it) is on
// the node's SSD: End does not drop it although no batch named it.
func TestReconcileSessionKeepsReplicasRecordedMeanwhile(t *testing.T) {
	s, _ := offloadService(t, nil)
	mount(t, s, "a", 1<<20)
	ses, err := s.ReconcileBegin(bg, "a", digestOfKeys([]string{"late"}, 1))
	if err != nil || len(ses.Differ) != 1 {
		t.Fatalf("begin %+v %v", ses, err)
	}
	if _, err := s.ReRegisterSSDObjects(bg, "a", []masterapi.SSDObject{{Key: "late", Size: 1, CRC: 1}}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.ReconcileEnd(bg, "a", ses.ID); err != nil || n != 0 {
		t.Fatalf("End dropped %d (%v): a replica recorded during the session", n, err)
	}
	if st, _ := s.Stats(bg); st.SSDReplicas != 1 {
		t.Fatalf("SSD replicas %d", st.SSDReplicas)
	}
}

// TestReconcileSessionMatchesModel (property): for random replica sets on
// two nodes, random node key lists, digest resolutions, shard counts and
// batch sizes, a session of node a leaves the metadata as the model says:
// a keeps its replicas of the keys it holds and loses the others (Dropped
// counts them), b is untouched, an object left with no replica goes (no
// lease is active), and Unwanted is every held key a has no replica of.
func TestReconcileSessionMatchesModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		shards := 1 << rapid.IntRange(0, 6).Draw(rt, "shardsLog")
		slots := 1 << rapid.IntRange(0, 8).Draw(rt, "rangesLog")
		batch := rapid.IntRange(1, 50).Draw(rt, "batch")
		universe := rapid.IntRange(1, 200).Draw(rt, "universe")
		onA := rapid.SliceOfDistinct(rapid.IntRange(0, universe-1), rapid.ID).Draw(rt, "onA")
		onB := rapid.SliceOfDistinct(rapid.IntRange(0, universe-1), rapid.ID).Draw(rt, "onB")
		removed := rapid.SliceOfDistinct(rapid.IntRange(0, universe-1), rapid.ID).Draw(rt, "removed")
		held := rapid.SliceOfDistinct(rapid.IntRange(0, universe+20), rapid.ID).Draw(rt, "held")
		cfg := DefaultConfig()
		cfg.Clock = NewManualClock(t0)
		cfg.MonitorInterval = 0
		cfg.Shards = shards
		cfg.EnableOffload = true
		cfg.ClientTTL = time.Hour
		cfg.Logger = slog.New(slog.DiscardHandler)
		s, err := New(cfg)
		if err != nil {
			rt.Fatal(err)
		}
		defer s.Close()
		for _, n := range []string{"a", "b"} {
			if err := s.MountSegment(bg, masterapi.MountRequest{Node: n, Endpoint: n + ":1", Segment: "seg0", Size: 1 << 20}); err != nil {
				rt.Fatal(err)
			}
		}
		s.ReRegisterSSDObjects(bg, "a", ssdObjsOf(onA))
		s.ReRegisterSSDObjects(bg, "b", ssdObjsOf(onB))
		for _, r := range removed {
			_ = s.Remove(bg, fmt.Sprint("k", r), true)
		}
		gone := map[int]bool{}
		for _, r := range removed {
			gone[r] = true
		}
		isHeld := map[int]bool{}
		var keys []string
		for _, h := range held {
			isHeld[h] = true
			keys = append(keys, fmt.Sprint("k", h))
		}
		model := map[string][]string{} // key -> nodes listing it, after the session
		var want reconciled
		for _, id := range onA {
			switch {
			case gone[id]:
			case isHeld[id]:
				model[fmt.Sprint("k", id)] = []string{"a"}
			default:
				want.Dropped++
			}
		}
		for _, id := range onB {
			if !gone[id] {
				model[fmt.Sprint("k", id)] = append(model[fmt.Sprint("k", id)], "b")
			}
		}
		hasA := map[int]bool{}
		for _, id := range onA {
			hasA[id] = !gone[id]
		}
		for _, h := range held {
			if !hasA[h] {
				want.Unwanted = append(want.Unwanted, fmt.Sprint("k", h))
			}
		}
		var rows []string
		for k, ns := range model {
			rows = append(rows, k+"="+strings.Join(ns, ","))
		}
		sort.Strings(rows)
		_, got := sessionReconcile(rt, s, "a", keys, slots, batch)
		sort.Strings(want.Unwanted)
		sort.Strings(got.Unwanted)
		if got.Dropped != want.Dropped || !slices.Equal(got.Unwanted, want.Unwanted) {
			rt.Fatalf("session %+v, model %+v", got, want)
		}
		if a, b := ssdState(s), strings.Join(rows, " "); a != b {
			rt.Fatalf("metadata differs:\nsession: %s\nmodel:   %s", a, b)
		}
		if err := s.Check(); err != nil {
			rt.Fatal(err)
		}
	})
}

func ssdObjsOf(ids []int) []masterapi.SSDObject {
	out := make([]masterapi.SSDObject, len(ids))
	for i, id := range ids {
		out[i] = masterapi.SSDObject{Key: fmt.Sprint("k", id), Size: 8, CRC: 3}
	}
	return out
}

// ssdState renders every object and its SSD replicas, sorted.
func ssdState(s *Service) string {
	var rows []string
	s.eachObject(func(k string, _ *object, ns []string) {
		rows = append(rows, k+"="+strings.Join(ns, ","))
	})
	sort.Strings(rows)
	return strings.Join(rows, " ")
}

// TestShardsOfRanges (property): a key's shard is among the shards
// shardsOfSlots names for the key's slot, whatever the shard count and
// resolution, and no more shards are named than needed.
func TestShardsOfRanges(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		shards := 1 << rapid.IntRange(0, 10).Draw(rt, "shardsLog")
		slots := 1 << rapid.IntRange(0, 14).Draw(rt, "rangesLog")
		s := &Service{shards: make([]shard, shards), mask: uint64(shards - 1)}
		key := rapid.String().Draw(rt, "key")
		r := masterapi.SlotOf(masterapi.KeyHash(key), slots)
		got := s.shardsOfSlots(slots, func(x int) bool { return x == r })
		if !slices.Contains(got, s.shardIndex(key)) {
			rt.Fatalf("key %q (range %d of %d) is in shard %d, not in %v", key, r, slots, s.shardIndex(key), got)
		}
		if want := max(1, shards/slots); len(got) != want {
			rt.Fatalf("%d shards named for one range, want %d", len(got), want)
		}
	})
}

// TestReconcileSessionOverGRPC runs a session through Remote and the gRPC
// server; a stale session is refused with INVALID_PARAMS.
func TestReconcileSessionOverGRPC(t *testing.T) {
	s, _ := offloadService(t, nil)
	api := remoteService(t, s)
	mount(t, api, "a", 1<<20)
	var objs []masterapi.SSDObject
	for i := range 100 {
		objs = append(objs, masterapi.SSDObject{Key: fmt.Sprint("g", i), Size: 4, CRC: 2})
	}
	if _, err := api.ReRegisterSSDColumns(bg, "a", masterapi.ColumnsOf(objs)); err != nil {
		t.Fatal(err)
	}
	held := []string{"new"}
	for _, o := range objs[10:] {
		held = append(held, o.Key)
	}
	_, res := sessionReconcile(t, api, "a", held, 16, 7)
	if res.Dropped != 10 || fmt.Sprint(res.Unwanted) != "[new]" {
		t.Fatalf("session over gRPC: %+v", res)
	}
	_, err := api.ReconcileEnd(bg, "a", 12345)
	mustIs(t, err, errcode.ErrInvalidParams)
}

// reRegisterKeys records keys as node's SSD replicas.
func reRegisterKeys(t *testing.T, s *Service, node string, keys []string) {
	t.Helper()
	var objs []masterapi.SSDObject
	for _, k := range keys {
		objs = append(objs, masterapi.SSDObject{Key: k, Size: 8, CRC: 3})
	}
	if _, err := s.ReRegisterSSDObjects(bg, node, objs); err != nil {
		t.Fatal(err)
	}
}

// TestReconcileEndSkipsOnlyFullyNamedSlots: ReconcileEnd scans no object
// for a slot whose every replica the session named (the node only gained
// keys: strays), and still finds a lost key in a slot whose named count
// matches the digest only because a named replica went during the
// session (the dirty mark; red without it: the lost replica stays).
func TestReconcileEndSkipsOnlyFullyNamedSlots(t *testing.T) {
	keys := make([]string, 400)
	for i := range keys {
		keys[i] = fmt.Sprint("s", i)
	}
	t.Run("strays only", func(t *testing.T) {
		s, _ := offloadService(t, nil)
		mount(t, s, "a", 1<<20)
		reRegisterKeys(t, s, "a", keys)
		held := append(slices.Clone(keys), "stray1", "stray2")
		for _, slots := range []int{1, 64, masterapi.MaxReconcileSlots} {
			before := s.scanVisits.Load()
			differ, res := sessionReconcile(t, s, "a", held, slots, 50)
			if len(differ) == 0 || res.Dropped != 0 || len(res.Unwanted) != 2 {
				t.Fatalf("%d slots: differ %v, %+v", slots, differ, res)
			}
			if v := s.scanVisits.Load() - before; v != 0 {
				t.Fatalf("%d slots: End visited %d objects; every replica of the differing slots was named", slots, v)
			}
		}
	})
	t.Run("lost", func(t *testing.T) {
		s, _ := offloadService(t, nil)
		mount(t, s, "a", 1<<20)
		reRegisterKeys(t, s, "a", keys)
		before := s.scanVisits.Load()
		_, res := sessionReconcile(t, s, "a", keys[1:], 1, 50)
		if res.Dropped != 1 || s.scanVisits.Load() == before {
			t.Fatalf("%+v, %d visits", res, s.scanVisits.Load()-before)
		}
		if _, err := s.GetReplicaList(bg, keys[0]); !codesIs(err, errcode.ErrObjectNotFound) {
			t.Fatalf("lost key: %v", err)
		}
	})
	t.Run("named replica dropped during the session", func(t *testing.T) {
		s, _ := offloadService(t, nil)
		mount(t, s, "a", 1<<20)
		reRegisterKeys(t, s, "a", keys)
		// One slot: the node lost keys[0]; it names the rest, then the
		// master drops keys[1]'s replica (a bucket eviction): the count
		// (399) equals the named (399), yet keys[0] was never named.
		held := keys[1:]
		ses, err := s.ReconcileBegin(bg, "a", digestOfKeys(held, 1))
		if err != nil || len(ses.Differ) != 1 {
			t.Fatalf("begin %+v %v", ses, err)
		}
		if _, err := s.ReconcileKeys(bg, "a", ses.ID, held); err != nil {
			t.Fatal(err)
		}
		if _, err := s.EvictSSDReplica(bg, "a", []string{keys[1]}); err != nil {
			t.Fatal(err)
		}
		n, err := s.ReconcileEnd(bg, "a", ses.ID)
		if err != nil || n != 1 {
			t.Fatalf("End dropped %d (%v), want the lost key's replica", n, err)
		}
		if _, err := s.GetReplicaList(bg, keys[0]); !codesIs(err, errcode.ErrObjectNotFound) {
			t.Fatalf("lost key: %v", err)
		}
		if err := s.Check(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestReconcileEndWithConcurrentEvictions: while a session's Keys and End
// calls run, another goroutine evicts replicas of keys the node names (a
// bucket eviction racing the reconcile). Whatever the interleaving, End
// drops exactly the replicas of the keys the node lost (the evicted ones
// are not its to count), and the digests still match the metadata. Run
// with -race: the dirty marks, counts and sums are written under shard
// locks while End reads them under the digest lock only.
func TestReconcileEndWithConcurrentEvictions(t *testing.T) {
	for _, slots := range []int{1, 64} {
		t.Run(fmt.Sprint(slots), func(t *testing.T) {
			s, _ := offloadService(t, nil)
			mount(t, s, "a", 1<<20)
			keys := make([]string, 600)
			for i := range keys {
				keys[i] = fmt.Sprint("c", i)
			}
			reRegisterKeys(t, s, "a", keys)
			var lost, held, evict []string
			for i, k := range keys {
				switch {
				case i%10 == 0:
					lost = append(lost, k)
				case i%3 == 0:
					held = append(held, k)
					evict = append(evict, k)
				default:
					held = append(held, k)
				}
			}
			ses, err := s.ReconcileBegin(bg, "a", digestOfKeys(held, slots))
			if err != nil || len(ses.Differ) == 0 {
				t.Fatalf("begin %+v %v", ses, err)
			}
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for _, k := range evict {
					if _, err := s.EvictSSDReplica(bg, "a", []string{k}); err != nil {
						t.Error(err)
						return
					}
				}
			}()
			for i := 0; i < len(held); i += 37 {
				if _, err := s.ReconcileKeys(bg, "a", ses.ID, held[i:min(i+37, len(held))]); err != nil {
					t.Fatal(err)
				}
			}
			n, err := s.ReconcileEnd(bg, "a", ses.ID)
			wg.Wait()
			if err != nil || n != int64(len(lost)) {
				t.Fatalf("End dropped %d (%v), want the %d lost", n, err, len(lost))
			}
			for _, k := range lost {
				if _, err := s.GetReplicaList(bg, k); !codesIs(err, errcode.ErrObjectNotFound) {
					t.Fatalf("lost key %s: %v", k, err)
				}
			}
			if err := s.Check(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestCheckFindsAWrongDigest: Check compares each node id's reconcile
// digest with the SSD replicas slot by slot (red if it skipped slots the
// replicas do not hold, or those they do).
func TestCheckFindsAWrongDigest(t *testing.T) {
	s, _ := offloadService(t, nil)
	mount(t, s, "a", 1<<20)
	reRegisterKeys(t, s, "a", []string{"k0", "k1", "k2"})
	if err := s.Check(); err != nil {
		t.Fatalf("consistent state: %v", err)
	}
	s.digestMu.Lock()
	var tab *digestTable
	for _, d := range s.digests {
		tab = d.tab.Load()
	}
	s.digestMu.Unlock()
	if tab == nil {
		t.Fatal("node a has SSD replicas and no digest table")
	}
	held := masterapi.SlotOf(masterapi.KeyHash("k1"), digestSlots)
	empty := (held + 1) % digestSlots
	for _, r := range []int{held, empty} {
		tab.counts[r].Add(1)
		if err := s.Check(); !errors.Is(err, ErrInconsistent) {
			t.Fatalf("slot %d counts one key too many: Check says %v", r, err)
		}
		tab.counts[r].Add(^uint32(0))
		tab.sums[r].Add(7)
		if err := s.Check(); !errors.Is(err, ErrInconsistent) {
			t.Fatalf("slot %d sum off: Check says %v", r, err)
		}
		tab.sums[r].Add(^uint64(6))
	}
	if err := s.Check(); err != nil {
		t.Fatalf("restored: %v", err)
	}
}
