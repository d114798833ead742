//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tierstore/tierstore/internal/netlab"
	"github.com/tierstore/tierstore/internal/partitions"
)

func init() {
	register(scenario{
		name: "partitions",
		help: "network faults between real processes in namespaces (root): lost, stale, wrong, late calls, recovery per scenario (--quick: the CI form)",
		run:  runPartitions,
	})
}

// runPartitions runs every network-fault scenario (internal/partitions) in
// its full form (the short CI form with --quick) and prints one row per
// scenario. Any violation fails it.
func runPartitions(ctx context.Context, e *env) (*result, error) {
	res, err := partitions.Run(ctx, partitions.Config{Full: !e.quick, Dir: e.dir, Log: e.stderr})
	if errors.Is(err, netlab.ErrUnavailable) {
		return &result{Notes: []string{"skipped: " + err.Error()}}, nil
	}
	if err != nil {
		return nil, err
	}
	t := &table{Title: "network faults (real processes in network namespaces; docs/reliability.md)",
		Columns: []string{"scenario", "ops", "acknowledged", "on SSD", "lost", "stale", "wrong bytes", "past deadline", "recovery"}}
	out := &result{Tables: []*table{t}}
	var failed []string
	for _, r := range res {
		switch {
		case r.Skipped != "":
			out.Notes = append(out.Notes, r.Name+": skipped: "+r.Skipped)
			continue
		case r.Report == nil:
			failed = append(failed, fmt.Sprintf("%s: %v", r.Name, r.Err))
			continue
		}
		p := r.Report
		rec := "never"
		if p.Recovered {
			rec = p.Recovery.Round(10 * time.Millisecond).String()
		}
		t.add(r.Name, p.Ops, p.Acknowledged, p.OnSSD, p.Lost, p.Stale, p.Wrong, p.PastDeadline, rec)
		for _, n := range r.Notes {
			out.Notes = append(out.Notes, r.Name+": "+n)
		}
		if !r.OK() {
			failed = append(failed, r.Name+": "+p.String())
		}
	}
	if len(failed) > 0 {
		return out, fmt.Errorf("partitions: %s", strings.Join(failed, "; "))
	}
	return out, nil
}
