package master

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
)

// A put that waits for DRAM room makes the node's offload pressing as soon
// as a task of the node is queued, although the queued bytes are far below
// the wake threshold: WaitOffload answers pressed without any clock (the
// node then fetches its tasks instead of waiting for its heartbeat tick),
// and the offloads it fetches make the room the put waits for.
func TestWaitOffloadWakesForAWaitingPut(t *testing.T) {
	s, _ := offloadService(t, func(c *Config) {
		c.PutStartMaxWait = time.Minute
		c.OffloadOnEvict = true // no task before eviction queues its victims
		c.EvictionRatio = 0.01
	})
	const obj = 4 << 10
	mount(t, s, "a", 64*obj)
	for i := range 64 {
		put(t, s, fmt.Sprint("k", i), obj, "a")
	}
	if pressed, err := s.WaitOffload(bg, "a", 0); err != nil || pressed {
		t.Fatalf("WaitOffload with nothing queued: pressed %v, %v", pressed, err)
	}
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	done, _ := waitingPut(t, s, s, ctx, "new", obj)
	if q, b := s.lookupNode("a").box.queuedBytes(); q == 0 || b*wakeShare >= 64*obj {
		t.Fatalf("eviction queued %d tasks of %d bytes: the test needs a few, below a quarter of the DRAM", q, b)
	}
	pressed, err := s.WaitOffload(ctx, "a", time.Hour)
	if err != nil || !pressed {
		t.Fatalf("WaitOffload while a put waits for room: pressed %v, %v", pressed, err)
	}
	if n := offloadAll(t, s, "a"); n == 0 {
		t.Fatal("no task after the wake")
	}
	if err := <-done; err != nil {
		t.Fatalf("put after the offloads: %v", err)
	}
	if pressed, err := s.WaitOffload(bg, "a", 0); err != nil || pressed {
		t.Fatalf("WaitOffload after the tasks were fetched: pressed %v, %v", pressed, err)
	}
}

// Queued offload bytes reaching a quarter of the node's DRAM make its
// offload pressing (eager offload: every put queues its object), so the
// node drains before its DRAM fills; a WaitOffload already waiting is
// woken by the put that crosses the threshold, and fetching the tasks ends
// the pressure.
func TestWaitOffloadWakesOnQueuedBytes(t *testing.T) {
	s, _ := offloadService(t, nil)
	const obj = 4 << 10
	mount(t, s, "a", 16*obj)
	for i := range 3 {
		put(t, s, fmt.Sprint("k", i), obj, "a")
	}
	if pressed, err := s.WaitOffload(bg, "a", 0); err != nil || pressed {
		t.Fatalf("3/16 of the DRAM queued: pressed %v, %v", pressed, err)
	}
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	woke := make(chan error, 1)
	go func() {
		pressed, err := s.WaitOffload(ctx, "a", time.Hour)
		if err == nil && !pressed {
			err = fmt.Errorf("not pressed")
		}
		woke <- err
	}()
	put(t, s, "k3", obj, "a")
	if err := <-woke; err != nil {
		t.Fatalf("WaitOffload across the put that queued a quarter of the DRAM: %v", err)
	}
	if n := offloadAll(t, s, "a"); n != 4 {
		t.Fatalf("%d tasks, want 4", n)
	}
	if pressed, err := s.WaitOffload(bg, "a", 0); err != nil || pressed {
		t.Fatalf("after the tasks were fetched: pressed %v, %v", pressed, err)
	}
}

// WaitOffload of a node the master does not know answers NEED_REMOUNT.
func TestWaitOffloadUnknownNode(t *testing.T) {
	s, _ := offloadService(t, nil)
	_, err := s.WaitOffload(bg, "nobody", time.Hour)
	mustIs(t, err, errcode.ErrNeedRemount)
}
