package admission

import (
	"errors"
	"flag"
	"strings"
	"testing"
)

// script drives a policy through puts, lookups and evictions the way the
// master does and records which keys got queued, in order.
type script struct {
	p      Policy
	objs   map[string]*Object
	queued []string
}

func newScript(p Policy) *script { return &script{p: p, objs: map[string]*Object{}} }

func (s *script) put(k string) {
	o := s.objs[k]
	if o == nil {
		o = &Object{Key: k, Size: 1}
		s.objs[k] = o
	}
	o.InDRAM = true
	if s.p.AtPutEnd(*o) {
		s.queue(o)
	}
}

func (s *script) queue(o *Object) { o.Queued = true; s.queued = append(s.queued, o.Key) }

// lookup is one demand lookup batch; duplicates count once (the master's
// rule), offload-path batches not at all.
func (s *script) lookup(offloadPath bool, keys ...string) {
	if offloadPath || !s.p.WantsLookups() {
		return
	}
	seen := map[string]bool{}
	for _, k := range keys {
		o := s.objs[k]
		if o == nil || seen[k] {
			continue
		}
		seen[k] = true
		if s.p.OnLookup(o) {
			s.queue(o)
		}
	}
}

// evict reports whether the object is kept (offloaded) instead of dropped.
func (s *script) evict(k string) bool {
	o := s.objs[k]
	if !o.OnSSD && s.p.OnEvict(*o) {
		s.queue(o)
		return true
	}
	o.InDRAM = false
	o.Reads = 0
	return false
}

func (s *script) persisted(k string) { o := s.objs[k]; o.OnSSD = true; o.Queued = false }

func TestEager(t *testing.T) {
	s := newScript(Eager{})
	s.put("a")
	s.put("b")
	s.lookup(false, "a", "a", "b")
	if s.evict("a") {
		t.Fatal("eager offloads on evict")
	}
	s.persisted("b")
	s.put("b") // a re-put of an object already on SSD is not queued
	if got := strings.Join(s.queued, ","); got != "a,b" {
		t.Fatalf("queued %s", got)
	}
}

func TestOnEvictPolicy(t *testing.T) {
	s := newScript(OnEvict{})
	s.put("a")
	s.put("b")
	s.put("c")
	s.lookup(false, "a", "b")
	if len(s.queued) != 0 {
		t.Fatalf("queued before eviction: %v", s.queued)
	}
	if !s.evict("a") {
		t.Fatal("a dropped instead of offloaded")
	}
	s.persisted("b")
	if s.evict("b") { // already on SSD: drop the DRAM copy
		t.Fatal("b offloaded twice")
	}
	s.objs["c"].Queued = true
	if s.evict("c") { // already queued: not queued again
		t.Fatal("c queued twice")
	}
	if got := strings.Join(s.queued, ","); got != "a" {
		t.Fatalf("queued %s", got)
	}
}

func TestReadThresholdPolicy(t *testing.T) {
	s := newScript(ReadThreshold{N: 3})
	s.put("a")
	s.put("b")
	s.put("c")
	s.put("d")
	s.lookup(false, "a", "a", "a", "b") // a:1 b:1 (duplicates in a batch count once)
	s.lookup(true, "a", "b", "c")       // offload path: not counted
	s.lookup(false, "a", "b")           // a:2 b:2
	if len(s.queued) != 0 {
		t.Fatalf("queued early: %v", s.queued)
	}
	s.lookup(false, "b", "a") // b:3 queued first, then a:3
	s.lookup(false, "a", "b") // already queued: skipped, counts not advanced
	if got := strings.Join(s.queued, ","); got != "b,a" {
		t.Fatalf("queued %s", got)
	}
	if s.objs["a"].Reads != 3 {
		t.Fatalf("a.Reads = %d (advanced while queued)", s.objs["a"].Reads)
	}
	// c on SSD already: skipped.
	s.persisted("c")
	s.lookup(false, "c")
	s.lookup(false, "c")
	s.lookup(false, "c")
	// d evicted after 2 lookups: count resets; it is not in DRAM any more.
	s.lookup(false, "d")
	s.lookup(false, "d")
	if s.evict("d") {
		t.Fatal("read threshold offloads on evict")
	}
	s.lookup(false, "d")
	if got := strings.Join(s.queued, ","); got != "b,a" {
		t.Fatalf("queued %s", got)
	}
	if s.objs["c"].Reads != 0 || s.objs["d"].Reads != 0 {
		t.Fatalf("skipped objects counted: c=%d d=%d", s.objs["c"].Reads, s.objs["d"].Reads)
	}
}

func TestFromSettings(t *testing.T) {
	cases := []struct {
		s    Settings
		name string
		err  string
	}{
		{Settings{}, "none", ""},
		{Settings{EnableOffload: true}, "eager", ""},
		{Settings{EnableOffload: true, OffloadOnEvict: true}, "on-evict", ""},
		{Settings{EnableOffload: true, ReadThreshold: 4}, "read-threshold(4)", ""},
		{Settings{EnableOffload: true, ReadThreshold: 4, OffloadOnEvict: true}, "", "offload_read_admission_threshold and offload_on_evict"},
		{Settings{EnableOffload: true, ReadThreshold: -1}, "", "offload_read_admission_threshold must be >= 0"},
		{Settings{OffloadOnEvict: true}, "", "offload_on_evict requires enable_offload"},
		{Settings{ReadThreshold: 2}, "", "offload_read_admission_threshold requires enable_offload"},
		{Settings{EnableOffload: true, Options: Options{Policy: "tinylfu"}}, "tinylfu", ""},
		{Settings{EnableOffload: true, Options: Options{Policy: "eager"}}, "eager", ""},
		{Settings{EnableOffload: true, OffloadOnEvict: true, Options: Options{Policy: "on-evict"}}, "on-evict", ""},
		{Settings{EnableOffload: true, ReadThreshold: 3, Options: Options{Policy: "read-threshold"}}, "read-threshold(3)", ""},
		{Settings{Options: Options{Policy: "tinylfu"}}, "", "offload_admission_policy=tinylfu requires enable_offload"},
		{Settings{EnableOffload: true, Options: Options{Policy: "lfu"}}, "", `offload_admission_policy: "lfu" is not one of`},
		{Settings{EnableOffload: true, OffloadOnEvict: true, Options: Options{Policy: "tinylfu"}}, "", "offload_admission_policy=tinylfu and offload_on_evict"},
		{Settings{EnableOffload: true, ReadThreshold: 2, Options: Options{Policy: "eager"}}, "", "offload_admission_policy=eager and offload_read_admission_threshold"},
		{Settings{EnableOffload: true, Options: Options{Policy: "read-threshold"}}, "", "requires offload_read_admission_threshold > 0"},
		{Settings{EnableOffload: true, Options: Options{WriteBudgetMBps: 10}}, "", "ssd_write_budget requires offload_admission_policy=tinylfu"},
		{Settings{EnableOffload: true, Options: Options{PromoteMinFreq: 3}}, "", "dram_promotion_min_freq requires offload_admission_policy=tinylfu"},
		{Settings{EnableOffload: true, Options: Options{Policy: "tinylfu", WriteBudgetMBps: -1}}, "", "ssd_write_budget must be >= 0"},
		{Settings{EnableOffload: true, Options: Options{Policy: "tinylfu", SampleFactor: -2}}, "", "admission_sample_factor must be in 1..1000"},
		{Settings{EnableOffload: true, Options: Options{Policy: "tinylfu", Margin: 17}}, "", "admission_margin must be in [0, 16]"},
		{Settings{EnableOffload: true, Options: Options{Policy: "tinylfu", PromoteMinFreq: 17}}, "", "dram_promotion_min_freq must be in 0..16"},
		{Settings{EnableOffload: true, Options: Options{Policy: "tinylfu", ColdPutMinFreq: -1}}, "", "admission_cold_put_freq must be in 0..16"},
		{Settings{EnableOffload: true, Options: Options{Policy: "tinylfu", ColdPutMinFreq: 17}}, "", "admission_cold_put_freq must be in 0..16"},
	}
	for _, c := range cases {
		p, err := FromSettings(c.s)
		if c.err != "" {
			if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%+v: err %v, want %q", c.s, err, c.err)
			}
			continue
		}
		if err != nil || p.Name() != c.name {
			t.Errorf("%+v: %v %v, want %s", c.s, p, err, c.name)
		}
	}
}

func TestRegisterFlags(t *testing.T) {
	o := DefaultOptions()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	o.RegisterFlags(fs)
	err := fs.Parse([]string{"--offload_admission_policy=tinylfu", "--ssd_write_budget=50", "--admission_margin=0.5",
		"--admission_sample_factor=4", "--dram_promotion_min_freq=6", "--admission_cold_put_freq=3"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := FromSettings(Settings{EnableOffload: true, Options: o})
	if err != nil {
		t.Fatal(err)
	}
	c := p.(*TinyLFU).Config()
	if c.WriteBudget != 50e6 || c.Margin != 0.5 || c.SampleFactor != 4 || c.PromoteFreq != 6 || c.ColdPutFreq != 3 {
		t.Fatalf("config from flags: %+v", c)
	}
	d := DefaultOptions()
	if d.Policy != "" || d.Margin != 1 || d.SampleFactor != 10 || d.WriteBudgetMBps != 0 || d.PromoteMinFreq != 0 || d.ColdPutMinFreq != 2 {
		t.Fatalf("defaults: %+v", d)
	}
}
