package node

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tierstore/tierstore/admission"
	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/master"
	"github.com/tierstore/tierstore/masterapi"
	"github.com/tierstore/tierstore/mastergrpc"
)

// Admission and promotion across the real RPC boundary: a master running
// tinylfu served over gRPC on loopback, a node with a real tier (io_uring
// backend, pebble index, files in a temporary directory) talking to it
// through mastergrpc.Client, and a client of the same remote master.

type admStack struct {
	m  *master.Service
	tl *admission.TinyLFU
	n  *Node
	c  *client.Client
	r  *mastergrpc.Client
	// clk is the master's clock when a test set a manual one.
	clk *master.ManualClock
}

// admMasterConfig: tinylfu, promotion at promote (0: off), short leases.
func admMasterConfig(promote int64) master.Config {
	mc := testMasterConfig()
	mc.AdmissionFlags.Policy = admission.PolicyTinyLFU
	mc.AdmissionFlags.PromoteMinFreq = promote
	mc.DefaultKVLeaseTTL = time.Millisecond
	return mc
}

// newAdmStack starts the stack; edit adjusts the node's configuration,
// wrap (nil: none) what the node sees of the master.
func newAdmStack(t *testing.T, mc master.Config, edit func(*Config), wrap func(*mastergrpc.Client) masterapi.NodeAPI, opts ...Option) *admStack {
	t.Helper()
	s := &admStack{m: newMaster(t, mc)}
	s.tl = s.m.Policy().(*admission.TinyLFU)
	r, err := mastergrpc.Dial(context.Background(), serveMaster(t, s.m))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	s.r = r
	nc := testNodeConfig("127.0.0.1:0")
	nc.EnableOffload = true
	nc.SSDDir = t.TempDir()
	nc.Backend = "uring"
	if edit != nil {
		edit(&nc)
	}
	var api masterapi.NodeAPI = r
	if wrap != nil {
		api = wrap(r)
	}
	n, err := Start(context.Background(), nc, api, append([]Option{WithName("adm-node")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	s.n = n
	// The replica-location cache off: these tests count reads in the
	// master's sketch at once, and a get served from the cache reaches the
	// master only as a Touch up to 100 ms later (client/touch.go):
	// TestWorthFollowsNewSketch failed 1 run in 5 with the cache on and no
	// touches, its reads of DRAM copies counted once.
	s.c = newTestClient(t, client.Config{Master: r, LocalNode: n, LocationCacheEntries: -1})
	return s
}

// drain runs offload rounds until the master has no task of the node
// queued or in flight (bounded).
func (s *admStack) drain(t *testing.T) {
	t.Helper()
	for range 200 {
		st, err := s.m.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.OffloadQueued+st.OffloadInFlight == 0 {
			return
		}
		s.n.OffloadNow()
	}
	t.Fatal("offload queue did not drain in 200 rounds")
}

func admKey(prefix string, i int) string { return fmt.Sprintf("%s-%03d", prefix, i) }

// noReport drops the node's SSD report from every heartbeat: the master's
// admission policy sees a node that never reports.
type noReport struct{ masterapi.NodeAPI }

func (n noReport) Heartbeat(ctx context.Context, req masterapi.HeartbeatRequest) (masterapi.HeartbeatReply, error) {
	req.SSD = nil
	return n.NodeAPI.Heartbeat(ctx, req)
}

// scanAfterHotSet fills the SSD with a hot set (each key read four
// times), then puts a one-pass scan twice the DRAM, and returns the
// policy's decisions and how many hot keys are still readable.
func scanAfterHotSet(t *testing.T, wrap func(*mastergrpc.Client) masterapi.NodeAPI) (admission.TinyLFUStats, int) {
	s := newAdmStack(t, admMasterConfig(0), func(c *Config) {
		c.Memory = 1 << 20 // 16 objects
		c.SSDCapacity = 4 << 20
		c.HeartbeatInterval = 2 * time.Millisecond // puts wait for on-evict offloads
	}, wrap)
	ctx := context.Background()
	val := rnd(64 << 10)
	s.n.OffloadNow()         // the sketch, and the master's wish for reports
	s.n.OffloadNow()         // the first report (an empty tier)
	const hot, scan = 40, 64 // 2.5 MiB hot; the scan is 4 MiB
	for i := range hot {
		k := admKey("hot", i)
		if err := s.c.Put(ctx, k, val); err != nil {
			t.Fatal(err)
		}
		for range 4 {
			if _, err := s.c.Get(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.drain(t)
	for i := range scan {
		if err := s.c.Put(ctx, admKey("scan", i), val); err != nil {
			t.Fatal(err)
		}
	}
	s.drain(t)
	alive := 0
	for i := range hot {
		if _, err := s.c.Get(ctx, admKey("hot", i)); err == nil {
			alive++
		}
	}
	if err := s.m.Check(); err != nil {
		t.Fatal(err)
	}
	return s.tl.Stats(), alive
}

// TestSSDReportReachesMaster: with the node's SSD report carried by the
// heartbeat, tinylfu turns a one-pass scan away once the SSD is full and
// the hot set survives; without it (a node whose reports are dropped) every
// victim is admitted ("no_report") and the scan flushes the hot set.
func TestSSDReportReachesMaster(t *testing.T) {
	const hotPerBucket = 8 // 64 KiB keys in a bucket of scanAfterHotSet's tier
	st, alive := scanAfterHotSet(t, nil)
	t.Logf("with reports: %v, %d/40 hot keys alive (SSD evictions of admitted keys read again: %d)", st.Decisions, alive, st.RegretPushed)
	if st.Reports == 0 {
		t.Fatal("the master received no SSD report")
	}
	if st.Decisions["lost"] == 0 {
		t.Fatalf("no scan victim was rejected: %v", st.Decisions)
	}
	if st.Decisions["no_report"] != 0 {
		t.Fatalf("decisions without a report: %v", st.Decisions)
	}
	// No hot key may go. Before the master counted objects admitted whose
	// task was not queued yet in a report (issue 23 item 4), a report
	// arriving in between made the room estimate admit one object too
	// many in 5 runs of 120, the tier evicted its least recently used
	// bucket, and 8 hot keys were read again as misses (RegretPushed 8).
	if alive != 40 || st.RegretPushed != 0 {
		t.Fatalf("%d of 40 hot keys survived the scan, %d pushed out of SSD came back", alive, st.RegretPushed)
	}

	st, alive = scanAfterHotSet(t, func(r *mastergrpc.Client) masterapi.NodeAPI { return noReport{r} })
	t.Logf("without reports: %v, %d/40 hot keys alive", st.Decisions, alive)
	if st.Reports != 0 || st.Rejected != 0 || st.Decisions["no_report"] == 0 {
		t.Fatalf("a node without reports: %d reports, decisions %v", st.Reports, st.Decisions)
	}
	if alive >= 40-hotPerBucket {
		t.Fatalf("without reports %d of 40 hot keys survived: the scenario does not tell the two apart", alive)
	}
}

// bucketOrder writes, through explicit offload tasks, a bucket of four hot
// keys (each read five times while in DRAM, so the master's sketch rates
// them high), then a bucket of four cold keys, then filler buckets until
// the tier evicts; it returns how many hot and cold keys are still on SSD.
// The hot bucket is the least recently used: lru evicts it first.
func bucketOrder(t *testing.T, policy string) (hot, cold int) {
	s := newAdmStack(t, admMasterConfig(0), func(c *Config) {
		c.BucketEviction = policy
		c.BucketSizeLimit = 256 << 10 // four 64 KiB objects a bucket
		c.SSDCapacity = 4 * BucketFileLimit(c.BucketSizeLimit)
	}, nil)
	ctx := context.Background()
	val := rnd(64 << 10)
	batch := func(prefix string, reads int) {
		for i := range 4 {
			k := admKey(prefix, i)
			if err := s.c.Put(ctx, k, val); err != nil {
				t.Fatal(err)
			}
			for range reads {
				if _, err := s.c.Get(ctx, k); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.m.Enqueue(k); err != nil {
				t.Fatal(err)
			}
		}
		s.drain(t)
	}
	batch("hot", 5)
	batch("cold", 0)
	for f := 0; s.n.Stats().Tier.Evictions == 0; f++ {
		if f == 8 {
			t.Fatal("no SSD eviction after 8 filler buckets")
		}
		batch(fmt.Sprintf("fill%d", f), 0)
	}
	if s.n.Stats().SketchesReceived == 0 {
		t.Fatal("the node received no admission sketch")
	}
	onSSD := func(prefix string) (n int) {
		for i := range 4 {
			if ok, err := s.n.tier.Exists([]byte(admKey(prefix, i))); err != nil {
				t.Fatal(err)
			} else if ok {
				n++
			}
		}
		return n
	}
	return onSSD("hot"), onSSD("cold")
}

// TestWorthEvictionUsesMasterSketch: with --bucket_eviction=worth the
// node ranks its buckets by the master's frequencies (the sketch the
// heartbeat carries): the hot bucket survives and the cold one goes,
// although the hot one is the least recently used; lru evicts the hot one.
func TestWorthEvictionUsesMasterSketch(t *testing.T) {
	hot, cold := bucketOrder(t, "worth")
	if hot != 4 || cold != 0 {
		t.Fatalf("worth: %d hot and %d cold keys on SSD after eviction, want 4 and 0", hot, cold)
	}
	hot, cold = bucketOrder(t, "lru")
	if hot != 0 || cold != 4 {
		t.Fatalf("lru: %d hot and %d cold keys on SSD after eviction, want 0 and 4", hot, cold)
	}
}

// TestWorthFollowsNewSketch: the tier caches each bucket's worth, so the
// node hands it every new sketch, not only the first: a bucket that was
// the coldest and whose objects became the most read stops being the next
// victim once the node has the master's next sketch.
func TestWorthFollowsNewSketch(t *testing.T) {
	s := newAdmStack(t, admMasterConfig(0), func(c *Config) {
		c.BucketEviction = "worth"
		c.BucketSizeLimit = 256 << 10 // four 64 KiB objects a bucket
		c.SSDCapacity = 8 * BucketFileLimit(c.BucketSizeLimit)
	}, nil)
	ctx := context.Background()
	val := rnd(64 << 10)
	batch := func(prefix string, reads int) {
		for i := range 4 {
			k := admKey(prefix, i)
			if err := s.c.Put(ctx, k, val); err != nil {
				t.Fatal(err)
			}
			s.reads(t, k, reads)
			if err := s.m.Enqueue(k); err != nil {
				t.Fatal(err)
			}
		}
		s.drain(t)
	}
	batch("a", 5)
	batch("b", 0)
	if s.n.Stats().SketchesReceived == 0 {
		t.Fatal("the node received no admission sketch")
	}
	next := func() string {
		t.Helper()
		o, err := s.n.tier.(WorthTier).Outlook(1)
		if err != nil || len(o.Victims) == 0 || len(o.Victims[0].Keys) == 0 {
			t.Fatalf("outlook: %+v %v", o, err)
		}
		return string(o.Victims[0].Keys[0][:1])
	}
	if v := next(); v != "b" {
		t.Fatalf("the next victim holds %s keys, want the cold b", v)
	}
	for i := range 4 {
		s.reads(t, admKey("b", i), 12)
	}
	got := s.n.Stats().SketchesReceived
	s.n.roundMu.Lock()
	s.n.adm.version = 0 // a whole sketch is due at the next heartbeat
	s.n.roundMu.Unlock()
	s.n.OffloadNow()
	if s.n.Stats().SketchesReceived != got+1 {
		t.Fatal("setup: no new sketch reached the node")
	}
	if v := next(); v != "a" {
		t.Fatalf("after the new sketch the next victim holds %s keys, want a (b is read more now)", v)
	}
}

// reads gets key n times.
func (s *admStack) reads(t *testing.T, key string, n int) {
	t.Helper()
	for range n {
		if _, err := s.c.Get(context.Background(), key); err != nil {
			t.Fatal(err)
		}
	}
}

// ssdOnly puts key, offloads it and drops its DRAM copy: it is then read
// from SSD only.
func (s *admStack) ssdOnly(t *testing.T, key string, val []byte) {
	t.Helper()
	ctx := context.Background()
	if err := s.c.Put(ctx, key, val); err != nil {
		t.Fatal(err)
	}
	if err := s.m.Enqueue(key); err != nil {
		t.Fatal(err)
	}
	s.drain(t)
	if res, err := s.m.EvictDRAM(ctx, []string{key}, false); err != nil || res.Dropped != 1 {
		t.Fatalf("evict DRAM of %s: %+v %v", key, res, err)
	}
}

// readsFromSSD reads key n times and checks that each read came from SSD.
func (s *admStack) readsFromSSD(t *testing.T, key string, val []byte, n int) {
	t.Helper()
	for range n {
		before := s.c.ReadStats()
		got, err := s.c.Get(context.Background(), key)
		if err != nil || string(got) != string(val) {
			t.Fatalf("get %s: %v", key, err)
		}
		if after := s.c.ReadStats(); after.LocalSSD != before.LocalSSD+1 {
			t.Fatalf("get %s: not read from SSD: %+v -> %+v", key, before, after)
		}
	}
}

// segmentUsed is the bytes allocated in the node's segment at the master.
func (s *admStack) segmentUsed(t *testing.T) int64 {
	t.Helper()
	st, err := s.m.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.SegmentUsed
}

// TestPromotionAddsDRAMReplica: an object read from SSD often enough
// (dram_promotion_min_freq 3: its put and two SSD reads) gets a DRAM
// replica through the heartbeat, and the next read comes from DRAM.
func TestPromotionAddsDRAMReplica(t *testing.T) {
	s := newAdmStack(t, admMasterConfig(3), nil, nil)
	ctx := context.Background()
	val := rnd(64 << 10)
	s.ssdOnly(t, "p", val)
	s.readsFromSSD(t, "p", val, 2)
	s.n.OffloadNow()
	st, err := s.m.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Promotions != 1 || s.n.Stats().Promotions != 1 {
		t.Fatalf("promotions: master %d, node %+v", st.Promotions, s.n.Stats())
	}
	before := s.c.ReadStats()
	got, err := s.c.Get(ctx, "p")
	if err != nil || string(got) != string(val) {
		t.Fatalf("get after promotion: %v", err)
	}
	if after := s.c.ReadStats(); after.LocalDRAM != before.LocalDRAM+1 {
		t.Fatalf("not read from DRAM after promotion: %+v -> %+v", before, after)
	}
	if err := s.m.Check(); err != nil {
		t.Fatal(err)
	}
}

// hookNode lets a test act between the steps of a promotion: after the
// heartbeat handed it out (before the node loads it) and before the
// node's answer.
type hookNode struct {
	*mastergrpc.Client
	afterHeartbeat, beforeEnd func()
}

func (h *hookNode) Heartbeat(ctx context.Context, req masterapi.HeartbeatRequest) (masterapi.HeartbeatReply, error) {
	rep, err := h.Client.Heartbeat(ctx, req)
	if err == nil && len(rep.Promotions) > 0 && h.afterHeartbeat != nil {
		h.afterHeartbeat()
	}
	return rep, err
}

func (h *hookNode) PromoteEnd(ctx context.Context, node string, res []masterapi.PromoteResult) ([]error, error) {
	if h.beforeEnd != nil {
		h.beforeEnd()
	}
	return h.Client.PromoteEnd(ctx, node, res)
}

// TestPromotionNeverResurrects: a promotion whose object is removed (or
// removed and put again) while the node loads it is refused; one whose SSD
// copy is evicted meanwhile is abandoned. Nothing is published, the range
// is freed, and the key answers what the Remove (or the new put) left.
func TestPromotionNeverResurrects(t *testing.T) {
	ctx := context.Background()
	val, val2 := rnd(64<<10), rnd(64<<10)
	cases := []struct {
		name string
		// race runs in the given hook; check inspects the key after.
		hookAfterHeartbeat bool
		race               func(t *testing.T, s *admStack)
		check              func(t *testing.T, s *admStack)
	}{
		{"remove", false, func(t *testing.T, s *admStack) {
			if err := s.m.Remove(ctx, "p", true); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, s *admStack) {
			if _, err := s.c.Get(ctx, "p"); !isNotFound(err) {
				t.Fatalf("removed key after its promotion: %v", err)
			}
		}},
		{"remove-unforced", false, func(t *testing.T, s *admStack) {
			// A promotion is no put of the client's: it never makes a
			// Remove answer REPLICA_IS_NOT_READY. Past the reads' lease:
			s.clk.Advance(time.Second)
			if err := s.m.Remove(ctx, "p", false); err != nil {
				t.Fatalf("unforced remove during a promotion: %v", err)
			}
		}, func(t *testing.T, s *admStack) {
			if _, err := s.c.Get(ctx, "p"); !isNotFound(err) {
				t.Fatalf("removed key after its promotion: %v", err)
			}
		}},
		{"remove-and-put", false, func(t *testing.T, s *admStack) {
			if err := s.m.Remove(ctx, "p", true); err != nil {
				t.Fatal(err)
			}
			if err := s.c.Put(ctx, "p", val2); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, s *admStack) {
			got, err := s.c.Get(ctx, "p")
			if err != nil || string(got) != string(val2) {
				t.Fatalf("key put again after its promotion: %v (old bytes: %v)", err, string(got) == string(val))
			}
			if err := s.m.Remove(ctx, "p", true); err != nil {
				t.Fatal(err)
			}
		}},
		{"ssd-evicted", true, func(t *testing.T, s *admStack) {
			// What the tier's eviction does: tell the master, then delete
			// (past the reads' lease, so the object goes at once).
			s.clk.Advance(time.Second)
			if _, err := s.m.EvictSSDReplica(ctx, s.n.Name(), []string{"p"}); err != nil {
				t.Fatal(err)
			}
			if err := s.n.tier.Remove([]byte("p")); err != nil {
				t.Fatal(err)
			}
			// The promotion is abandoned with its source: the key is
			// gone now, not "not ready" until the node answers.
			if _, err := s.m.GetReplicaList(ctx, "p"); !isNotFound(err) {
				t.Fatalf("lookup of a key whose SSD copy went during its promotion: %v", err)
			}
		}, func(t *testing.T, s *admStack) {
			if _, err := s.c.Get(ctx, "p"); err == nil {
				t.Fatal("a key evicted from SSD during its promotion is readable")
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := &hookNode{}
			mc := admMasterConfig(3)
			clk := master.NewManualClock(time.Now())
			mc.Clock = clk
			s := newAdmStack(t, mc, nil, func(r *mastergrpc.Client) masterapi.NodeAPI { h.Client = r; return h })
			s.clk = clk
			s.ssdOnly(t, "p", val)
			s.readsFromSSD(t, "p", val, 2)
			hook := func() { tc.race(t, s) }
			if tc.hookAfterHeartbeat {
				h.afterHeartbeat = hook
			} else {
				h.beforeEnd = hook
			}
			s.n.OffloadNow()
			st, err := s.m.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.Promotions != 0 || st.PromotionsAbandoned != 1 {
				t.Fatalf("promotions %d, abandoned %d; want 0 and 1", st.Promotions, st.PromotionsAbandoned)
			}
			tc.check(t, s)
			if used := s.segmentUsed(t); used != 0 {
				t.Fatalf("%d bytes of the segment still allocated: the promotion's range leaked", used)
			}
			if err := s.m.Check(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestPromotionRacingRemove runs a promotion and a forced Remove of its
// key at the same time, many times: whichever wins, the key is gone after
// both and no range stays allocated.
func TestPromotionRacingRemove(t *testing.T) {
	s := newAdmStack(t, admMasterConfig(3), nil, nil)
	ctx := context.Background()
	val := rnd(16 << 10)
	for i := range 20 {
		key := admKey("race", i)
		s.ssdOnly(t, key, val)
		s.readsFromSSD(t, key, val, 2)
		done := make(chan error, 1)
		go func() { done <- s.m.Remove(ctx, key, true) }()
		s.n.OffloadNow()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if _, err := s.c.Get(ctx, key); !isNotFound(err) {
			t.Fatalf("round %d: removed key readable after a racing promotion: %v", i, err)
		}
		if used := s.segmentUsed(t); used != 0 {
			t.Fatalf("round %d: %d bytes still allocated", i, used)
		}
	}
	if err := s.m.Check(); err != nil {
		t.Fatal(err)
	}
}

func isNotFound(err error) bool { return errors.Is(err, errcode.ErrObjectNotFound) }
