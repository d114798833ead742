package master

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
)

// TestConcurrentChaos runs puts (of 1 to 3 replicas), lookups, removes, evictions, offload
// round trips, bad-replica reports, reconciles, node expiries and remounts,
// re-registrations (compact records, frozen and thawed), removals by pattern
// and prefetches on many goroutines,
// then verifies every internal invariant with Check. Errors returned along
// the way must all be documented codes.
func TestConcurrentChaos(t *testing.T) {
	s, clk := testService(t, func(c *Config) {
		c.EnableOffload = true
		c.OffloadingQueueLimit = 50
		c.EvictionRatio = 0.2
		c.ClientTTL = time.Hour
		c.PutStartMaxWait = 5 * time.Millisecond // puts also wait for room
	})
	nodes := []string{"a", "b", "c"}
	for _, n := range nodes {
		mount(t, s, n, 64<<10)
	}
	allowed := []error{errcode.ErrObjectExists, errcode.ErrObjectNotFound, errcode.ErrNoAvailableHandle,
		errcode.ErrReplicaNotReady, errcode.ErrReplicaGone, errcode.ErrObjectHasLease, errcode.ErrNeedRemount,
		errcode.ErrKeysUltraLimit, errcode.ErrChecksumConflict, errcode.ErrInvalidParams, errcode.ErrSegmentExists, errcode.ErrReplicaNotFound}
	var mu sync.Mutex
	var unexpected []error
	note := func(err error) {
		if err == nil {
			return
		}
		for _, a := range allowed {
			if errors.Is(err, a) {
				return
			}
		}
		mu.Lock()
		unexpected = append(unexpected, err)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 42))
			for i := 0; i < 400; i++ {
				k := fmt.Sprint("k", r.IntN(300))
				n := nodes[r.IntN(len(nodes))]
				switch op := r.IntN(14); op {
				case 0, 1:
					size := int64(1 + r.IntN(8<<10))
					rep, err := s.PutStart(bg, masterapi.PutStartRequest{Key: k, Size: size, CRC: crcOf(k), PreferredNode: n, SoftPin: r.IntN(4) == 0,
						Replicas: r.IntN(4), AllowFewer: r.IntN(2) == 0}) // 0 (one) to 3 replicas on the 3 nodes
					note(err)
					if err == nil {
						if r.IntN(5) == 0 {
							note(s.PutRevoke(bg, k, rep.PutToken))
						} else {
							note(s.PutEnd(bg, k, rep.PutToken))
						}
					}
				case 2:
					res, err := s.BatchGetReplicaList(bg, []string{k, k, fmt.Sprint("k", r.IntN(300))})
					note(err)
					if err == nil && res[0].Err == nil && len(res[0].Info.Replicas) > 0 && r.IntN(8) == 0 {
						info := res[0].Info
						note(s.ReportBadReplica(bg, k, info.CRC, info.Replicas[r.IntN(len(info.Replicas))]))
					}
				case 3:
					_, err := s.ExistKey(bg, k)
					note(err)
				case 4:
					note(s.Remove(bg, k, r.IntN(2) == 0))
				case 5:
					s.EvictNow()
				case 6:
					ts, err := heartbeat(s, n, 5)
					note(err)
					var req masterapi.NotifyRequest
					req.Node = n
					for j, task := range ts {
						if j%3 == 2 {
							req.Failed = append(req.Failed, masterapi.OffloadFailure{Key: task.Key, Retryable: true})
						} else {
							req.Persisted = append(req.Persisted, masterapi.SSDObject{Key: task.Key, Size: task.Size, CRC: task.CRC})
						}
					}
					errs, err := s.NotifyOffloadSuccess(bg, req)
					note(err)
					for _, e := range errs {
						note(e)
					}
				case 7:
					_, err := s.EvictSSDReplica(bg, n, []string{k})
					note(err)
				case 8:
					if r.IntN(10) == 0 {
						_, err := reconcileAll(s, n, []string{k})
						note(err)
					}
				case 9:
					if r.IntN(20) == 0 {
						s.ExpireNode(n)
						note(s.MountSegment(bg, masterapi.MountRequest{Node: n, Endpoint: n + ":1", Segment: "seg0", Size: 64 << 10}))
					}
				case 10:
					_, err := s.EvictDRAM(bg, []string{k}, false)
					note(err)
				case 11:
					if g == 0 && r.IntN(10) == 0 {
						clk.Advance(time.Second)
						s.Tick()
					}
				case 12: // a node re-registers keys: compact records of the unknown ones
					var objs []masterapi.SSDObject
					for range 1 + r.IntN(4) {
						rk := fmt.Sprint("k", r.IntN(300))
						objs = append(objs, masterapi.SSDObject{Key: rk, Size: int64(1 + r.IntN(8<<10)), CRC: crcOf(rk)})
					}
					errs, err := s.ReRegisterSSDColumns(bg, n, masterapi.ColumnsOf(objs))
					note(err)
					for _, e := range errs {
						note(e)
					}
				case 13:
					if r.IntN(20) == 0 {
						_, err := s.RemoveByRegex(bg, "^k1", r.IntN(2) == 0)
						note(err)
					} else {
						_, err := s.Prefetch(bg, []string{k})
						note(err)
					}
				}
			}
		}(g)
	}
	wg.Wait()
	if len(unexpected) > 0 {
		t.Fatalf("%d unexpected errors, first: %v", len(unexpected), unexpected[0])
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	// Let every lease and pin lapse, sweep, and check again.
	clk.Advance(time.Hour / 2)
	for _, n := range nodes {
		s.Ping(bg, n)
	}
	s.Tick()
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	st, _ := s.Stats(bg)
	t.Logf("final %+v", st)
}
