package master

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tierstore/tierstore/admission"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
)

// offloadAll plays node n: it fetches every queued task and answers it
// persisted.
func offloadAll(t *testing.T, api masterapi.API, n string) int {
	t.Helper()
	ts, err := heartbeat(api, n, 0)
	if err != nil {
		t.Fatal(err)
	}
	var req masterapi.NotifyRequest
	req.Node = n
	for _, task := range ts {
		req.Persisted = append(req.Persisted, masterapi.SSDObject{Key: task.Key, Size: task.Size, CRC: task.CRC})
	}
	if len(ts) > 0 {
		errs, err := api.NotifyOffloadSuccess(bg, req)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range errs {
			if e != nil {
				t.Fatalf("persisted %s: %v", ts[i].Key, e)
			}
		}
	}
	return len(ts)
}

// TestReadTrafficDoesNotStarvePuts guards issue 9 item 2 (invariant 4: a
// lease keeps the object readable, not its DRAM replica). The reported
// load: every object is read again and again (each lookup renews its 5 s
// lease) while new objects keep arriving into a full segment. Objects on
// SSD may leave DRAM inside their lease, so every put succeeds at once
// (before: NO_AVAILABLE_HANDLE for nearly all of them); the evicted ones
// stay readable from SSD within their lease; a reader still holding an
// evicted DRAM replica reports it harmlessly (REPLICA_NOT_FOUND, no other
// replica dropped). In-process and over gRPC.
func TestReadTrafficDoesNotStarvePuts(t *testing.T) {
	for _, via := range []string{"service", "grpc"} {
		t.Run(via, func(t *testing.T) {
			s, clk := offloadService(t, func(c *Config) { c.DefaultKVLeaseTTL = 5 * time.Second })
			var api masterapi.API = s
			if via == "grpc" {
				api = remoteService(t, s)
			}
			const obj = 4 << 10
			mount(t, api, "a", 16*obj) // room for 16 objects
			var keys []string
			firstList := map[string]masterapi.ObjectInfo{} // each key's list from the round it was put in
			for i := 0; i < 64; i++ {
				k := fmt.Sprint("k", i)
				r, err := api.PutStart(bg, masterapi.PutStartRequest{Key: k, Size: obj, CRC: crcOf(k), PreferredNode: "a"})
				if err != nil {
					t.Fatalf("put %d of a read-hot working set: %v", i, err)
				}
				if err := api.PutEnd(bg, k, r.PutToken); err != nil {
					t.Fatal(err)
				}
				keys = append(keys, k)
				offloadAll(t, api, "a") // eager: the node persists each object
				// Readers: every object is read after every put; leases
				// never lapse (1 ms per round).
				res, err := api.BatchGetReplicaList(bg, keys)
				if err != nil {
					t.Fatal(err)
				}
				for j, x := range res {
					if x.Err != nil {
						t.Fatalf("round %d: %s unreadable inside its lease: %v", i, keys[j], x.Err)
					}
				}
				firstList[k] = res[len(res)-1].Info
				clk.Advance(time.Millisecond)
			}
			// Most DRAM replicas went inside their lease; their ranges
			// belong to other objects now. A reader holding an old list
			// finds wrong bytes and reports that replica: harmless.
			stale := 0
			for _, k := range keys {
				info, err := api.GetReplicaList(bg, k)
				if err != nil || kinds(info) == "DRAM@a SSD@a " {
					continue
				}
				if kinds(firstList[k]) != "DRAM@a SSD@a " {
					t.Fatalf("%s: first list %s", k, kinds(firstList[k]))
				}
				stale++
				mustIs(t, api.ReportBadReplica(bg, k, crcOf(k), firstList[k].Replicas[0]), errcode.ErrReplicaNotFound)
				if info, err := api.GetReplicaList(bg, k); err != nil || kinds(info) != "SSD@a " {
					t.Fatalf("%s after the stale report: %s %v", k, kinds(info), err)
				}
			}
			if stale < 64-16 {
				t.Fatalf("%d objects left DRAM, want at least %d", stale, 64-16)
			}
			if st, _ := s.Stats(bg); st.Objects != 64 || st.SSDReplicas != 64 || st.DRAMReplicas > 16 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// TestLeaseKeepsDRAMForItsReaders guards issue 9 item 2's limit (invariant
// 4): DRAM of a leased object goes only when every reader of the lease was
// given an SSD replica. A lookup that listed only the DRAM replica
// (before the offload) keeps it until that lease ends; so does an SSD
// replica dropped inside the lease.
func TestLeaseKeepsDRAMForItsReaders(t *testing.T) {
	s, clk := offloadService(t, func(c *Config) { c.EvictionRatio = 1 })
	mount(t, s, "a", 1<<20)
	put(t, s, "k", 64, "a")
	if info, err := s.GetReplicaList(bg, "k"); err != nil || kinds(info) != "DRAM@a " {
		t.Fatalf("%s %v", kinds(info), err)
	}
	clk.Advance(time.Second)
	offloadAll(t, s, "a")
	if n := s.EvictNow(); n != 0 {
		t.Fatal("DRAM dropped under a reader that was given only the DRAM replica")
	}
	// A later lookup lists both, but the first reader's lease still runs.
	if info, _ := s.GetReplicaList(bg, "k"); kinds(info) != "DRAM@a SSD@a " {
		t.Fatalf("%s", kinds(info))
	}
	if n := s.EvictNow(); n != 0 {
		t.Fatal("DRAM dropped before the DRAM-only lease ended")
	}
	clk.Advance(s.cfg.DefaultKVLeaseTTL - time.Second + time.Millisecond) // first lease over, second runs
	if n := s.EvictNow(); n != 1 {
		t.Fatal("DRAM kept although every running lease was given the SSD replica")
	}
	if info, err := s.GetReplicaList(bg, "k"); err != nil || kinds(info) != "SSD@a " {
		t.Fatalf("%s %v", kinds(info), err)
	}

	// An SSD replica dropped inside the lease: its readers now rely on
	// DRAM, which stays for the lease, even when another SSD replica
	// (which they were not given) appears.
	put(t, s, "m", 64, "a")
	offloadAll(t, s, "a")
	if info, _ := s.GetReplicaList(bg, "m"); kinds(info) != "DRAM@a SSD@a " {
		t.Fatalf("%s", kinds(info))
	}
	if res, err := s.EvictSSDReplica(bg, "a", []string{"m"}); err != nil || res.Dropped != 1 {
		t.Fatal(res, err)
	}
	mount(t, s, "b", 1<<20)
	s.ReRegisterSSDObjects(bg, "b", []masterapi.SSDObject{{Key: "m", Size: 64, CRC: crcOf("m")}})
	if n := s.EvictNow(); n != 0 {
		t.Fatal("DRAM dropped while readers hold a list whose SSD replica was dropped")
	}
	if info, err := s.GetReplicaList(masterapi.WithOffloadPath(bg), "m"); err != nil || kinds(info) != "DRAM@a SSD@b " {
		t.Fatalf("%s %v", kinds(info), err)
	}
}

// waitingPut starts PutStart of key on api in a goroutine and returns once
// it is waiting for room (the putWaiting hook), with the channel its result
// arrives on and the channel that receives each later wait.
func waitingPut(t *testing.T, s *Service, api masterapi.API, ctx context.Context, key string, size int64) (<-chan error, <-chan struct{}) {
	t.Helper()
	waiting := make(chan struct{}, 1)
	s.hooks.putWaiting = func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	}
	done := make(chan error, 1)
	go func() {
		r, err := api.PutStart(ctx, masterapi.PutStartRequest{Key: key, Size: size, CRC: crcOf(key)})
		if err == nil {
			err = api.PutEnd(bg, key, r.PutToken)
		}
		done <- err
	}()
	select {
	case <-waiting:
	case err := <-done:
		t.Fatalf("PutStart of %s did not wait for room: %v", key, err)
	}
	return done, waiting
}

// TestPutStartWaitsForRoom guards issue 9 item 2: under pressure that
// eviction cannot relieve at once, PutStart waits (bounded by its context
// and put_start_max_wait) and is woken by whatever makes room: leases ending
// (Tick), a range freed (PutRevoke), a put ended, offloads answered (offload_on_evict
// queues victims instead of dropping them). It fails at once when no
// segment could ever hold the object, and with NO_AVAILABLE_HANDLE when its
// context ends. In-process and over gRPC.
func TestPutStartWaitsForRoom(t *testing.T) {
	for _, via := range []string{"service", "grpc"} {
		t.Run(via, func(t *testing.T) {
			s, clk := offloadService(t, func(c *Config) { c.PutStartMaxWait = 30 * time.Second; c.Admission = admission.None{} })
			var api masterapi.API = s
			if via == "grpc" {
				api = remoteService(t, s)
			}
			const obj = 4 << 10
			mount(t, api, "a", 4*obj)
			for i := 0; i < 4; i++ {
				put(t, api, fmt.Sprint("leased", i), obj, "a")
				api.ExistKey(bg, fmt.Sprint("leased", i))
			}
			ctx, cancel := context.WithTimeout(bg, 30*time.Second)
			defer cancel()
			// Leases end: the Tick after them wakes the put.
			done, _ := waitingPut(t, s, api, ctx, "after-leases", obj)
			clk.Advance(s.cfg.DefaultKVLeaseTTL + time.Millisecond)
			s.Tick()
			if err := <-done; err != nil {
				t.Fatalf("put after the leases ended: %v", err)
			}
			// A put in progress is revoked: its range wakes the next put.
			r, err := api.PutStart(bg, masterapi.PutStartRequest{Key: "revoked", Size: obj}) // evicts an unleased object
			if err != nil {
				t.Fatal(err)
			}
			api.BatchExistKey(bg, allKeys(s)) // everything in DRAM leased again
			done, again := waitingPut(t, s, api, ctx, "after-revoke", obj)
			s.Tick() // a wake-up that brings no room: the put waits again
			select {
			case <-again:
			case err := <-done:
				t.Fatalf("put woken without room: %v", err)
			}
			if err := api.PutRevoke(bg, "revoked", r.PutToken); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("put after a revoke: %v", err)
			}
			// A put in progress ends: its object may be evicted now.
			r, err = api.PutStart(bg, masterapi.PutStartRequest{Key: "ending", Size: obj}) // evicts after-revoke
			if err != nil {
				t.Fatal(err)
			}
			api.BatchExistKey(bg, allKeys(s))
			done, _ = waitingPut(t, s, api, ctx, "after-end", obj)
			if err := api.PutEnd(bg, "ending", r.PutToken); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("put after a PutEnd: %v", err)
			}
			// Bounded by the caller's context.
			api.BatchExistKey(bg, allKeys(s))
			short, cancelShort := context.WithCancel(bg)
			done, _ = waitingPut(t, s, api, short, "never", obj)
			cancelShort()
			if err := <-done; !errors.Is(err, errcode.ErrNoAvailableHandle) && !errors.Is(err, errcode.ErrContextCanceled) {
				t.Fatalf("put whose context ended: %v", err)
			}
			// Larger than any segment: at once, no wait.
			s.hooks.putWaiting = func() { t.Error("waited for a put no segment can hold") }
			_, err = api.PutStart(bg, masterapi.PutStartRequest{Key: "huge", Size: 8 * obj})
			mustIs(t, err, errcode.ErrNoAvailableHandle)
			s.hooks.putWaiting = nil
			if v := metricValue(t, s, "tierstore_master_put_start_waits_total", "", ""); v != 4 {
				t.Fatalf("put_start_waits_total %v", v)
			}
		})
	}
}

// TestPutStartWaitsForOnEvictOffload guards issue 9 item 2 with
// offload_on_evict: eviction queues its victims for offload instead of
// dropping them, so nothing is freed at once; the put waits and the node's
// persisted answers wake it, after which the victims leave DRAM.
func TestPutStartWaitsForOnEvictOffload(t *testing.T) {
	s, _ := offloadService(t, func(c *Config) { c.PutStartMaxWait = 30 * time.Second; c.OffloadOnEvict = true; c.EvictionRatio = 0.5 })
	const obj = 4 << 10
	mount(t, s, "a", 4*obj)
	for i := 0; i < 4; i++ {
		put(t, s, fmt.Sprint("k", i), obj, "a")
	}
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	done, _ := waitingPut(t, s, s, ctx, "new", obj)
	if n := offloadAll(t, s, "a"); n == 0 {
		t.Fatal("eviction queued no offload")
	}
	if err := <-done; err != nil {
		t.Fatalf("put after the offloads: %v", err)
	}
	if _, err := s.GetReplicaList(masterapi.WithOffloadPath(bg), "new"); err != nil {
		t.Fatal(err)
	}
}

// TestWaitingPutsScanOncePerRing: puts waiting for room in a DRAM whose
// every object is pinned by its offload task (eager offload, nothing on
// SSD yet) are all woken by each ring of the room broadcast; between them
// they run at most one eviction round (a scan of every object) per ring,
// not one or more each: a round that finds nothing to evict holds until
// the next ring.
func TestWaitingPutsScanOncePerRing(t *testing.T) {
	s, _ := offloadService(t, func(c *Config) { c.PutStartMaxWait = 30 * time.Second })
	const obj, waiters, rings = 4 << 10, 8, 5
	mount(t, s, "a", 4*obj)
	for i := range 4 {
		put(t, s, fmt.Sprint("pinned", i), obj, "a") // eager: queued for offload, not evictable
	}
	waits := make(chan struct{}, waiters*(rings+2))
	s.hooks.putWaiting = func() { waits <- struct{}{} }
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	done := make(chan error, waiters)
	for i := range waiters {
		go func() {
			_, err := s.PutStart(ctx, masterapi.PutStartRequest{Key: fmt.Sprint("w", i), Size: obj, CRC: crcOf("w")})
			done <- err
		}()
	}
	for range waiters {
		<-waits
	}
	before := s.evictGen.Load()
	for range rings {
		s.room.signal()
		for range waiters {
			<-waits // each waiter retried and waits again
		}
	}
	if rounds := s.evictGen.Load() - before; rounds > rings {
		t.Fatalf("%d eviction rounds for %d waiting puts woken %d times; want at most one per ring", rounds, waiters, rings)
	}
	cancel()
	for range waiters {
		if err := <-done; !errors.Is(err, errcode.ErrNoAvailableHandle) {
			t.Fatalf("waiting put after its context ended: %v", err)
		}
	}
}

// TestPutEndRingsOnlyForAnEvictableObject: a put's end rings the room
// broadcast when its object may be evicted now, not when it is pinned by
// the offload task its put queued (eager), which rings once answered.
func TestPutEndRingsOnlyForAnEvictableObject(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy admission.Policy
		ring   bool
	}{{"eager", nil, false}, {"none", admission.None{}, true}} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := offloadService(t, func(c *Config) {
				if tc.policy != nil {
					c.Admission = tc.policy
				}
			})
			mount(t, s, "a", 1<<20)
			before := s.room.gen.Load()
			put(t, s, "k", 4<<10, "a")
			if rang := s.room.gen.Load() != before; rang != tc.ring {
				t.Fatalf("put end rang the room broadcast: %v, want %v", rang, tc.ring)
			}
		})
	}
}
