package node

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/keyspec"
	"github.com/tierstore/tierstore/masterapi"
)

// syncBuffer is a bytes.Buffer safe for the node's concurrent logging.
type syncBuffer struct {
	mu sync.Mutex // protects b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines(substr string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, l := range strings.Split(s.b.String(), "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}

func ssdNodeWithLog(t *testing.T, m masterapi.API, limit, capacity int64) (*Node, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	cfg := testNodeConfig("")
	cfg.EnableOffload, cfg.SSDDir, cfg.Backend = true, t.TempDir(), "pwrite"
	cfg.BucketSizeLimit, cfg.SSDCapacity, cfg.BucketKeysLimit = limit, capacity, 1
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	n, err := Start(context.Background(), cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n, logs
}

// Issue 9 item 6: an object of exactly --bucket_size_limit bytes reaches
// SSD, even under the longest key; a larger one is failed permanently
// (not handed out again), reported once per round with a true message,
// counted as too_large, and stays readable in DRAM.
func TestBucketSizeLimitIsTheLargestObject(t *testing.T) {
	const limit = 1 << 20
	m := newMaster(t, testMasterConfig())
	n, logs := ssdNodeWithLog(t, m, limit, 0)
	c := newTestClient(t, client.Config{Master: m, LocalNode: n})
	ctx := context.Background()
	longKey := strings.Repeat("k", keyspec.MaxLen)
	vals := map[string][]byte{"exact": rnd(limit), longKey: rnd(limit), "big1": rnd(limit + 1), "big2": rnd(limit + 4096)}
	for k, v := range vals {
		if err := c.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	if got := n.OffloadNow(); got != 4 {
		t.Fatalf("round handled %d tasks", got)
	}
	st := n.Stats()
	if st.Tier.Objects != 2 || st.OffloadPersisted != 2 || st.OffloadFailedBy["too_large"] != 2 {
		t.Fatalf("objects of exactly the limit must reach SSD, larger ones fail as too_large: %+v", st)
	}
	if got := n.OffloadNow(); got != 0 {
		t.Fatalf("a permanently failed task was handed out again (%d tasks)", got)
	}
	lines := logs.lines("cause=too_large")
	if len(lines) != 1 || !strings.Contains(lines[0], "count=2") ||
		!strings.Contains(lines[0], fmt.Sprintf("larger than --bucket_size_limit %d: it stays in DRAM only", limit)) ||
		!strings.Contains(lines[0], "ssd_dir="+n.cfg.SSDDir) || !strings.Contains(lines[0], "first_key_hex=") {
		t.Fatalf("too-large objects must be reported once per round with a count, the SSD dir and the key:\n%s", strings.Join(lines, "\n"))
	}
	if _, err := c.EvictDRAM(ctx, nil, true); err != nil {
		t.Fatal(err)
	}
	for k, v := range vals {
		if got, err := c.Get(ctx, k); err != nil || !bytes.Equal(got, v) {
			t.Fatalf("get %.10s: %v", k, err)
		}
	}
	if rs := c.ReadStats(); rs.LocalSSD != 2 || rs.LocalDRAM != 2 {
		t.Fatalf("reads %+v: want the two objects of the limit from SSD, the larger ones from DRAM", rs)
	}
}

// Issue 9 item 4: a full SSD (the only bucket holds the only copy of a
// leased object, so nothing can be evicted) fails the task permanently:
// the master does not queue it again (which would keep its DRAM source
// pinned: the on-evict wedge); the failure is counted as no_space and
// logged with the SSD directory.
func TestFullSSDFailsPermanently(t *testing.T) {
	const limit = 16 << 10
	m := newMaster(t, testMasterConfig())
	n, logs := ssdNodeWithLog(t, m, limit, BucketFileLimit(limit))
	c := newTestClient(t, client.Config{Master: m, LocalNode: n})
	ctx := context.Background()
	if err := c.Put(ctx, "leased", rnd(8000)); err != nil {
		t.Fatal(err)
	}
	if got := n.OffloadNow(); got != 1 || n.Stats().Tier.Objects != 1 {
		t.Fatalf("first offload: %d tasks, %+v", got, n.Stats())
	}
	if d, err := c.EvictDRAM(ctx, []string{"leased"}, false); d.Dropped != 1 || err != nil {
		t.Fatalf("dropping the DRAM replica: %d %v", d, err)
	}
	if ok, err := c.Exists(ctx, "leased"); !ok || err != nil { // the lease
		t.Fatalf("exists: %v %v", ok, err)
	}
	val := rnd(8000)
	if err := c.Put(ctx, "next", val); err != nil {
		t.Fatal(err)
	}
	if got := n.OffloadNow(); got != 1 {
		t.Fatalf("second round handled %d tasks", got)
	}
	if st := n.Stats(); st.OffloadFailedBy["no_space"] != 1 {
		t.Fatalf("want one no_space failure: %+v", st)
	}
	if got := n.OffloadNow(); got != 0 {
		t.Fatalf("the task that failed on a full SSD was handed out again (%d tasks)", got)
	}
	if ms, _ := m.Stats(ctx); ms.OffloadQueued != 0 || ms.OffloadInFlight != 0 {
		t.Fatalf("master still holds the task: %+v", ms)
	}
	if l := logs.lines("cause=no_space"); len(l) != 1 || !strings.Contains(l[0], "ssd_dir="+n.cfg.SSDDir) || !strings.Contains(l[0], "retryable=false") {
		t.Fatalf("no_space log:\n%s", strings.Join(l, "\n"))
	}
	if got, err := c.Get(ctx, "next"); err != nil || !bytes.Equal(got, val) {
		t.Fatalf("the object must stay readable from DRAM: %v", err)
	}
}
