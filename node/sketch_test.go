package node

import (
	"context"
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tierstore/tierstore/admission"
	"github.com/tierstore/tierstore/master"
	"github.com/tierstore/tierstore/masterapi"
	"github.com/tierstore/tierstore/mastergrpc"
)

// TestLargeSketchReachesNode (issue 23 item 1): a master whose sketch is
// sized for 2 million cached objects (48 MiB: beyond half the RPC message
// limit, which about 1.3 million reach) still gets it to the node over
// gRPC, in chunks: the node values its buckets with the master's
// frequencies, sends SSD reports, and the master's DRAM victims are
// judged against them (admission "room"), not admitted blind as
// offload_on_evict would ("no_report"). The population is the policy's
// (SetPopulation): putting 2 million objects would take minutes under
// -race, and the sketch's size depends on nothing else.
func TestLargeSketchReachesNode(t *testing.T) {
	const population = 2_000_000
	s := newAdmStack(t, admMasterConfig(0), func(c *Config) {
		c.Memory = 1 << 20 // 16 objects of 64 KiB
		c.SSDCapacity = 8 << 20
	}, nil)
	s.tl.SetPopulation(func() int64 { return population })
	for range s.tl.Stats().Period { // the next halving sizes the sketch for the population
		s.tl.ObserveLookup("filler", admission.Miss, 0)
	}
	for range 6 {
		s.tl.ObserveLookup("hot", admission.Miss, 0)
	}
	b, err := s.m.AdmissionSketch()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) <= mastergrpc.MaxMessageSize/2 {
		t.Fatalf("setup: the sketch takes %d bytes, not beyond half the message limit (%d)", len(b), mastergrpc.MaxMessageSize/2)
	}
	t.Logf("sketch of %d bytes for %d cached objects", len(b), population)

	s.n.OffloadNow() // the sketch, and the master's wish for reports
	st := s.n.Stats()
	if st.SketchesReceived != 1 {
		t.Fatalf("the node received %d sketches, want 1", st.SketchesReceived)
	}
	for _, k := range []string{"hot", "filler", "cold"} {
		if got, want := s.n.adm.freq([]byte(k)), s.tl.Estimate(k); got != want {
			t.Fatalf("the node's sketch estimates %s at %d, the master's %d", k, got, want)
		}
	}
	if s.n.adm.freq([]byte("hot")) == 0 {
		t.Fatal("setup: hot estimated 0")
	}
	// The heartbeat loop's round (heartbeat) fetches a whole transfer too,
	// one chunk after the other, not one chunk per tick.
	s.n.roundMu.Lock()
	s.n.adm.version = 0
	s.n.roundMu.Unlock()
	s.n.heartbeat()
	if got := s.n.Stats().SketchesReceived; got != 2 {
		t.Fatalf("after a heartbeat round the node received %d sketches, want 2", got)
	}

	ctx := context.Background()
	val := rnd(64 << 10)
	for i := range 12 {
		if err := s.c.Put(ctx, admKey("obj", i), val); err != nil {
			t.Fatal(err)
		}
	}
	s.n.OffloadNow() // the first SSD report
	if s.tl.Stats().Reports == 0 {
		t.Fatal("the node sent no SSD report")
	}
	s.m.EvictNow()
	s.drain(t)
	d := s.tl.Stats().Decisions
	if d["no_report"] != 0 || d["room"] == 0 {
		t.Fatalf("decisions %v: want victims admitted to the reported room, none without a report", d)
	}
}

// BenchmarkSketchTransfer delivers the master's sketch to a node over gRPC
// on loopback (OffloadNow: the back-to-back heartbeats of one transfer),
// the sketch sized for TIERSTORE_SKETCH_POPULATION cached objects (default
// 50 million: 384 MiB). ns/op is one whole delivery; it reports the
// sketch's bytes, chunks per delivery, and the process's CPU seconds per
// delivery (master and node share the process). How long lookups wait
// meanwhile is admission's BenchmarkSketchCopyStall.
// go test -run '^$' -bench SketchTransfer -benchtime 2x ./node
// (docs/benchmarks.md).
func BenchmarkSketchTransfer(b *testing.B) {
	population := int64(50_000_000)
	if v, err := strconv.ParseInt(os.Getenv("TIERSTORE_SKETCH_POPULATION"), 10, 64); err == nil && v > 0 {
		population = v
	}
	m, err := master.New(admMasterConfig(0))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	tl := m.Policy().(*admission.TinyLFU)
	r, err := mastergrpc.Dial(context.Background(), serveMasterB(b, m))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Close() })
	nc := testNodeConfig("127.0.0.1:0")
	nc.EnableOffload = true
	nc.SSDDir = b.TempDir()
	nc.SSDCapacity = 8 << 20
	n, err := Start(context.Background(), nc, r, WithName("sketch-node"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { n.Close() })
	tl.SetPopulation(func() int64 { return population })
	for range tl.Stats().Period { // the next halving sizes the sketch for the population
		tl.ObserveLookup("filler", admission.Miss, 0)
	}
	n.OffloadNow() // a first delivery, untimed
	before := n.Stats()
	cpu0 := cpuSeconds(b)
	b.ResetTimer()
	for range b.N {
		n.roundMu.Lock()
		n.adm.version = 0 // the node holds no sketch: a whole transfer is due
		n.roundMu.Unlock()
		n.OffloadNow()
	}
	b.StopTimer()
	cpu := cpuSeconds(b) - cpu0
	after := n.Stats()
	if got := after.SketchesReceived - before.SketchesReceived; got != int64(b.N) {
		b.Fatalf("%d sketches received in %d deliveries", got, b.N)
	}
	bytes, err := m.AdmissionSketch()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(len(bytes)), "sketch-bytes")
	b.ReportMetric(float64(after.SketchChunksReceived-before.SketchChunksReceived)/float64(b.N), "chunks/op")
	b.ReportMetric(float64(after.SketchRestarts-before.SketchRestarts)/float64(b.N), "restarts/op")
	b.ReportMetric(cpu/float64(b.N), "cpu-s/op")
}

// cpuSeconds is the process's user and system CPU time so far.
func cpuSeconds(b *testing.B) float64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// TestSketchTransferStopsAtNewLeader: a chunk answered under another
// leadership term than the transfer's first does not join it (the words of
// two masters' sketches would mix): the node drops the transfer and counts
// a restart; a transfer within one term completes.
func TestSketchTransferStopsAtNewLeader(t *testing.T) {
	s := newAdmStack(t, admMasterConfig(0), nil, nil)
	p := admission.NewTinyLFU(admission.TinyLFUConfig{MinPopulation: 4096})
	chunk := func(off uint64) *masterapi.SketchChunk {
		c := p.SketchChunk(off, 4096)
		return &masterapi.SketchChunk{Version: 7, Width: c.Width, DoorBits: c.DoorBits, Period: c.Period, Samples: c.Samples,
			Resets: c.Resets, Offset: c.Offset, Total: c.Total, Data: c.Data}
	}
	s.n.roundMu.Lock()
	defer s.n.roundMu.Unlock()
	before := s.n.Stats()
	s.n.takeAdmission(masterapi.HeartbeatReply{Term: 1, Sketch: chunk(0)})
	s.n.takeAdmission(masterapi.HeartbeatReply{Term: 2, Sketch: chunk(512)})
	st := s.n.Stats()
	if v, _ := s.n.adm.asm.Transfer(); v != 0 || st.SketchRestarts != before.SketchRestarts+1 {
		t.Fatalf("transfer %d still joined after a new term; restarts %d -> %d", v, before.SketchRestarts, st.SketchRestarts)
	}
	received := st.SketchesReceived
	for off, i := uint64(0), 0; ; i++ {
		if i > 1000 {
			t.Fatal("transfer never completed")
		}
		c := chunk(off)
		s.n.takeAdmission(masterapi.HeartbeatReply{Term: 2, Sketch: c})
		off = c.Offset + uint64(len(c.Data)/8)
		if off == c.Total {
			break
		}
	}
	if got := s.n.Stats().SketchesReceived; got != received+1 {
		t.Fatalf("sketches received %d, want %d", got, received+1)
	}
}
