package node

import (
	"bytes"
	"context"
	"errors"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/crc32c"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/wire"
)

// recorder is a client.Observer that remembers what it was told.
type recorder struct {
	mu       sync.Mutex // protects gets and puts
	gets     map[client.Tier]int
	puts     map[client.Tier]int
	negative bool
}

func newRecorder() *recorder {
	return &recorder{gets: map[client.Tier]int{}, puts: map[client.Tier]int{}}
}

func (r *recorder) ObserveGet(t client.Tier, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gets[t]++
	r.negative = r.negative || d <= 0
}

func (r *recorder) ObservePut(t client.Tier, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.puts[t]++
	r.negative = r.negative || d <= 0
}

// guardedBuf is n usable bytes followed by a guard that must stay intact.
func guardedBuf(t *testing.T, n int) ([]byte, func()) {
	full := bytes.Repeat([]byte{0x5A}, n+128)
	return full[:n], func() {
		t.Helper()
		if i := bytes.IndexFunc(full[n:], func(r rune) bool { return r != 0x5A }); i >= 0 {
			t.Fatalf("byte %d past the buffer was written", i)
		}
	}
}

// A remote client reads through the data plane into its own buffers:
// exact and larger buffers get the value and nothing beyond it, a short
// buffer is ErrBufferTooSmall with nothing written, and batch forms mix
// good and bad items.
func TestGetIntoRemote(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	n := startTestNode(t, m, "127.0.0.1:0", nil)
	obs := newRecorder()
	c := newTestClient(t, client.Config{MasterAddr: serveMaster(t, m), Observer: obs})
	ctx := context.Background()
	val := rnd(3<<20 + 5)
	if err := c.Put(ctx, "k", val); err != nil {
		t.Fatal(err)
	}
	buf, guard := guardedBuf(t, len(val))
	if got, err := c.GetInto(ctx, "k", buf); err != nil || got != len(val) || !bytes.Equal(buf, val) {
		t.Fatalf("GetInto exact: %d %v", got, err)
	}
	guard()
	big, bigGuard := guardedBuf(t, len(val)+1000)
	if got, err := c.GetInto(ctx, "k", big); err != nil || got != len(val) || !bytes.Equal(big[:got], val) {
		t.Fatalf("GetInto larger: %d %v", got, err)
	}
	if bytes.IndexFunc(big[len(val):], func(r rune) bool { return r != 0x5A }) >= 0 {
		t.Fatal("GetInto wrote past the value into the rest of the buffer")
	}
	bigGuard()
	small, smallGuard := guardedBuf(t, len(val)-1)
	got, err := c.GetInto(ctx, "k", small)
	if !errors.Is(err, client.ErrBufferTooSmall) || !errors.Is(err, client.ErrInvalidParams) || got != 0 {
		t.Fatalf("GetInto short buffer: %d %v", got, err)
	}
	if bytes.IndexFunc(small, func(r rune) bool { return r != 0x5A }) >= 0 {
		t.Fatal("a refused GetInto wrote into the buffer")
	}
	smallGuard()

	if err := c.Put(ctx, "k2", val[:1000]); err != nil {
		t.Fatal(err)
	}
	bufs := [][]byte{make([]byte, len(val)), make([]byte, 999), make([]byte, 10), make([]byte, 2000)}
	ns, errs := c.BatchGetInto(ctx, []string{"k", "k2", "missing", "k2"}, bufs)
	if errs[0] != nil || ns[0] != len(val) || !bytes.Equal(bufs[0], val) {
		t.Fatalf("batch item 0: %d %v", ns[0], errs[0])
	}
	if !errors.Is(errs[1], client.ErrBufferTooSmall) || ns[1] != 0 {
		t.Fatalf("batch item 1: %d %v", ns[1], errs[1])
	}
	if !errors.Is(errs[2], errcode.ErrObjectNotFound) {
		t.Fatalf("batch item 2: %v", errs[2])
	}
	if errs[3] != nil || ns[3] != 1000 || !bytes.Equal(bufs[3][:1000], val[:1000]) {
		t.Fatalf("batch item 3: %d %v", ns[3], errs[3])
	}
	if _, errs := c.BatchGetInto(ctx, []string{"k"}, nil); !errors.Is(errs[0], errcode.ErrInvalidParams) {
		t.Fatalf("batch with no buffers: %v", errs[0])
	}
	if st := n.Stats(); st.PeerWrites != 2 || st.PeerReadsDRAM != 4 {
		t.Fatalf("node counters %+v", st)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.puts[client.TierRemoteDRAM] != 2 || obs.gets[client.TierRemoteDRAM] != 4 || obs.negative {
		t.Fatalf("observer: puts %v gets %v", obs.puts, obs.gets)
	}
}

// Remote SSD reads go through the data plane too; a node whose SSD copy
// has other bytes is caught by the receiver's one CRC check, counted and
// reported, never returned.
func TestGetIntoRemoteSSD(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	tr := newMemTier()
	n := startTestNode(t, m, "127.0.0.1:0", tr)
	c := newTestClient(t, client.Config{MasterAddr: serveMaster(t, m)})
	ctx := context.Background()
	val := rnd(300 << 10)
	if err := c.Put(ctx, "s", val); err != nil {
		t.Fatal(err)
	}
	n.OffloadNow()
	if d, err := c.EvictDRAM(ctx, []string{"s"}, false); err != nil || d.Dropped != 1 {
		t.Fatalf("evict: %+v %v", d, err)
	}
	buf, guard := guardedBuf(t, len(val))
	if got, err := c.GetInto(ctx, "s", buf); err != nil || got != len(val) || !bytes.Equal(buf, val) {
		t.Fatalf("remote SSD GetInto: %d %v", got, err)
	}
	guard()
	if rs := c.ReadStats(); rs.RemoteSSD != 1 || n.Stats().PeerReadsSSD != 1 {
		t.Fatalf("read stats %+v node %+v", rs, n.Stats())
	}
	wrong := bytes.Clone(val)
	wrong[1000] ^= 0xFF
	tr.put("s", wrong)
	if _, err := c.GetInto(ctx, "s", buf); !errors.Is(err, errcode.ErrChecksumMismatch) {
		t.Fatalf("SSD copy with other bytes: %v", err)
	}
	guard()
	if rs := c.ReadStats(); rs.ChecksumFailures != 1 || rs.BadReplicasReported != 1 {
		t.Fatalf("read stats %+v", rs)
	}

	// In process: a copy of another size is refused before any byte is
	// copied into the caller's buffer.
	local := newTestClient(t, client.Config{Master: m, LocalNode: n})
	if err := local.Put(ctx, "s2", val); err != nil {
		t.Fatal(err)
	}
	n.OffloadNow()
	if d, err := local.EvictDRAM(ctx, []string{"s2"}, false); err != nil || d.Dropped != 1 {
		t.Fatalf("evict: %+v %v", d, err)
	}
	tr.put("s2", val[:len(val)-1])
	for i := range buf {
		buf[i] = 0x5A
	}
	if _, err := local.GetInto(ctx, "s2", buf); !errors.Is(err, errcode.ErrChecksumMismatch) {
		t.Fatalf("local SSD copy of another size: %v", err)
	}
	if bytes.IndexFunc(buf, func(r rune) bool { return r != 0x5A }) >= 0 {
		t.Fatal("a refused local SSD read wrote into the buffer")
	}
	guard()
}

// The data plane refuses ranges outside the segment with INVALID_PARAMS.
func TestDataPlaneRangeChecks(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	n := startTestNode(t, m, "127.0.0.1:0", nil)
	ctx := context.Background()
	dc, err := wire.DialData(ctx, n.Endpoint(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	if err := dc.ReadRange(ctx, n.SegmentName(), n.seg.Size()-5, make([]byte, 10), 0); !errors.Is(err, errcode.ErrInvalidParams) {
		t.Fatalf("read past the end: %v", err)
	}
	val := rnd(10)
	if err := dc.Write(ctx, n.SegmentName(), n.seg.Size()-5, val, crc32c.Checksum(val), 1); !errors.Is(err, errcode.ErrInvalidParams) {
		t.Fatalf("write past the end: %v", err)
	}
	if err := dc.Write(ctx, n.SegmentName(), 0, make([]byte, n.seg.Size()+1), 0, 1); !errors.Is(err, errcode.ErrInvalidParams) {
		t.Fatalf("write larger than the segment: %v", err)
	}
	if err := dc.ReadSSD(ctx, []byte("k"), make([]byte, 1), 0); !errors.Is(err, errcode.ErrUnableOffload) {
		t.Fatalf("SSD read on a node without a tier: %v", err)
	}
}

var histCount = regexp.MustCompile(`tierstore_node_(get|put)_seconds_count\{node="[^"]*",tier="([a-z_]+)"\} (\d+)`)

// The node's latency histograms count remote (data plane) and in-process
// reads and writes under their own tier labels.
func TestNodeLatencyHistograms(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	n := startTestNode(t, m, "127.0.0.1:0", newMemTier())
	remote := newTestClient(t, client.Config{MasterAddr: serveMaster(t, m)})
	local := newTestClient(t, client.Config{Master: m, LocalNode: n})
	ctx := context.Background()
	val := rnd(10 << 10)
	for _, k := range []string{"a", "b"} {
		if err := remote.Put(ctx, k, val); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"c", "d"} {
		if err := local.Put(ctx, k, val); err != nil {
			t.Fatal(err)
		}
	}
	if got := n.OffloadNow(); got != 4 {
		t.Fatalf("offloaded %d", got)
	}
	if d, err := local.EvictDRAM(ctx, []string{"d"}, false); err != nil || d.Dropped != 1 {
		t.Fatalf("evicted %+v: %v", d, err)
	}
	buf := make([]byte, len(val))
	for _, k := range []string{"a", "b", "c", "d"} {
		if _, err := remote.GetInto(ctx, k, buf); err != nil {
			t.Fatal(err)
		}
		if _, err := local.GetInto(ctx, k, buf); err != nil {
			t.Fatal(err)
		}
	}
	dc, err := wire.DialData(ctx, n.Endpoint(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	if err := dc.ReadRange(ctx, "no-such-segment", 0, buf, 0); !errors.Is(err, errcode.ErrSegmentNotFound) {
		t.Fatalf("read of another segment: %v", err)
	}
	// Close drains the data plane: every request has been observed.
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	n.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	got := map[string]int{}
	for _, mm := range histCount.FindAllStringSubmatch(rec.Body.String(), -1) {
		v, _ := strconv.Atoi(mm[3])
		got[mm[1]+" "+mm[2]] = v
	}
	want := map[string]int{
		"put dram_remote": 2, "put dram_local": 2,
		"get dram_remote": 3, "get dram_local": 3, "get ssd_remote": 1, "get ssd_local": 1,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %d observations, want %d", k, got[k], v)
		}
	}
	if !strings.Contains(rec.Body.String(), `tierstore_node_data_errors_total{node="`+n.Name()+`",op="get_dram"} 1`) {
		t.Errorf("no data error counted:\n%s", rec.Body.String())
	}
}

// Close with a data connection open and idle returns promptly, and the
// client sees a transfer failure, not a hang.
func TestCloseWithDataConnections(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	cfg := testNodeConfig("127.0.0.1:0")
	n, err := Start(context.Background(), cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	c := newTestClient(t, client.Config{MasterAddr: serveMaster(t, m)})
	ctx := context.Background()
	if err := c.Put(ctx, "k", rnd(1000)); err != nil {
		t.Fatal(err)
	}
	dc, err := wire.DialData(ctx, n.Endpoint(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	done := make(chan error, 1)
	go func() { done <- n.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Close hangs on an idle data connection")
	}
	err = dc.ReadRange(ctx, n.SegmentName(), 0, make([]byte, 10), 0)
	if !errors.Is(err, errcode.ErrTransferFail) {
		t.Fatalf("read on a closed node: %v", err)
	}
}

// BatchPut reports each item it completed to the client's Observer, with
// the tier it went to, like Put; a refused item is not reported.
func TestBatchPutObserved(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	n := startTestNode(t, m, "127.0.0.1:0", nil)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		cfg  client.Config
		tier client.Tier
	}{
		{"remote", client.Config{MasterAddr: serveMaster(t, m)}, client.TierRemoteDRAM},
		{"local", client.Config{Master: m, LocalNode: n}, client.TierLocalDRAM},
	} {
		obs := newRecorder()
		tc.cfg.Observer = obs
		c := newTestClient(t, tc.cfg)
		keys := []string{tc.name + "1", "", tc.name + "2", tc.name + "3"}
		errs := c.BatchPut(ctx, keys, [][]byte{rnd(100), rnd(5), rnd(70 << 10), rnd(1)})
		for i, err := range errs {
			if (i == 1) != (err != nil) {
				t.Fatalf("%s: item %d: %v", tc.name, i, err)
			}
		}
		obs.mu.Lock()
		if obs.puts[tc.tier] != 3 || len(obs.puts) != 1 || obs.negative {
			t.Errorf("%s: observer puts %v", tc.name, obs.puts)
		}
		obs.mu.Unlock()
	}
}
