package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tierstore/tierstore/admission"
	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/master"
	"github.com/tierstore/tierstore/masterapi"
)

// Admission and promotion across the real RPC boundary: a master running
// tinylfu served over gRPC on loopback, a node with a real tier (io_uring
// backend, pebble index, files in a temporary directory) talking to it
// through masterapi.Remote, and a client of the same remote master.

type admStack struct {
	m  *master.Service
	tl *admission.TinyLFU
	n  *Node
	c  *client.Client
	r  *masterapi.Remote
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
func newAdmStack(t *testing.T, mc master.Config, edit func(*Config), wrap func(*masterapi.Remote) masterapi.NodeAPI) *admStack {
	t.Helper()
	s := &admStack{m: newMaster(t, mc)}
	s.tl = s.m.Policy().(*admission.TinyLFU)
	r, err := masterapi.Dial(context.Background(), serveMaster(t, s.m))
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
	n, err := Start(context.Background(), nc, api, WithName("adm-node"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	s.n = n
	s.c = newTestClient(t, client.Config{Master: r, LocalNode: n})
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

// plainNode hides masterapi.AdmissionAPI: the node talks to the master as
// a node of an earlier build does (OffloadHeartbeat only, no SSD report).
type plainNode struct{ masterapi.NodeAPI }

// scanAfterHotSet fills the SSD with a hot set (each key read four
// times), then puts a one-pass scan twice the DRAM, and returns the
// policy's decisions and how many hot keys are still readable.
func scanAfterHotSet(t *testing.T, wrap func(*masterapi.Remote) masterapi.NodeAPI) (admission.TinyLFUStats, int) {
	s := newAdmStack(t, admMasterConfig(0), func(c *Config) {
		c.Memory = 1 << 20 // 16 objects
		c.SSDCapacity = 4 << 20
		c.HeartbeatInterval = 2 * time.Millisecond // puts wait for on-evict offloads
	}, wrap)
	ctx := context.Background()
	val := rnd(64 << 10)
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
	s.n.OffloadNow() // the sketch and a report reach each side
	s.n.OffloadNow()
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
// the hot set survives; without it (a node that only fetches tasks) every
// victim is admitted ("no_report") and the scan flushes the hot set.
func TestSSDReportReachesMaster(t *testing.T) {
	st, alive := scanAfterHotSet(t, nil)
	t.Logf("with reports: %v, %d/40 hot keys alive", st.Decisions, alive)
	if st.Reports == 0 {
		t.Fatal("the master received no SSD report")
	}
	if st.Decisions["lost"] == 0 {
		t.Fatalf("no scan victim was rejected: %v", st.Decisions)
	}
	if st.Decisions["no_report"] != 0 {
		t.Fatalf("decisions without a report: %v", st.Decisions)
	}
	if alive < 36 {
		t.Fatalf("only %d of 40 hot keys survived the scan", alive)
	}

	st, alive = scanAfterHotSet(t, func(r *masterapi.Remote) masterapi.NodeAPI { return plainNode{r} })
	t.Logf("without reports: %v, %d/40 hot keys alive", st.Decisions, alive)
	if st.Reports != 0 || st.Rejected != 0 || st.Decisions["no_report"] == 0 {
		t.Fatalf("a node without reports: %d reports, decisions %v", st.Reports, st.Decisions)
	}
	if alive >= 36 {
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

// TestValueEvictionUsesMasterSketch: with --bucket_eviction=value the
// node ranks its buckets by the master's frequencies (the sketch the
// heartbeat carries): the hot bucket survives and the cold one goes,
// although the hot one is the least recently used; lru evicts the hot one.
func TestValueEvictionUsesMasterSketch(t *testing.T) {
	hot, cold := bucketOrder(t, "value")
	if hot != 4 || cold != 0 {
		t.Fatalf("value: %d hot and %d cold keys on SSD after eviction, want 4 and 0", hot, cold)
	}
	hot, cold = bucketOrder(t, "lru")
	if hot != 0 || cold != 4 {
		t.Fatalf("lru: %d hot and %d cold keys on SSD after eviction, want 0 and 4", hot, cold)
	}
}
