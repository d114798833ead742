package master

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tierstore/tierstore/admission"
	"github.com/tierstore/tierstore/bucket"
	"github.com/tierstore/tierstore/internal/keyspec"
	"github.com/tierstore/tierstore/masterapi"
)

// logBuffer is a concurrency-safe log sink for tests that check log lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// lines returns the logged lines that contain every one of words.
func (l *logBuffer) lines(words ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.b.String(), "\n") {
		ok := line != ""
		for _, w := range words {
			ok = ok && strings.Contains(line, w)
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}

func logTo(c *Config) *logBuffer {
	lb := &logBuffer{}
	c.Logger = slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelInfo}))
	return lb
}

// failAll plays node n: it fetches every queued task and answers it failed.
func failAll(t *testing.T, api masterapi.API, n string, retryable bool, reason string) int {
	t.Helper()
	ts, err := heartbeat(api, n, 0)
	if err != nil {
		t.Fatal(err)
	}
	req := masterapi.NotifyRequest{Node: n}
	for _, task := range ts {
		req.Failed = append(req.Failed, masterapi.OffloadFailure{Key: task.Key, Retryable: retryable, Reason: reason})
	}
	if len(ts) > 0 {
		if _, err := api.NotifyOffloadSuccess(bg, req); err != nil {
			t.Fatal(err)
		}
	}
	return len(ts)
}

// TestOnEvictDoesNotWedge guards issue 9 item 4: with offload_on_evict and
// offloads that cannot succeed, a victim whose offload failed permanently,
// or maxOffloadAttempts times, is dropped from DRAM like any cache entry
// (counted in tierstore_master_offload_dropped_victims_total, logged once
// with its key in hex and the reason) instead of being queued again
// forever. A put waiting for room under such pressure gets it. In-process
// and over gRPC.
func TestOnEvictDoesNotWedge(t *testing.T) {
	for _, via := range []string{"service", "grpc"} {
		t.Run(via, func(t *testing.T) {
			var logs *logBuffer
			s, _ := offloadService(t, func(c *Config) {
				c.OffloadOnEvict = true
				c.EvictionRatio = 1
				c.PutStartMaxWait = 30 * time.Second
				logs = logTo(c)
			})
			var api masterapi.API = s
			if via == "grpc" {
				api = remoteService(t, s)
			}
			const obj = 4 << 10
			mount(t, api, "a", 4*obj)
			put(t, api, "too-big-for-a-bucket", obj, "a")
			put(t, api, "ssd-full", obj, "a")
			// Eviction queues both; the node fails them: one for good, the
			// other retryable but on every attempt.
			if n := s.EvictNow(); n != 0 {
				t.Fatalf("evicted %d instead of queuing", n)
			}
			ts, _ := heartbeat(api, "a", 0)
			if len(ts) != 2 {
				t.Fatalf("tasks %v", taskKeys(ts))
			}
			api.NotifyOffloadSuccess(bg, masterapi.NotifyRequest{Node: "a", Failed: []masterapi.OffloadFailure{
				{Key: "too-big-for-a-bucket", Retryable: false, Reason: "object larger than a bucket"},
				{Key: "ssd-full", Retryable: true, Reason: "SSD full"}}})
			for i := 1; i < maxOffloadAttempts; i++ {
				if n := failAll(t, api, "a", true, "SSD full"); n != 1 {
					t.Fatalf("attempt %d: %d tasks", i+1, n)
				}
			}
			if n := s.EvictNow(); n != 2 {
				t.Fatalf("evicted %d of the 2 victims whose offload failed for good", n)
			}
			if ts, _ := heartbeat(api, "a", 0); len(ts) != 0 {
				t.Fatalf("queued again: %v", taskKeys(ts))
			}
			if v := metricValue(t, s, "tierstore_master_offload_dropped_victims_total", "", ""); v != 2 {
				t.Fatalf("offload_dropped_victims_total %v", v)
			}
			for key, reason := range map[string]string{"too-big-for-a-bucket": "failed permanently", "ssd-full": "every attempt"} {
				if l := logs.lines("dropped a victim", "key="+strconv.Quote(keyspec.Show(key)), reason); len(l) != 1 {
					t.Fatalf("log lines for %s: %q", key, l)
				}
			}

			// Under pressure: the segment is full, eviction queues, the node
			// fails the tasks for good, and the waiting put gets its room.
			for i := 0; i < 4; i++ {
				put(t, api, fmt.Sprint("full", i), obj, "a")
			}
			ctx, cancel := context.WithTimeout(bg, 30*time.Second)
			defer cancel()
			done, _ := waitingPut(t, s, api, ctx, "new", obj)
			if n := failAll(t, api, "a", false, "object larger than a bucket"); n != 4 {
				t.Fatalf("%d tasks", n)
			}
			if err := <-done; err != nil {
				t.Fatalf("put under a wedged on-evict: %v", err)
			}
		})
	}
}

// TestEvictionOrderUsesPutTimeForUnreadObjects guards issue 9 item 6:
// victims go least recently used first, and an object never read was last
// used by its put (before, every unread object tied at lease 0 and the
// round picked among them at random). An object read before a newer
// object's put goes before that newer, unread object; one read after them
// goes after them.
func TestEvictionOrderUsesPutTimeForUnreadObjects(t *testing.T) {
	s, clk := testService(t, func(c *Config) { c.EvictionRatio = 0.3 })
	mount(t, s, "a", 1<<20)
	step := func() { clk.Advance(time.Millisecond) }
	put(t, s, "read-late", 64, "")
	step()
	put(t, s, "read-early", 64, "")
	step()
	s.GetReplicaList(bg, "read-early")
	for i := 0; i < 8; i++ {
		step()
		put(t, s, fmt.Sprint("unread", i), 64, "")
	}
	step()
	s.ExistKey(bg, "read-late")
	clk.Advance(time.Hour) // every lease over
	// 10 evictable, ratio 0.3: the 3 least recently used.
	if n := s.EvictNow(); n != 3 {
		t.Fatalf("evicted %d", n)
	}
	alive := func(k string) bool {
		_, err := s.GetReplicaList(masterapi.WithOffloadPath(bg), k)
		return err == nil
	}
	for _, k := range []string{"read-early", "unread0", "unread1"} {
		if alive(k) {
			t.Errorf("%s (least recently used) survived", k)
		}
	}
	for _, k := range []string{"read-late", "unread2", "unread7"} {
		if !alive(k) {
			t.Errorf("%s (used more recently) evicted", k)
		}
	}
}

// TestOnEvictOffloadsInPutOrder guards issue 9 item 6 with the command line
// of Mooncake #2799's report (eviction_high_watermark_ratio=0.7,
// eviction_ratio=0.2, default_kv_lease_ttl=11000, offload_on_evict) on the
// shape of Mooncake #4740's reproduction (11 objects put one after the
// other, never read): the watermark rounds offload the objects oldest
// first, so every object that leaves DRAM reached SSD first, in put order,
// and the newest stay in DRAM.
func TestOnEvictOffloadsInPutOrder(t *testing.T) {
	s, clk := offloadService(t, func(c *Config) {
		c.OffloadOnEvict = true
		c.EvictionHighWatermarkRatio = 0.7
		c.EvictionRatio = 0.2
		c.DefaultKVLeaseTTL = 11 * time.Second
	})
	const obj = 64 << 10
	mount(t, s, "a", 8*obj)
	var offloaded []string
	var want []string
	for i := 0; i < 11; i++ {
		k := fmt.Sprintf("obj%02d", i)
		put(t, s, k, obj, "a")
		want = append(want, k)
		clk.Advance(time.Millisecond)
		for s.aboveWatermark() { // the background loop's watermark rounds
			s.evictIfAboveWatermark()
			ts, _ := heartbeat(s, "a", 0)
			offloaded = append(offloaded, taskKeys(ts)...)
			var req masterapi.NotifyRequest
			req.Node = "a"
			for _, task := range ts {
				req.Persisted = append(req.Persisted, masterapi.SSDObject{Key: task.Key, Size: task.Size, CRC: task.CRC})
			}
			s.NotifyOffloadSuccess(bg, req)
		}
	}
	if len(offloaded) < 4 || fmt.Sprint(offloaded) != fmt.Sprint(want[:len(offloaded)]) {
		t.Fatalf("offloaded %v, want a prefix of the put order %v", offloaded, want)
	}
	for _, k := range want {
		if _, err := s.GetReplicaList(bg, k); err != nil {
			t.Fatalf("%s lost: %v", k, err)
		}
	}
}

// TestEvictContinuesPastQueuedVictims guards the eviction round against
// refusing a put because every victim it picked was admitted to SSD
// (queued for offload, so pinned in DRAM until the node answers): tinylfu
// admits the two least recently used objects while the node's SSD has
// room for them, and the round goes on to the next evictable objects,
// which lose against the SSD's victims and are dropped, so the put gets
// its room at once (put_start_max_wait 0). In-process and over gRPC.
func TestEvictContinuesPastQueuedVictims(t *testing.T) {
	for _, via := range []string{"service", "grpc"} {
		t.Run(via, func(t *testing.T) {
			s, clk := testService(t, func(c *Config) {
				c.EnableOffload = true
				c.AdmissionFlags.Policy = admission.PolicyTinyLFU
				c.AdmissionFlags.Margin = 0
				c.EvictionRatio = 0.25 // 2 victims of 8 per pass
			})
			var api masterapi.API = s
			if via == "grpc" {
				api = remoteService(t, s)
			}
			const obj = 4 << 10
			mount(t, api, "a", 8*obj)
			for i := 0; i < 8; i++ {
				put(t, api, fmt.Sprint("k", i), obj, "a")
				clk.Advance(time.Millisecond)
			}
			// Room for exactly two objects (each a bucket file of its own,
			// the admission's estimate) under the high watermark; beyond
			// it, a victim bucket no candidate can beat (density 16).
			s.ReportSSD("a", masterapi.SSDReport{High: 2 * bucket.Size(1, 2, obj), Used: 0,
				Victims: []masterapi.SSDVictim{{FileBytes: 1 << 20, Span: 1 << 20, Worth: 16 << 20}}})
			put(t, api, "new", obj, "a")
			st, err := s.Stats(bg)
			if err != nil {
				t.Fatal(err)
			}
			if st.OffloadQueued != 2 {
				t.Fatalf("%d victims queued for offload, want the 2 with room", st.OffloadQueued)
			}
			if st.Evictions == 0 {
				t.Fatal("no victim dropped: the put got room from nowhere")
			}
			ts, err := heartbeat(api, "a", 0)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(taskKeys(ts), ","); got != "k0,k1" {
				t.Fatalf("queued %s, want the least recently used k0,k1", got)
			}
		})
	}
}

// TestColdPutIsFirstDRAMVictim: with tinylfu, the put of a key coming back
// (looked up and missed before) that the node's full SSD would turn away
// enters DRAM cold: the next eviction round takes it before the least
// recently used warm objects, newest cold put first; a hit makes it warm.
// Without a ColdPutter policy (eager) the order stays LRU by put time
// (TestEvictionOrderUsesPutTimeForUnreadObjects).
func TestColdPutIsFirstDRAMVictim(t *testing.T) {
	s, clk := testService(t, func(c *Config) {
		c.EnableOffload = true
		c.AdmissionFlags.Policy = admission.PolicyTinyLFU
		c.AdmissionFlags.Margin = 0
		c.EvictionRatio = 0.01 // one victim per round
		c.DefaultKVLeaseTTL = time.Millisecond
	})
	const obj = 4 << 10
	mount(t, s, "a", 5*obj)
	s.ReportSSD("a", masterapi.SSDReport{High: obj, Used: obj,
		Victims: []masterapi.SSDVictim{{FileBytes: 1 << 20, Span: 1 << 20, Worth: 16 << 20}}})
	for _, k := range []string{"w0", "w1", "w2"} {
		put(t, s, k, obj, "a")
		clk.Advance(time.Millisecond)
	}
	back := func(key string) {
		for i := 0; i < 2; i++ { // seen before: the put makes it 2
			if _, err := s.GetReplicaList(bg, key); err == nil {
				t.Fatalf("%s found before its put", key)
			}
		}
		put(t, s, key, obj, "a")
		clk.Advance(time.Millisecond)
	}
	back("c0")
	back("c1") // DRAM full: w0 w1 w2 c0 c1
	present := func(key string) bool {
		_, err := s.GetReplicaList(bg, key)
		return err == nil
	}
	put(t, s, "n0", obj, "a") // evicts the newest cold put
	if present("c1") {
		t.Fatal("the newest cold put survived the eviction round")
	}
	if !present("w0") || !present("c0") {
		t.Fatal("a warm object or the older cold put went before the newest cold put")
	}
	// The lookup just made c0 warm, and it was used after w1 and w2
	// (the leases of the lookups end first).
	clk.Advance(2 * time.Millisecond)
	put(t, s, "n1", obj, "a")
	if present("w1") || !present("c0") {
		t.Fatalf("after c0's hit the round should take the least recently used w1: w1 %v c0 %v", present("w1"), present("c0"))
	}
}

// dramSetKeys returns the keys of every shard's DRAM candidate set.
func dramSetKeys(s *Service) map[string]bool {
	keys := map[string]bool{}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k := range sh.dram {
			keys[k] = true
		}
		sh.mu.Unlock()
	}
	return keys
}

// The DRAM eviction scans walk only the objects that have a DRAM replica
// (shard.dram), not every object: an object put, one re-registered by a
// node after a master restart, and one promoted from SSD are all in it and
// are victims; objects that left DRAM leave the set at the next scan, so a
// master holding many SSD-only objects scans only its DRAM ones.
func TestEvictionScansDRAMObjectsOnly(t *testing.T) {
	s, clk := testService(t, func(c *Config) { c.EvictionRatio = 1 })
	holdMount(t, s, "a", 64<<10)
	const tok = 1 << 63
	objs := []masterapi.DRAMObject{{Key: "rereg", Offset: 0, Length: 1000, CRC: 11, PutToken: tok}}
	if errs, err := s.ReRegisterDRAMObjects(bg, "a", "seg0", objs, true); err != nil || errs[0] != nil {
		t.Fatalf("re-register: %v %v", errs, err)
	}
	for i := range 5 {
		put(t, s, fmt.Sprint("put", i), 1000, "")
	}
	if got := len(dramSetKeys(s)); got != 6 {
		t.Fatalf("%d DRAM candidates, want 6: %v", got, dramSetKeys(s))
	}
	clk.Advance(time.Hour) // every lease over
	if n := s.EvictNow(); n != 6 {
		t.Fatalf("evicted %d of 6 DRAM objects (the re-registered one among them?)", n)
	}
	s.EvictNow() // nothing left: the scan drops the stale entries
	if keys := dramSetKeys(s); len(keys) != 0 {
		t.Fatalf("DRAM candidates left after every DRAM object went: %v", keys)
	}
}
