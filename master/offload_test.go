package master

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/tierstore/tierstore/admission"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/keyspec"
	"github.com/tierstore/tierstore/masterapi"
)

func offloadService(t *testing.T, mut func(*Config)) (*Service, *ManualClock) {
	return testService(t, func(c *Config) {
		c.EnableOffload = true
		c.ClientTTL = time.Hour
		if mut != nil {
			mut(c)
		}
	})
}

func taskKeys(ts []masterapi.OffloadTask) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Key)
	}
	return out
}

// TestMailboxEagerDedupeAndTask: eager queues at PutEnd, once; the task
// names the source range and the object's size and CRC.
func TestMailboxEagerDedupeAndTask(t *testing.T) {
	s, _ := offloadService(t, nil)
	mount(t, s, "a", 1<<20)
	r := put(t, s, "k", 1000, "a")
	if err := s.Enqueue("k"); err != nil { // duplicate: accepted, not queued twice
		t.Fatal(err)
	}
	s.PutEnd(bg, "k", r.PutToken) // repeated PutEnd does not queue again either
	ts, err := heartbeat(s, "a", 0)
	if err != nil || len(ts) != 1 {
		t.Fatalf("tasks %v %v", ts, err)
	}
	want := masterapi.OffloadTask{Key: "k", Segment: r.Segment, Offset: r.Offset, Length: 1000, Size: 1000, CRC: crcOf("k")}
	if ts[0] != want {
		t.Fatalf("task %+v, want %+v", ts[0], want)
	}
	if err := s.Enqueue("k"); err != nil { // in flight: still not twice
		t.Fatal(err)
	}
	if ts, _ := heartbeat(s, "a", 0); len(ts) != 0 {
		t.Fatalf("duplicate task delivered: %v", taskKeys(ts))
	}
	if _, err := heartbeat(s, "nobody", 0); !codesIs(err, errcode.ErrNeedRemount) {
		t.Fatalf("unknown node: %v", err)
	}
}

func codesIs(err, target error) bool { return err != nil && errcode.Of(err) == errcode.Of(target) }

func TestMailboxQueueLimit(t *testing.T) {
	s, _ := offloadService(t, func(c *Config) { c.OffloadingQueueLimit = 3; c.Admission = admission.OnEvict{} })
	mount(t, s, "a", 1<<20)
	for i := 0; i < 5; i++ {
		put(t, s, fmt.Sprint(i), 64, "a")
	}
	for i := 0; i < 3; i++ {
		if err := s.Enqueue(fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	mustIs(t, s.Enqueue("3"), errcode.ErrKeysUltraLimit)
	// In-flight tasks count toward the limit too.
	if ts, _ := heartbeat(s, "a", 2); len(ts) != 2 {
		t.Fatalf("got %d", len(ts))
	}
	mustIs(t, s.Enqueue("3"), errcode.ErrKeysUltraLimit)
	// Answering one frees one slot.
	s.NotifyOffloadSuccess(bg, masterapi.NotifyRequest{Node: "a", Persisted: []masterapi.SSDObject{{Key: "0", Size: 64, CRC: crcOf("0")}}})
	if err := s.Enqueue("3"); err != nil {
		t.Fatal(err)
	}
	mustIs(t, s.Enqueue("4"), errcode.ErrKeysUltraLimit)
}

// TestMailboxPinUntilAnswer: the source replica cannot be evicted (or
// removed without force) from queueing until the node answers; a NACK
// releases the pin, as does a timeout or the node's death.
func TestMailboxPinUntilAnswer(t *testing.T) {
	s, clk := offloadService(t, func(c *Config) { c.EvictionRatio = 1; c.OffloadTaskTimeout = time.Minute })
	mount(t, s, "a", 1<<20)
	put(t, s, "k", 64, "a")
	put(t, s, "other", 64, "a")
	clk.Advance(time.Hour)
	// "other" was queued too (eager); answer it so only "k" stays pinned.
	ts, _ := heartbeat(s, "a", 0)
	if len(ts) != 2 {
		t.Fatalf("tasks %v", taskKeys(ts))
	}
	s.NotifyOffloadSuccess(bg, masterapi.NotifyRequest{Node: "a", Persisted: []masterapi.SSDObject{{Key: "other", Size: 64, CRC: crcOf("other")}}})
	if n := s.EvictNow(); n != 1 {
		t.Fatalf("evicted %d, want 1 (other's DRAM copy)", n)
	}
	mustIs(t, s.Remove(bg, "k", false), errcode.ErrObjectHasLease)
	if _, err := s.GetReplicaList(bg, "k"); err != nil {
		t.Fatalf("pinned object evicted: %v", err)
	}
	clk.Advance(time.Hour) // lease from the lookup expired; pin remains
	if n := s.EvictNow(); n != 0 {
		t.Fatalf("pinned object evicted (%d)", n)
	}
	// Permanent NACK: pin released, object evictable (a retryable one
	// queues the task again, see TestRetryableFailureRequeued).
	if _, err := s.NotifyOffloadSuccess(bg, masterapi.NotifyRequest{Node: "a", Failed: []masterapi.OffloadFailure{{Key: "k", Retryable: false, Reason: "bad range"}}}); err != nil {
		t.Fatal(err)
	}
	if n := s.EvictNow(); n != 1 {
		t.Fatalf("after NACK evicted %d, want 1", n)
	}

	// A timeout ends the delivery: the task is queued again (an attempt),
	// and after the last attempt the pin is released.
	put(t, s, "t", 64, "a")
	for attempt := 1; attempt <= maxOffloadAttempts; attempt++ {
		if ts, _ := heartbeat(s, "a", 0); len(ts) != 1 {
			t.Fatalf("attempt %d: no task", attempt)
		}
		clk.Advance(30 * time.Second)
		s.Tick()
		if n := s.EvictNow(); n != 0 {
			t.Fatal("pin released before the timeout")
		}
		clk.Advance(31 * time.Second)
		s.Tick()
	}
	if n := s.EvictNow(); n != 1 {
		t.Fatal("pin not released after the last timed-out attempt")
	}
}

// TestRetryableFailureRequeued (invariant 3): a task answered with a retryable
// failure is queued again, up to maxOffloadAttempts deliveries, then
// dropped; a permanent failure is never retried; success resets the count.
func TestRetryableFailureRequeued(t *testing.T) {
	s, _ := offloadService(t, nil)
	mount(t, s, "a", 1<<20)
	put(t, s, "k", 64, "a")
	for attempt := 1; attempt <= maxOffloadAttempts; attempt++ {
		ts, _ := heartbeat(s, "a", 0)
		if fmt.Sprint(taskKeys(ts)) != "[k]" {
			t.Fatalf("attempt %d: tasks %v", attempt, taskKeys(ts))
		}
		s.NotifyOffloadSuccess(bg, masterapi.NotifyRequest{Node: "a", Failed: []masterapi.OffloadFailure{{Key: "k", Retryable: true, Reason: "disk busy"}}})
	}
	if ts, _ := heartbeat(s, "a", 0); len(ts) != 0 {
		t.Fatalf("delivered beyond %d attempts: %v", maxOffloadAttempts, taskKeys(ts))
	}
	if v := metricValue(t, s, "tierstore_master_offload_retried_total", "", ""); v != maxOffloadAttempts-1 {
		t.Fatalf("retried_total %v", v)
	}
	if v := metricValue(t, s, "tierstore_master_offload_abandoned_total", "", ""); v != 1 {
		t.Fatalf("abandoned_total %v", v)
	}
	// Permanent failure: not retried.
	put(t, s, "p", 64, "a")
	heartbeat(s, "a", 0)
	s.NotifyOffloadSuccess(bg, masterapi.NotifyRequest{Node: "a", Failed: []masterapi.OffloadFailure{{Key: "p", Retryable: false, Reason: "bad range"}}})
	if ts, _ := heartbeat(s, "a", 0); len(ts) != 0 {
		t.Fatalf("permanent failure retried: %v", taskKeys(ts))
	}
	// One retryable failure, then success: persisted, no further task.
	put(t, s, "r", 64, "a")
	heartbeat(s, "a", 0)
	s.NotifyOffloadSuccess(bg, masterapi.NotifyRequest{Node: "a", Failed: []masterapi.OffloadFailure{{Key: "r", Retryable: true}}})
	ts, _ := heartbeat(s, "a", 0)
	if fmt.Sprint(taskKeys(ts)) != "[r]" {
		t.Fatalf("retry of r: %v", taskKeys(ts))
	}
	errs, _ := s.NotifyOffloadSuccess(bg, masterapi.NotifyRequest{Node: "a", Persisted: []masterapi.SSDObject{{Key: "r", Size: 64, CRC: crcOf("r")}}})
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	if info, _ := s.GetReplicaList(bg, "r"); kinds(info) != "DRAM@a SSD@a " {
		t.Fatalf("r: %s", kinds(info))
	}
	if st, _ := s.Stats(bg); st.OffloadQueued+st.OffloadInFlight != 0 {
		t.Fatalf("tasks left: %+v", st)
	}
}

// TestRemovedObjectTaskDisappears: removing an object deletes its queued
// task; the node never sees it.
func TestEnqueueNeedsOffload(t *testing.T) {
	s, _ := testService(t, nil)
	mount(t, s, "a", 1<<20)
	put(t, s, "k", 64, "a")
	mustIs(t, s.Enqueue("k"), errcode.ErrUnableOffload)
	if ts, _ := heartbeat(s, "a", 0); len(ts) != 0 {
		t.Fatal("task without enable_offload")
	}
}

func TestRemovedObjectTaskDisappears(t *testing.T) {
	s, _ := offloadService(t, nil)
	mount(t, s, "a", 1<<20)
	put(t, s, "gone", 64, "a")
	put(t, s, "kept", 64, "a")
	if err := s.Remove(bg, "gone", true); err != nil {
		t.Fatal(err)
	}
	ts, _ := heartbeat(s, "a", 0)
	if len(ts) != 1 || ts[0].Key != "kept" {
		t.Fatalf("tasks %v", taskKeys(ts))
	}
	st, _ := s.Stats(bg)
	if st.OffloadQueued != 0 || st.OffloadInFlight != 1 {
		t.Fatalf("stats %+v", st)
	}
	// Removing an in-flight task's object forgets the task too, but its
	// source range stays allocated (invariant 8, see TestForcedRemoveDefersFree).
	if err := s.Remove(bg, "kept", true); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.Stats(bg); st.OffloadInFlight != 0 || st.Objects != 0 || st.SegmentUsed == 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestForcedRemoveDefersFree (invariant 8): a forced Remove of an object whose
// offload task the node has fetched removes the metadata at once, but the
// source range is not reused until the node answers; the answer is refused
// per key (OBJECT_NOT_FOUND, the node deletes its SSD copy). A queued task
// the node has not fetched frees at once. Death and timeout free too.
func TestForcedRemoveDefersFree(t *testing.T) {
	s, clk := offloadService(t, func(c *Config) { c.OffloadTaskTimeout = time.Minute })
	mount(t, s, "a", 1<<20)
	src := put(t, s, "k", 4096, "a")
	ts, _ := heartbeat(s, "a", 0)
	if len(ts) != 1 {
		t.Fatalf("tasks %v", taskKeys(ts))
	}
	if err := s.Remove(bg, "k", true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetReplicaList(bg, "k"); !codesIs(err, errcode.ErrObjectNotFound) {
		t.Fatalf("removed object still readable: %v", err)
	}
	// Another put must not land on the range the node may be copying.
	r2 := put(t, s, "other", 4096, "a")
	if r2.Offset < src.Offset+4096 && src.Offset < r2.Offset+4096 {
		t.Fatalf("range [%d,+4096) reused by another key while the task is out", src.Offset)
	}
	// The same key put again is queued, but not handed out while the old
	// task is out: the node's answer for "k" is unambiguous.
	put(t, s, "k", 4096, "a")
	ts, _ = heartbeat(s, "a", 0)
	if fmt.Sprint(taskKeys(ts)) != "[other]" {
		t.Fatalf("tasks %v while the old task of k is out", taskKeys(ts))
	}
	errs, err := s.NotifyOffloadSuccess(bg, masterapi.NotifyRequest{Node: "a", Persisted: []masterapi.SSDObject{{Key: "k", Size: 4096, CRC: crcOf("k")}}})
	if err != nil {
		t.Fatal(err)
	}
	mustIs(t, errs[0], errcode.ErrObjectNotFound)
	// The node deletes its copy and answers the task failed as well; that
	// answer concerns the old task and must not cancel the new k's.
	s.NotifyOffloadSuccess(bg, masterapi.NotifyRequest{Node: "a", Failed: []masterapi.OffloadFailure{{Key: "k", Reason: "master refused the replica"}}})
	if info, _ := s.GetReplicaList(masterapi.WithOffloadPath(bg), "k"); kinds(info) != "DRAM@a " {
		t.Fatalf("the refused answer touched the new k: %s", kinds(info))
	}
	st, _ := s.Stats(bg)
	if st.SegmentUsed != 2*4096 {
		t.Fatalf("segment used %d after the answer, want two objects' worth", st.SegmentUsed)
	}
	// Now the new k's task goes out.
	ts, _ = heartbeat(s, "a", 0)
	if fmt.Sprint(taskKeys(ts)) != "[k]" {
		t.Fatalf("tasks %v", taskKeys(ts))
	}

	// Timeout frees an orphan: remove the new k while its task is out.
	if err := s.Remove(bg, "k", true); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.Stats(bg); st.SegmentUsed != 2*4096 {
		t.Fatalf("orphan freed early: used %d", st.SegmentUsed)
	}
	clk.Advance(2 * time.Minute)
	s.Tick()
	if st, _ := s.Stats(bg); st.SegmentUsed != 4096 {
		t.Fatalf("orphan not freed by the timeout: used %d", st.SegmentUsed)
	}
	// A failed answer for a removed object frees it as well.
	put(t, s, "f", 4096, "a")
	heartbeat(s, "a", 0)
	s.Remove(bg, "f", true)
	s.NotifyOffloadSuccess(bg, masterapi.NotifyRequest{Node: "a", Failed: []masterapi.OffloadFailure{{Key: "f", Retryable: true}}})
	if st, _ := s.Stats(bg); st.SegmentUsed != 4096 || st.OffloadQueued != 0 {
		t.Fatalf("after a failed answer: %+v", st)
	}
}

// TestNotifyIdempotent: NotifyOffloadSuccess twice leaves one SSD
// replica; a notify of an unknown key is refused (only ReRegisterSSDObjects
// creates objects); a size/CRC mismatch is refused per key.
func TestNotifyIdempotent(t *testing.T) {
	s, _ := offloadService(t, nil)
	mount(t, s, "a", 1<<20)
	put(t, s, "k", 100, "a")
	heartbeat(s, "a", 0)
	req := masterapi.NotifyRequest{Node: "a", Persisted: []masterapi.SSDObject{{Key: "k", Size: 100, CRC: crcOf("k")}}}
	for i := 0; i < 2; i++ {
		errs, err := s.NotifyOffloadSuccess(bg, req)
		if err != nil || errs[0] != nil {
			t.Fatal(err, errs)
		}
	}
	info, _ := s.GetReplicaList(bg, "k")
	if kinds(info) != "DRAM@a SSD@a " {
		t.Fatalf("replicas %s", kinds(info))
	}
	if st, _ := s.Stats(bg); st.SSDReplicas != 1 || st.OffloadInFlight != 0 || st.OffloadPersisted != 1 {
		t.Fatalf("stats %+v", st)
	}
	// Invariant 1: a notify never creates an object (that resurrected removed
	// keys); an unknown key is refused per key, OBJECT_NOT_FOUND, so the
	// node deletes its copy. Only re-registration creates.
	errs, _ := s.NotifyOffloadSuccess(bg, masterapi.NotifyRequest{Node: "a", Persisted: []masterapi.SSDObject{{Key: "new", Size: 7, CRC: 9}, {Key: "k", Size: 100, CRC: 1}}})
	mustIs(t, errs[0], errcode.ErrObjectNotFound)
	mustIs(t, errs[1], errcode.ErrChecksumConflict)
	if _, err := s.GetReplicaList(bg, "new"); !codesIs(err, errcode.ErrObjectNotFound) {
		t.Fatalf("notify created an object: %v", err)
	}
	if errs, err := s.ReRegisterSSDObjects(bg, "a", []masterapi.SSDObject{{Key: "new", Size: 7, CRC: 9}}); err != nil || errs[0] != nil {
		t.Fatal(err, errs)
	}
	info, err := s.GetReplicaList(bg, "new")
	if err != nil || kinds(info) != "SSD@a " || info.Size != 7 || info.CRC != 9 {
		t.Fatalf("registered object: %+v %v", info, err)
	}
	// A removed key stays removed when a late notify names it.
	if err := s.Remove(bg, "new", true); err != nil {
		t.Fatal(err)
	}
	errs, _ = s.NotifyOffloadSuccess(bg, masterapi.NotifyRequest{Node: "a", Persisted: []masterapi.SSDObject{{Key: "new", Size: 7, CRC: 9}}})
	mustIs(t, errs[0], errcode.ErrObjectNotFound)
	if _, err := s.GetReplicaList(bg, "new"); !codesIs(err, errcode.ErrObjectNotFound) {
		t.Fatalf("removed key resurrected: %v", err)
	}
	_, err = s.NotifyOffloadSuccess(bg, masterapi.NotifyRequest{Node: "ghost", Persisted: req.Persisted})
	mustIs(t, err, errcode.ErrNeedRemount)
}

// TestReconcile drops exactly the node's replicas missing from its list.
func TestReconcile(t *testing.T) {
	s, _ := offloadService(t, nil)
	mount(t, s, "a", 1<<20)
	mount(t, s, "b", 1<<20)
	var objs []masterapi.SSDObject
	for i := 0; i < 6; i++ {
		objs = append(objs, masterapi.SSDObject{Key: fmt.Sprint("d", i), Size: 10, CRC: 1})
	}
	s.ReRegisterSSDObjects(bg, "a", objs)
	s.ReRegisterSSDObjects(bg, "b", objs[:3])
	res, err := reconcileAll(s, "a", []string{"d0", "d2", "d4", "unknown"})
	if err != nil || res.Dropped != 3 || fmt.Sprint(res.Unwanted) != "[unknown]" {
		t.Fatalf("reconcile %+v, %v", res, err)
	}
	want := map[string]string{
		"d0": "SSD@a SSD@b ", "d1": "SSD@b ", "d2": "SSD@a SSD@b ",
		"d4": "SSD@a ",
	}
	for k, w := range want {
		info, err := s.GetReplicaList(masterapi.WithOffloadPath(bg), k)
		if err != nil || kinds(info) != w {
			t.Errorf("%s: %s %v, want %s", k, kinds(info), err, w)
		}
	}
	for _, k := range []string{"d3", "d5"} {
		if _, err := s.GetReplicaList(bg, k); !codesIs(err, errcode.ErrObjectNotFound) {
			t.Errorf("%s: %v, want not found", k, err)
		}
	}
	if st, _ := s.Stats(bg); st.SSDReplicas != 6 || st.Objects != 4 {
		t.Fatalf("stats %+v", st)
	}
	// Invariant 6: keys the master no longer wants on the node come back in the
	// answer: a removed object, and one whose replica on a was dropped
	// (EvictSSDReplica, bad report) while the node kept the bytes.
	if err := s.Remove(bg, "d0", true); err != nil {
		t.Fatal(err)
	}
	s.EvictSSDReplica(bg, "a", []string{"d2"})
	res, err = reconcileAll(s, "a", []string{"d0", "d2", "d4"})
	if err != nil || res.Dropped != 0 || fmt.Sprint(res.Unwanted) != "[d0 d2]" {
		t.Fatalf("reconcile after remove %+v, %v", res, err)
	}
	// An unknown node (master restarted, node expired) must re-register
	// first: reconciling it would call every key unwanted.
	_, err = reconcileAll(s, "ghost", []string{"d4"})
	mustIs(t, err, errcode.ErrNeedRemount)
}

// TestEvictSSDReplicaPerKey guards issue 9 item 3 (the SSD keeps admitting,
// invariant 4): EvictSSDReplica decides key by key. A leased key whose only
// readable replica is the node's SSD one is kept and answered in Keep
// (once, even if named twice) and stays readable; every other key of the
// same call loses that node's replica at once (no more all-or-nothing
// refusal); after the lease the kept key goes too. In-process and over
// gRPC (Keep travels in EvictSSDReplicaResponse.keep).
func TestEvictSSDReplicaPerKey(t *testing.T) {
	for _, via := range []string{"service", "grpc"} {
		t.Run(via, func(t *testing.T) {
			s, clk := offloadService(t, nil)
			var api masterapi.API = s
			if via == "grpc" {
				api = remoteService(t, s)
			}
			mount(t, api, "a", 1<<20)
			mount(t, api, "b", 1<<20)
			api.ReRegisterSSDColumns(bg, "a", masterapi.ColumnsOf([]masterapi.SSDObject{{Key: "x", Size: 10, CRC: 1}, {Key: "y", Size: 10, CRC: 1}, {Key: "z", Size: 10, CRC: 1}}))
			api.ReRegisterSSDColumns(bg, "b", masterapi.ColumnsOf([]masterapi.SSDObject{{Key: "z", Size: 10, CRC: 1}}))
			api.ExistKey(bg, "x")
			api.ExistKey(bg, "z")
			res, err := api.EvictSSDReplica(bg, "a", []string{"y", "x", "z", "x", "unknown"})
			if err != nil || res.Dropped != 2 || fmt.Sprint(res.Keep) != "[x]" {
				t.Fatalf("evict: %+v %v, want y and z dropped, x kept", res, err)
			}
			if info, err := api.GetReplicaList(bg, "x"); err != nil || kinds(info) != "SSD@a " {
				t.Fatalf("kept x: %s %v", kinds(info), err)
			}
			_, err = api.GetReplicaList(bg, "y") // unleased, nothing left: gone
			mustIs(t, err, errcode.ErrObjectNotFound)
			if info, err := api.GetReplicaList(bg, "z"); err != nil || kinds(info) != "SSD@b " {
				t.Fatalf("z: %s %v", kinds(info), err)
			}
			// After the lease the same key goes, and its object with it.
			clk.Advance(time.Hour)
			res, err = api.EvictSSDReplica(bg, "a", []string{"x"})
			if err != nil || res.Dropped != 1 || len(res.Keep) != 0 {
				t.Fatalf("after the lease: %+v %v", res, err)
			}
			_, err = api.GetReplicaList(bg, "x")
			mustIs(t, err, errcode.ErrObjectNotFound)
			_, err = api.EvictSSDReplica(bg, "a", []string{""})
			mustIs(t, err, errcode.ErrInvalidKey)
		})
	}
}

// TestFailedAnswerDropsPhantomSSDReplica: a notify the master applied but
// whose reply the node lost leaves an SSD replica the node rolled
// back; the node's later failure for that key (the task already settled)
// drops it. Inside a lease with nothing else readable the metadata stays
// as "gone" until the lease ends.
func TestFailedAnswerDropsPhantomSSDReplica(t *testing.T) {
	s, clk := offloadService(t, nil)
	mount(t, s, "a", 1<<20)
	put(t, s, "k", 64, "a")
	put(t, s, "l", 64, "a")
	if ts, _ := heartbeat(s, "a", 0); len(ts) != 2 {
		t.Fatalf("tasks %v", ts)
	}
	persisted := []masterapi.SSDObject{{Key: "k", Size: 64, CRC: crcOf("k")}, {Key: "l", Size: 64, CRC: crcOf("l")}}
	if errs, err := s.NotifyOffloadSuccess(bg, masterapi.NotifyRequest{Node: "a", Persisted: persisted}); err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatalf("notify %v %v", errs, err)
	}
	// The reply was lost: the node rolled the bucket back and answers
	// both tasks failed.
	if n, err := s.EvictDRAM(bg, []string{"l"}, false); n.Dropped != 1 || err != nil {
		t.Fatalf("evict DRAM of l: %d %v", n, err)
	}
	s.ExistKey(bg, "l") // lease l: its only replica is the phantom
	fails := []masterapi.OffloadFailure{{Key: "k", Retryable: true, Reason: "notify: reply lost"}, {Key: "l", Retryable: true, Reason: "notify: reply lost"}}
	if _, err := s.NotifyOffloadSuccess(bg, masterapi.NotifyRequest{Node: "a", Failed: fails}); err != nil {
		t.Fatal(err)
	}
	if info, err := s.GetReplicaList(bg, "k"); err != nil || kinds(info) != "DRAM@a " {
		t.Fatalf("k keeps only its DRAM replica: %s %v", kinds(info), err)
	}
	if st, _ := s.Stats(bg); st.SSDReplicas != 0 {
		t.Fatalf("phantom SSD replicas: %d", st.SSDReplicas)
	}
	// The failure was retryable: k (still in DRAM) is offered again; l has
	// no DRAM replica left to copy.
	if ts, _ := heartbeat(s, "a", 0); len(ts) != 1 || ts[0].Key != "k" {
		t.Fatalf("tasks after the failure: %+v", ts)
	}
	_, err := s.GetReplicaList(bg, "l")
	mustIs(t, err, errcode.ErrReplicaGone)
	clk.Advance(time.Hour)
	s.Tick()
	_, err = s.GetReplicaList(bg, "l")
	mustIs(t, err, errcode.ErrObjectNotFound)
}

// TestOnEvictOffloadsInsteadOfDropping: with offload_on_evict a victim
// without an SSD copy is queued, kept until persisted, then dropped from DRAM
// by a later round while its metadata stays.
func TestOnEvictOffloadsInsteadOfDropping(t *testing.T) {
	s, clk := offloadService(t, func(c *Config) { c.OffloadOnEvict = true; c.EvictionRatio = 1 })
	mount(t, s, "a", 1<<20)
	put(t, s, "k", 64, "a")
	if ts, _ := heartbeat(s, "a", 0); len(ts) != 0 {
		t.Fatal("on-evict queued at PutEnd")
	}
	clk.Advance(time.Hour)
	if n := s.EvictNow(); n != 0 {
		t.Fatal("dropped instead of offloading")
	}
	ts, _ := heartbeat(s, "a", 0)
	if len(ts) != 1 {
		t.Fatalf("tasks %v", ts)
	}
	s.NotifyOffloadSuccess(bg, masterapi.NotifyRequest{Node: "a", Persisted: []masterapi.SSDObject{{Key: "k", Size: 64, CRC: crcOf("k")}}})
	if n := s.EvictNow(); n != 1 {
		t.Fatal("not dropped after persisting")
	}
	info, err := s.GetReplicaList(bg, "k")
	if err != nil || kinds(info) != "SSD@a " {
		t.Fatalf("%s %v", kinds(info), err)
	}
	// EvictDRAM skips objects without an SSD copy.
	put(t, s, "m", 64, "a")
	if n, _ := s.EvictDRAM(bg, nil, true); n.Dropped != 0 || n.NoSSDCopy != 1 {
		t.Fatalf("EvictDRAM: %+v", n)
	}
}

// TestReadThresholdCounting: the master applies the counting rules of the
// read threshold: duplicates within a batch count once, offload-path
// lookups do not count, queued and on-SSD objects are skipped.
func TestReadThresholdCounting(t *testing.T) {
	s, _ := offloadService(t, func(c *Config) { c.OffloadReadAdmissionThreshold = 3 })
	mount(t, s, "a", 1<<20)
	put(t, s, "k", 64, "a")
	queued := func() int { st, _ := s.Stats(bg); return int(st.OffloadQueued + st.OffloadInFlight) }
	s.BatchExistKey(bg, []string{"k", "k", "k", "k"})    // counts once
	s.GetReplicaList(masterapi.WithOffloadPath(bg), "k") // not counted
	s.BatchGetReplicaList(masterapi.WithOffloadPath(bg), []string{"k"})
	if queued() != 0 {
		t.Fatal("queued too early")
	}
	s.BatchGetReplicaList(bg, []string{"k", "k"}) // 2
	if queued() != 0 {
		t.Fatal("queued at 2 lookups")
	}
	s.ExistKey(bg, "k") // 3
	if queued() != 1 {
		t.Fatal("not queued at the 3rd counted lookup")
	}
	s.ExistKey(bg, "k")
	if q := queued(); q != 1 {
		t.Fatalf("queued %d", q)
	}
}

// TestRestartedMasterCountsOnlyItsTasks guards issue 9 item 5: a master
// counts (tierstore_master_offload_failed_total, Stats.OffloadFailed) and
// logs as offload failures only answers to tasks it issued. A restarted
// master receives the node's failures for its predecessor's tasks: of a key
// it does not know, of a key it queued but never handed out, of a key it
// knows from re-registration only. None counts, none is retried or logged
// as an offload failure; the node's word still drops its SSD replica.
// Then a failure of a task it did issue counts once.
func TestRestartedMasterCountsOnlyItsTasks(t *testing.T) {
	for _, via := range []string{"service", "grpc"} {
		t.Run(via, func(t *testing.T) {
			var logs *logBuffer
			s, _ := offloadService(t, func(c *Config) { logs = logTo(c); c.OffloadReadAdmissionThreshold = 1000 })
			var api masterapi.API = s
			if via == "grpc" {
				api = remoteService(t, s)
			}
			// The nodes remount on the restarted master; b re-registers
			// what its SSD holds (a key also put anew in a's DRAM); a new
			// put is queued for a, which has not fetched the task yet.
			mount(t, api, "a", 1<<20)
			mount(t, api, "b", 1<<20)
			put(t, api, "registered", 64, "a")
			if errs, err := api.ReRegisterSSDColumns(bg, "b", masterapi.ColumnsOf([]masterapi.SSDObject{{Key: "registered", Size: 64, CRC: crcOf("registered")}})); err != nil || errs[0] != nil {
				t.Fatal(errs, err)
			}
			put(t, api, "queued", 64, "a")
			if err := s.Enqueue("queued"); err != nil {
				t.Fatal(err)
			}
			// Answers to the previous master's tasks.
			if _, err := api.NotifyOffloadSuccess(bg, masterapi.NotifyRequest{Node: "a", Failed: []masterapi.OffloadFailure{
				{Key: "unknown", Retryable: true, Reason: "SSD full"},
				{Key: "queued", Retryable: false, Reason: "object larger than a bucket"},
			}}); err != nil {
				t.Fatal(err)
			}
			if _, err := api.NotifyOffloadSuccess(bg, masterapi.NotifyRequest{Node: "b", Failed: []masterapi.OffloadFailure{
				{Key: "registered", Retryable: true, Reason: "rolled back"},
			}}); err != nil {
				t.Fatal(err)
			}
			st, _ := api.Stats(bg)
			if st.OffloadFailed != 0 || metricValue(t, s, "tierstore_master_offload_failed_total", "", "") != 0 ||
				metricValue(t, s, "tierstore_master_offload_retried_total", "", "") != 0 {
				t.Fatalf("a restarted master counted answers to tasks it never issued: %+v", st)
			}
			if l := logs.lines("offload"); len(l) != 0 {
				t.Fatalf("logged as offload failures: %q", l)
			}
			if st.SSDReplicas != 0 {
				t.Fatal("the node's word about its own SSD was ignored")
			}
			// Its own task: fetched, answered failed, counted once.
			if ts, _ := heartbeat(api, "a", 0); fmt.Sprint(taskKeys(ts)) != "[queued]" {
				t.Fatalf("tasks %v", taskKeys(ts))
			}
			api.NotifyOffloadSuccess(bg, masterapi.NotifyRequest{Node: "a", Failed: []masterapi.OffloadFailure{{Key: "queued", Reason: "object larger than a bucket"}}})
			if st, _ := api.Stats(bg); st.OffloadFailed != 1 {
				t.Fatalf("own task's failure: counted %d", st.OffloadFailed)
			}
			if l := logs.lines("offload failed permanently", "key="+strconv.Quote(keyspec.Show("queued"))); len(l) != 1 {
				t.Fatalf("own task's failure logged %q", l)
			}
		})
	}
}
