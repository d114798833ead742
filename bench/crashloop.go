package main

import (
	"context"
	"fmt"

	"github.com/tierstore/tierstore/internal/crashloop"
)

func init() {
	register(scenario{
		name: "crashloop",
		help: "kill -9 of nodes (100x) and the master (20x) under puts and offload; counts lost, wrong and phantom (--quick: 10 and 2)",
		run:  runCrashLoop,
	})
}

// runCrashLoop runs the crash-loop driver against real binaries built from
// this module and reports its counts. Losing an object the master had
// announced on SSD, a read of wrong bytes, or a phantom or duplicate
// replica makes the scenario fail.
func runCrashLoop(ctx context.Context, e *env) (*result, error) {
	cfg := crashloop.Config{NodeCycles: 100, MasterCycles: 20, Dir: e.dir, Log: e.stderr}
	if e.quick {
		cfg.NodeCycles, cfg.MasterCycles = 10, 2
	}
	if e.replicas > 1 {
		cfg.Replicas, cfg.Nodes = e.replicas, max(3, e.replicas)
	}
	rep, err := crashloop.Run(ctx, cfg)
	if err != nil {
		return nil, err
	}
	t := &table{Title: "crash loop (real master and node processes, kill -9)", Columns: []string{"figure", "count"}}
	for _, row := range []struct {
		name string
		n    int
	}{
		{"node cycles", rep.NodeCycles}, {"master cycles", rep.MasterCycles},
		{"acknowledged puts", rep.Acknowledged}, {"announced on SSD (distinct)", rep.AnnouncedOnSSD},
		{"announced-on-SSD checks", rep.AnnouncedChecks},
		{"held on another node at a node kill (distinct)", rep.HeldElsewhere}, {"held-elsewhere checks", rep.HeldElsewhereChecks},
		{"lost (announced on SSD or held elsewhere)", rep.Lost},
		{"wrong bytes", rep.WrongBytes}, {"phantom replicas", rep.Phantoms},
		{"duplicate replicas", rep.Duplicates}, {"DRAM-only objects lost with their process", rep.DRAMOnlyLost},
	} {
		t.add(row.name, row.n)
	}
	res := &result{Tables: []*table{t}, Options: map[string]string{"seed": fmt.Sprint(rep.Seed), "replicas": fmt.Sprint(cfg.Replicas), "nodes": fmt.Sprint(max(cfg.Nodes, 2))}}
	if !rep.OK() {
		return res, fmt.Errorf("crash loop broke a promise: %v", rep)
	}
	return res, nil
}
