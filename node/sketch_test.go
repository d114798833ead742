package node

import (
	"context"
	"testing"

	"github.com/tierstore/tierstore/admission"
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
