package master

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
)

// reregState renders every object (size, CRC, whether it has a DRAM
// replica) and its SSD replicas (node id, viaTask), sorted.
func reregState(s *Service) string {
	var rows []string
	s.eachObject(func(k string, o *object, _ []string) {
		var ns []string
		for _, d := range o.ssd {
			ns = append(ns, fmt.Sprintf("%s/%v", d.node.id, d.viaTask))
		}
		sort.Strings(ns)
		rows = append(rows, fmt.Sprintf("%s:%d:%x:%v=%s", k, o.size, o.crc, o.dram.seg != nil, strings.Join(ns, ",")))
	})
	sort.Strings(rows)
	return strings.Join(rows, " ")
}

// reregChunks is the re-registration of the parallel test: nodes a, b and
// c each hold keys k0..k299 (c's k0..k99 with sizes of its own: a
// conflict), in chunks of 37; keys p0..p19 exist before (put to a's
// DRAM), and "gone" was put and removed (a removal log entry).
func reregChunks() map[string][]masterapi.SSDColumns {
	out := map[string][]masterapi.SSDColumns{}
	for _, id := range []string{"a", "b", "c"} {
		var objs []masterapi.SSDObject
		for i := range 300 {
			key := fmt.Sprint("k", i)
			size := int64(100 + i)
			if id == "c" && i < 100 {
				size += 7
			}
			objs = append(objs, masterapi.SSDObject{Key: key, Size: size, CRC: crcOf(key)})
		}
		for i := range 20 {
			key := fmt.Sprint("p", i)
			objs = append(objs, masterapi.SSDObject{Key: key, Size: 64, CRC: crcOf(key)})
		}
		objs = append(objs, masterapi.SSDObject{Key: "gone", Size: 64, CRC: crcOf("gone")})
		for lo := 0; lo < len(objs); lo += 37 {
			out[id] = append(out[id], masterapi.ColumnsOf(objs[lo:min(lo+37, len(objs))]))
		}
	}
	return out
}

// reregSetup mounts a, b and c, puts p0..p19 and puts and removes "gone".
func reregSetup(t *testing.T, s *Service) {
	t.Helper()
	for _, id := range []string{"a", "b", "c"} {
		mount(t, s, id, 1<<20)
	}
	for i := range 20 {
		put(t, s, fmt.Sprint("p", i), 64, "a")
	}
	put(t, s, "gone", 64, "a")
	if err := s.Remove(bg, "gone", true); err != nil {
		t.Fatal(err)
	}
}

// TestReRegisterChunksInParallel: the chunks of three nodes sent all at
// once (one goroutine per chunk, as a node's chunks in flight and several
// nodes do) leave the metadata that sending them one at a time leaves,
// except for the keys whose sizes conflict, where the first to come wins:
// there every key's object holds exactly the replicas whose
// re-registration was accepted, each of the object's size. The invariants
// (Check: counters, digests) hold.
func TestReRegisterChunksInParallel(t *testing.T) {
	chunks := reregChunks()
	serial, _ := testService(t, nil)
	reregSetup(t, serial)
	for _, id := range []string{"a", "b", "c"} {
		for _, c := range chunks[id] {
			if _, err := serial.ReRegisterSSDColumns(bg, id, c); err != nil {
				t.Fatal(err)
			}
		}
	}
	par, _ := testService(t, nil)
	reregSetup(t, par)
	type answer struct {
		id   string
		c    masterapi.SSDColumns
		errs []error
	}
	var (
		mu      sync.Mutex
		answers []answer
		wg      sync.WaitGroup
	)
	for id, cs := range chunks {
		for _, c := range cs {
			wg.Go(func() {
				errs, err := par.ReRegisterSSDColumns(bg, id, c)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				answers = append(answers, answer{id, c, errs})
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	if err := par.Check(); err != nil {
		t.Fatal(err)
	}
	// Outside the conflicting keys the two agree row by row.
	conflict := func(row string) bool {
		var i int
		_, err := fmt.Sscanf(row, "k%d:", &i)
		return err == nil && i < 100
	}
	strip := func(s string) []string { return slices.DeleteFunc(strings.Fields(s), conflict) }
	if a, b := strip(reregState(par)), strip(reregState(serial)); !slices.Equal(a, b) {
		t.Fatalf("parallel re-registration differs from serial:\nparallel: %v\nserial:   %v", a, b)
	}
	// The conflicting keys: accepted re-registrations are the replicas.
	accepted := map[string][]string{} // key -> node/size accepted
	for _, a := range answers {
		off := 0
		for i, l := range a.c.Lens {
			key := string(a.c.Keys[off : off+int(l)])
			off += int(l)
			switch {
			case key == "gone":
				mustIs(t, a.errs[i], errcode.ErrObjectNotFound)
			case a.errs[i] == nil:
				accepted[key] = append(accepted[key], fmt.Sprintf("%s/%d", a.id, a.c.Sizes[i]))
			default:
				mustIs(t, a.errs[i], errcode.ErrChecksumConflict)
			}
		}
	}
	for i := range 100 {
		key := fmt.Sprint("k", i)
		sh := par.shardOf(key)
		sh.mu.Lock()
		o := par.peekObj(sh, key)
		var have []string
		for _, d := range o.ssd {
			have = append(have, fmt.Sprintf("%s/%d", d.node.id, o.size))
		}
		sh.mu.Unlock()
		sort.Strings(have)
		got := accepted[key]
		sort.Strings(got)
		if !slices.Equal(have, got) {
			t.Fatalf("%s: replicas %v, accepted re-registrations %v", key, have, got)
		}
		if len(got) != 2 && !(len(got) == 1 && strings.HasPrefix(got[0], "c/")) {
			t.Fatalf("%s: accepted %v: want a and b, or c alone", key, got)
		}
	}
}

// TestReRegisterPassesBusyShard: a shard whose lock is held (another
// chunk is there) does not hold up the chunk's other shards: they are
// registered while it is busy, and its own keys once it is free.
func TestReRegisterPassesBusyShard(t *testing.T) {
	s, _ := testService(t, nil)
	mount(t, s, "a", 1<<20)
	var objs []masterapi.SSDObject
	for i := range 400 {
		objs = append(objs, masterapi.SSDObject{Key: fmt.Sprint("x", i), Size: 10, CRC: 1})
	}
	// The shard the chunk visits first.
	busy := int((s.reRegisterTurn.Load()+1)*reRegisterStride) & (len(s.shards) - 1)
	s.shards[busy].mu.Lock()
	done := make(chan error, 1)
	go func() {
		_, err := s.ReRegisterSSDColumns(bg, "a", masterapi.ColumnsOf(objs))
		done <- err
	}()
	registered := func(i int) bool {
		sh := &s.shards[i]
		if i != busy {
			sh.mu.Lock()
			defer sh.mu.Unlock()
		}
		for _, d := range objs {
			if s.shardIndex(d.Key) == i && s.peekObj(sh, d.Key) == nil {
				return false
			}
		}
		return true
	}
	// Wait on the objects counter (an atomic: polling it takes no shard
	// lock the chunk might find busy), added under each shard's lock.
	others := int64(0)
	for _, d := range objs {
		if s.shardIndex(d.Key) != busy {
			others++
		}
	}
	for deadline := time.Now().Add(20 * time.Second); s.cnt.objects.Load() < others; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			s.shards[busy].mu.Unlock()
			t.Fatalf("%d objects registered while the chunk's first shard was busy, want the other shards' %d", s.cnt.objects.Load(), others)
		}
	}
	for i := range s.shards {
		if i != busy && !registered(i) {
			s.shards[busy].mu.Unlock()
			t.Fatalf("shard %d: not every key registered", i)
		}
	}
	if registered(busy) {
		t.Fatal("the busy shard's keys were registered under another's lock")
	}
	s.shards[busy].mu.Unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !registered(busy) {
		t.Fatal("the busy shard's keys were not registered once it was free")
	}
	if st, _ := s.Stats(bg); st.SSDReplicas != 400 || st.Objects != 400 {
		t.Fatalf("stats %+v, want 400 objects and SSD replicas", st)
	}
}

// TestReRegisterCopiesCallersKeys: an in-process caller may reuse its key
// buffer once ReRegisterSSDColumns returned (the master copied the keys).
func TestReRegisterCopiesCallersKeys(t *testing.T) {
	s, _ := testService(t, nil)
	mount(t, s, "a", 1<<20)
	c := masterapi.ColumnsOf([]masterapi.SSDObject{{Key: "first", Size: 10, CRC: 1}, {Key: "other", Size: 10, CRC: 1}})
	if _, err := s.ReRegisterSSDColumns(bg, "a", c); err != nil {
		t.Fatal(err)
	}
	copy(c.Keys, "zzzzzyyyyy")
	for _, k := range []string{"first", "other"} {
		if ok, err := s.ExistKey(bg, k); err != nil || !ok {
			t.Fatalf("ExistKey(%q) = %v, %v after the caller reused its buffer", k, ok, err)
		}
	}
	if got := reregState(s); got != "first:10:1:false=a/false other:10:1:false=a/false" {
		t.Fatalf("state %s", got)
	}
}

// TestReRegisteredObjectReplicas: an object re-registered with its
// replica in the same allocation (ssdObject) takes further replicas and
// loses them like any other; counters and digests stay true (Check).
func TestReRegisteredObjectReplicas(t *testing.T) {
	s, _ := testService(t, nil)
	for _, id := range []string{"a", "b", "c"} {
		mount(t, s, id, 1<<20)
	}
	reg := func(id string) {
		t.Helper()
		if errs, err := s.ReRegisterSSDColumns(bg, id, masterapi.ColumnsOf([]masterapi.SSDObject{{Key: "k", Size: 10, CRC: 1}})); err != nil || errs[0] != nil {
			t.Fatal(err, errs)
		}
		if err := s.Check(); err != nil {
			t.Fatal(err)
		}
	}
	evict := func(id string) {
		t.Helper()
		if _, err := s.EvictSSDReplica(bg, id, []string{"k"}); err != nil {
			t.Fatal(err)
		}
		if err := s.Check(); err != nil {
			t.Fatal(err)
		}
	}
	reg("a")
	reg("b")
	evict("a")
	reg("c")
	reg("a")
	if got := reregState(s); got != "k:10:1:false=a/false,b/false,c/false" {
		t.Fatalf("state %s", got)
	}
	evict("b")
	evict("c")
	evict("a")
	if got := reregState(s); got != "" {
		t.Fatalf("state %q after every replica went", got)
	}
	reg("b")
	if got := reregState(s); got != "k:10:1:false=b/false" {
		t.Fatalf("state %s", got)
	}
}
