package master

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/tierstore/tierstore/admission"
	"github.com/tierstore/tierstore/masterapi"
	"pgregory.net/rapid"
)

// coldDouble is an admission policy that offloads nothing and answers
// ColdPut from the test's set.
type coldDouble struct {
	admission.None
	cold map[string]bool
}

func (c *coldDouble) ColdPut(o admission.Object) bool { return c.cold[o.Key] }

// inDRAM reports whether key has a DRAM replica, without a lookup (which
// would make it warm).
func inDRAM(s *Service, key string) bool {
	sh, err := s.lockKey(key)
	if err != nil {
		return false
	}
	defer sh.mu.Unlock()
	o := s.peekObj(sh, key)
	return o != nil && o.dram.seg != nil
}

// TestColdPutOrderMatchesReference: over random puts (cold or warm) and
// lookup hits, every DRAM eviction takes the victim the reference order
// names: the newest cold put not read since, else the least recently
// used warm object (a hit warms a cold put).
func TestColdPutOrderMatchesReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		pol := &coldDouble{cold: map[string]bool{}}
		clk := NewManualClock(t0)
		cfg := DefaultConfig()
		cfg.Clock, cfg.MonitorInterval, cfg.Shards, cfg.PutStartMaxWait = clk, 0, 16, 0
		cfg.Logger = slog.New(slog.DiscardHandler)
		cfg.Admission = pol
		cfg.EvictionRatio = 0.01 // one victim per round
		cfg.DefaultKVLeaseTTL = time.Millisecond
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		const obj, slots = 4 << 10, 5
		if err := s.MountSegment(bg, masterapi.MountRequest{Node: "a", Endpoint: "a:1", Segment: "seg0", Size: slots * obj}); err != nil {
			t.Fatal(err)
		}
		type ref struct {
			key  string
			use  int64 // step of the last use
			cold bool  // put cold and not read since
		}
		var res []ref
		victim := func() int {
			best := -1
			for i, r := range res {
				switch {
				case best < 0:
					best = i
				case r.cold != res[best].cold:
					if r.cold {
						best = i
					}
				case r.cold && r.use > res[best].use, !r.cold && r.use < res[best].use:
					best = i
				}
			}
			return best
		}
		n := 0
		for step := int64(1); step <= 40; step++ {
			if err := s.Check(); err != nil {
				t.Fatal(err)
			}
			clk.Advance(2 * time.Millisecond) // every lease has ended
			if len(res) > 0 && rapid.IntRange(0, 2).Draw(t, "op") == 0 {
				i := rapid.IntRange(0, len(res)-1).Draw(t, "hit")
				if _, err := s.GetReplicaList(bg, res[i].key); err != nil {
					t.Fatalf("step %d: lookup of resident %s: %v", step, res[i].key, err)
				}
				res[i].use, res[i].cold = step, false
				continue
			}
			key := fmt.Sprint("k", n)
			n++
			cold := rapid.Bool().Draw(t, "cold")
			pol.cold[key] = cold
			var gone string
			if len(res) == slots {
				v := victim()
				gone = res[v].key
				res = append(res[:v], res[v+1:]...)
			}
			r, err := s.PutStart(bg, masterapi.PutStartRequest{Key: key, Size: obj, CRC: crcOf(key), PreferredNode: "a"})
			if err != nil {
				t.Fatalf("step %d: PutStart(%s): %v", step, key, err)
			}
			if err := s.PutEnd(bg, key, r.PutToken); err != nil {
				t.Fatalf("step %d: PutEnd(%s): %v", step, key, err)
			}
			res = append(res, ref{key: key, use: step, cold: cold})
			if gone != "" && inDRAM(s, gone) {
				t.Fatalf("step %d: reference victim %s still in DRAM (residents %+v)", step, gone, res)
			}
			for _, r := range res {
				if !inDRAM(s, r.key) {
					t.Fatalf("step %d: %s evicted instead of %s (residents %+v)", step, r.key, gone, res)
				}
			}
		}
	})
}
