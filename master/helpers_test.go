package master

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"testing"
	"time"

	"github.com/tierstore/tierstore/masterapi"
)

var bg = context.Background()

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// testService returns a Service on a ManualClock with no background loop.
func testService(t testing.TB, mut func(*Config)) (*Service, *ManualClock) {
	t.Helper()
	clk := NewManualClock(t0)
	cfg := DefaultConfig()
	cfg.Clock = clk
	cfg.MonitorInterval = 0
	cfg.Shards = 16
	cfg.PutStartMaxWait = 0 // fail at once; tests of waiting set it
	cfg.Logger = slog.New(slog.DiscardHandler)
	if mut != nil {
		mut(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Check(); err != nil {
			t.Errorf("after test: %v", err)
		}
		s.Close()
	})
	return s, clk
}

func mount(t testing.TB, api masterapi.API, node string, size int64) {
	t.Helper()
	if err := api.MountSegment(bg, masterapi.MountRequest{Node: node, Endpoint: node + ":1", Segment: "seg0", Size: size}); err != nil {
		t.Fatal(err)
	}
}

// put stores key (PutStart + PutEnd) and returns its DRAM replica.
func put(t testing.TB, api masterapi.API, key string, size int64, node string) masterapi.Replica {
	t.Helper()
	r, err := api.PutStart(bg, masterapi.PutStartRequest{Key: key, Size: size, CRC: crcOf(key), PreferredNode: node})
	if err != nil {
		t.Fatalf("PutStart(%q): %v", key, err)
	}
	if err := api.PutEnd(bg, key, r.PutToken); err != nil {
		t.Fatalf("PutEnd(%q): %v", key, err)
	}
	return r.Replica
}

// putWith stores req (PutStart + PutEnd with PutStart's token) and returns
// its DRAM replica.
func putWith(t testing.TB, api masterapi.API, req masterapi.PutStartRequest) masterapi.Replica {
	t.Helper()
	r, err := api.PutStart(bg, req)
	if err != nil {
		t.Fatalf("PutStart(%q): %v", req.Key, err)
	}
	if err := api.PutEnd(bg, req.Key, r.PutToken); err != nil {
		t.Fatalf("PutEnd(%q): %v", req.Key, err)
	}
	return r.Replica
}

func crcOf(key string) uint32 { return uint32(len(key))*2654435761 + 7 }

func mustIs(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("got %v, want %v", err, target)
	}
}

func kinds(info masterapi.ObjectInfo) string {
	s := ""
	for _, r := range info.Replicas {
		s += fmt.Sprintf("%s@%s ", r.Kind, r.Node)
	}
	return s
}

// heartbeat is a node's heartbeat that only fetches tasks: up to max (0: the
// default) offload tasks of node.
func heartbeat(api masterapi.NodeAPI, node string, max int) ([]masterapi.OffloadTask, error) {
	rep, err := api.Heartbeat(bg, masterapi.HeartbeatRequest{Node: node, Max: max})
	return rep.Tasks, err
}

// everyObject returns sh's objects, its compact ones as stand-in
// *objects (not thawed: changing them changes nothing). Caller holds
// sh.mu.
func (s *Service) everyObject(sh *shard) map[string]*object {
	out, err := s.checkCompact(sh, nil)
	if err != nil {
		panic(err)
	}
	for k, o := range sh.objs {
		out[k] = o
	}
	return out
}

// eachObject calls fn with every object of s (everyObject's, under each
// shard's lock in turn) and the sorted node ids of its SSD replicas.
func (s *Service) eachObject(fn func(key string, o *object, ssdNodes []string)) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, o := range s.everyObject(sh) {
			var ns []string
			for _, d := range o.ssd {
				ns = append(ns, d.node.id)
			}
			sort.Strings(ns)
			fn(k, o, ns)
		}
		sh.mu.Unlock()
	}
}

// peekObj is everyObject's object of key, or nil.
func (s *Service) peekObj(sh *shard, key string) *object {
	if o := sh.objs[key]; o != nil {
		return o
	}
	return s.everyObject(sh)[key]
}
