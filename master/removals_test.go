package master

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
)

// pullAll pulls node's entries above the cursors until nothing is new and
// returns them with the last reply's cursor position.
func pullAll(t *testing.T, api masterapi.API, node string, dram, ssd masterapi.RemovalCursor) ([]masterapi.Removal, masterapi.PullReply) {
	t.Helper()
	var all []masterapi.Removal
	for {
		rep, err := api.PullRemovals(bg, masterapi.PullRequest{Node: node, DRAM: dram, SSD: ssd, HasSSD: true})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, rep.Removals...)
		if !rep.More {
			return all, rep
		}
		dram = masterapi.RemovalCursor{Log: rep.Log, Seq: rep.Through}
		ssd = dram
	}
}

// A removal is an entry of the log; a node pulls it; a DRAM record older
// than the entry and an SSD copy above the node's cursor are refused at
// re-registration; a put of the key after the removal is not covered.
func TestRemovalLogEntryRefusesReRegistration(t *testing.T) {
	store := NewMemoryRemovalStore()
	s, _ := testService(t, func(c *Config) { c.Removals = store })
	var api masterapi.API = remoteService(t, s) // the whole flow over gRPC
	mount(t, api, "a", 1<<20)
	r := put(t, api, "k", 1000, "a")
	cur := masterapi.RemovalCursor{Log: s.RemovalLog().ID, Seq: s.RemovalLog().Durable}
	if _, rep := pullAll(t, api, "a", cur, cur); !rep.Empty() || rep.Through != cur.Seq {
		t.Fatalf("nothing removed yet: %+v", rep)
	}
	if err := api.Remove(bg, "k", false); err != nil {
		t.Fatal(err)
	}
	got, rep := pullAll(t, api, "a", cur, cur)
	if len(got) != 1 || got[0].Kind != masterapi.RemovalKey || got[0].Key != "k" || got[0].Seq <= r.PutToken || rep.Through != got[0].Seq {
		t.Fatalf("pulled %+v (through %d), want one entry for k above put %d", got, rep.Through, r.PutToken)
	}
	if len(store.st.Entries) != 1 {
		t.Fatalf("the store holds %d entries, want 1 (durable before the acknowledgement)", len(store.st.Entries))
	}

	// A restarted master (the same store) refuses the removed DRAM record
	// and the SSD copy of a node whose cursor is below the entry.
	s2, _ := testService(t, func(c *Config) { c.Removals = store })
	api2 := remoteService(t, s2)
	holdMount(t, s2, "a", 1<<20)
	rec := masterapi.DRAMObject{Key: "k", Offset: r.Offset, Length: 1000, CRC: crcOf("k"), PutToken: r.PutToken}
	errs, err := api2.ReRegisterDRAMObjects(bg, "a", "seg0", []masterapi.DRAMObject{rec}, true)
	if err != nil || !errors.Is(errs[0], errcode.ErrObjectNotFound) || !strings.Contains(errs[0].Error(), "removed") {
		t.Fatalf("re-registration of the removed DRAM record: %v %v", errs, err)
	}
	pullAll(t, api2, "a", cur, cur) // the node reports its cursor (below the entry)
	errs, err = api2.ReRegisterSSDColumns(bg, "a", masterapi.ColumnsOf([]masterapi.SSDObject{{Key: "k", Size: 1000, CRC: crcOf("k")}}))
	if err != nil || !errors.Is(errs[0], errcode.ErrObjectNotFound) {
		t.Fatalf("re-registration of the removed SSD copy: %v %v", errs, err)
	}
	// Once the node applied the entry (its cursor passed it), an SSD copy
	// it holds is a newer put's: accepted.
	applied := masterapi.RemovalCursor{Log: rep.Log, Seq: rep.Through}
	pullAll(t, api2, "a", applied, applied)
	if errs, err := api2.ReRegisterSSDColumns(bg, "a", masterapi.ColumnsOf([]masterapi.SSDObject{{Key: "k", Size: 7, CRC: 7}})); err != nil || errs[0] != nil {
		t.Fatalf("an SSD copy written after the node applied the removal: %v %v", errs, err)
	}
	// A new put of the key: its token is above the entry; a DRAM record of
	// it is accepted by the next master.
	mustIs(t, api2.Remove(bg, "k", true), nil)
	r2 := put(t, api2, "k", 1000, "a")
	s3, _ := testService(t, func(c *Config) { c.Removals = store })
	holdMount(t, s3, "a", 1<<20)
	if errs, err := s3.ReRegisterDRAMObjects(bg, "a", "seg0", []masterapi.DRAMObject{{Key: "k", Offset: r2.Offset, Length: 1000, CRC: crcOf("k"), PutToken: r2.PutToken}}, true); err != nil || errs[0] != nil {
		t.Fatalf("the put after the removal: %v %v", errs, err)
	}
}

// A master whose log was in memory restarts: its new log has another id,
// so a node's cursors name a log that is gone and it must drop its copies;
// DRAM records of the old master predate the new log's origin.
func TestRemovalLogLostTellsNodesToDrop(t *testing.T) {
	s1, _ := testService(t, nil)
	mount(t, s1, "a", 1<<20)
	r := put(t, s1, "k", 1000, "a")
	old := masterapi.RemovalCursor{Log: s1.RemovalLog().ID, Seq: s1.RemovalLog().Durable}

	s2, _ := testService(t, func(c *Config) { c.Clock = NewManualClock(t0.Add(time.Minute)) }) // later, as a restart is
	if s2.RemovalLog().ID == old.Log {
		t.Fatal("two logs in memory share an id")
	}
	holdMount(t, s2, "a", 1<<20)
	rep, err := s2.PullRemovals(bg, masterapi.PullRequest{Node: "a", DRAM: old, SSD: old, HasSSD: true})
	if err != nil || !rep.DropDRAM || !rep.DropSSD || rep.Log == old.Log {
		t.Fatalf("pull with another log's cursors: %+v %v", rep, err)
	}
	errs, err := s2.ReRegisterDRAMObjects(bg, "a", "seg0", []masterapi.DRAMObject{{Key: "k", Offset: r.Offset, Length: 1000, CRC: crcOf("k"), PutToken: r.PutToken}}, true)
	if err != nil || !errors.Is(errs[0], errcode.ErrObjectNotFound) || !strings.Contains(errs[0].Error(), "predates") {
		t.Fatalf("a record older than the log: %v %v", errs, err)
	}
	// A new process (no DRAM cursor) with no SSD: nothing to drop.
	if rep, err := s2.PullRemovals(bg, masterapi.PullRequest{Node: "a"}); err != nil || rep.DropDRAM || rep.DropSSD {
		t.Fatalf("pull of a fresh node: %+v %v", rep, err)
	}
	// An SSD that never pulled (a new directory) is not dropped: its
	// re-registration is checked against every retained entry.
	if rep, _ := s2.PullRemovals(bg, masterapi.PullRequest{Node: "a", HasSSD: true}); rep.DropSSD || rep.DropDRAM {
		t.Fatalf("pull of a never-pulled SSD: %+v", rep)
	}
	mustIs(t, func() error { _, err := s2.PullRemovals(bg, masterapi.PullRequest{Node: "ghost"}); return err }(), errcode.ErrNeedRemount)
}

// RemoveAll and RemoveByRegex are one entry each, with the keys they
// spared; the entry covers the removed keys and not the spared ones.
func TestRemovalLogBulkEntries(t *testing.T) {
	s, _ := testService(t, nil)
	mount(t, s, "a", 1<<20)
	for _, k := range []string{"a/1", "a/2", "b/1"} {
		put(t, s, k, 100, "a")
	}
	if _, err := s.GetReplicaList(bg, "a/2"); err != nil { // leased: spared
		t.Fatal(err)
	}
	if n, err := s.RemoveByRegex(bg, "^a/", false); err != nil || n != 1 {
		t.Fatalf("RemoveByRegex: %d %v", n, err)
	}
	got, _ := pullAll(t, s, "a", masterapi.RemovalCursor{Log: s.RemovalLog().ID, Seq: s.RemovalLog().Origin}, masterapi.RemovalCursor{Log: s.RemovalLog().ID, Seq: s.RemovalLog().Origin})
	if len(got) != 1 || got[0].Kind != masterapi.RemovalPattern || got[0].Key != "^a/" || len(got[0].Spared) != 1 || got[0].Spared[0] != "a/2" {
		t.Fatalf("entries %+v", got)
	}
	if s.rlog.latest("a/1") != got[0].Seq || s.rlog.latest("a/2") != 0 || s.rlog.latest("b/1") != 0 {
		t.Fatalf("coverage: a/1 %d a/2 %d b/1 %d", s.rlog.latest("a/1"), s.rlog.latest("a/2"), s.rlog.latest("b/1"))
	}
	if n, err := s.RemoveAll(bg, true); err != nil || n != 2 {
		t.Fatalf("RemoveAll: %d %v", n, err)
	}
	if seq := s.rlog.latest("a/2"); seq <= got[0].Seq {
		t.Fatalf("the forced RemoveAll does not cover a/2: %d", seq)
	}
	if st := s.RemovalLog(); st.Retained != 2 || st.Pending != 0 {
		t.Fatalf("log %+v", st)
	}
}

// failingStore fails its appends while fail is set.
type failingStore struct {
	*MemoryRemovalStore
	mu   sync.Mutex
	fail error
}

func (f *failingStore) Append(ctx context.Context, e []masterapi.Removal) error {
	f.mu.Lock()
	err := f.fail
	f.mu.Unlock()
	if err != nil {
		return err
	}
	return f.MemoryRemovalStore.Append(ctx, e)
}

// A removal whose entry cannot be made durable is not acknowledged: the
// error names the store's; nodes are not given the entry until it is
// durable (the next removal writes it first).
func TestRemovalNotDurableNotAcknowledged(t *testing.T) {
	fs := &failingStore{MemoryRemovalStore: NewMemoryRemovalStore()}
	s, _ := testService(t, func(c *Config) { c.Removals = fs })
	mount(t, s, "a", 1<<20)
	put(t, s, "k1", 100, "a")
	put(t, s, "k2", 100, "a")
	fs.fail = errors.New("disk full")
	err := s.Remove(bg, "k1", true)
	if !errors.Is(err, errcode.ErrInternal) || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Remove with a failing store: %v", err)
	}
	cur := masterapi.RemovalCursor{Log: s.RemovalLog().ID, Seq: s.RemovalLog().Origin}
	if got, _ := pullAll(t, s, "a", cur, cur); len(got) != 0 {
		t.Fatalf("a node was given an entry that is not durable: %+v", got)
	}
	fs.fail = nil
	if err := s.Remove(bg, "k2", true); err != nil {
		t.Fatal(err)
	}
	if got, _ := pullAll(t, s, "a", cur, cur); len(got) != 2 || got[0].Key != "k1" || got[1].Key != "k2" {
		t.Fatalf("after the store recovered: %+v", got)
	}
}

// Trim: entries older than the retention go, the floor rises, and a node
// whose cursor is below it must drop its copies.
func TestRemovalLogTrim(t *testing.T) {
	store := NewMemoryRemovalStore()
	s, clk := testService(t, func(c *Config) {
		c.Removals = store
		c.RemovalLogRetention = time.Hour
		c.RemovalLogLimit = 2
		c.ClientTTL = 24 * time.Hour
	})
	mount(t, s, "a", 1<<20)
	cur := masterapi.RemovalCursor{Log: s.RemovalLog().ID, Seq: s.RemovalLog().Origin}
	for _, k := range []string{"k1", "k2", "k3"} {
		put(t, s, k, 100, "a")
		mustIs(t, s.Remove(bg, k, true), nil)
	}
	clk.Advance(2 * time.Minute)
	s.Tick() // the limit: k1's entry goes
	if st := s.RemovalLog(); st.Retained != 2 || st.Floor <= cur.Seq {
		t.Fatalf("after the limit trim: %+v", st)
	}
	if rep, _ := s.PullRemovals(bg, masterapi.PullRequest{Node: "a", DRAM: cur, SSD: cur, HasSSD: true}); !rep.DropDRAM || !rep.DropSSD {
		t.Fatalf("a cursor below the floor: %+v", rep)
	}
	clk.Advance(2 * time.Hour)
	s.Tick()
	if st := s.RemovalLog(); st.Retained != 0 || len(store.st.Entries) != 0 {
		t.Fatalf("after the retention: %+v (store %d)", st, len(store.st.Entries))
	}
	// A restarted master loads the floor.
	s2, _ := testService(t, func(c *Config) { c.Removals = store })
	if s2.RemovalLog().Floor != s.RemovalLog().Floor || s2.RemovalLog().ID != s.RemovalLog().ID {
		t.Fatalf("reloaded %+v, was %+v", s2.RemovalLog(), s.RemovalLog())
	}
}

// The file store: entries survive a reopen, a torn tail is cut (the
// append before it was never acknowledged), a trim survives too, and a
// second master on the directory is refused.
func TestFileRemovalStore(t *testing.T) {
	dir := t.TempDir()
	f, err := OpenFileRemovalStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenFileRemovalStore(dir); err == nil || !strings.Contains(err.Error(), "in use by another master") {
		t.Fatalf("second open: %v", err)
	}
	s, _ := testService(t, func(c *Config) { c.Removals = f })
	mount(t, s, "a", 1<<20)
	for _, k := range []string{"k1", "k2"} {
		put(t, s, k, 100, "a")
	}
	put(t, s, "x", 100, "a")
	mustIs(t, s.Remove(bg, "k1", true), nil)
	if n, err := s.RemoveByRegex(bg, "^k", true); err != nil || n != 1 {
		t.Fatal(n, err)
	}
	want := s.RemovalLog()
	s.Close()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	// A torn append: half a record at the end.
	path := filepath.Join(dir, removalFile)
	good, _ := os.Stat(path)
	rec := appendRecord(nil, encodeRemoval(masterapi.Removal{Seq: want.Durable + 1, Kind: masterapi.RemovalKey, Key: "torn"}))
	af, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	af.Write(rec[:len(rec)-3])
	af.Close()

	f2, err := OpenFileRemovalStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	if fi, _ := os.Stat(path); fi.Size() != good.Size() {
		t.Fatalf("the torn tail was not cut: %d bytes, want %d", fi.Size(), good.Size())
	}
	st, _ := f2.Load(bg)
	if st.ID != want.ID || len(st.Entries) != 2 || st.Entries[0].Key != "k1" || st.Entries[1].Kind != masterapi.RemovalPattern {
		t.Fatalf("reloaded %+v, want 2 entries of log %s", st, want.ID)
	}
	s2, _ := testService(t, func(c *Config) { c.Removals = f2 })
	if s2.rlog.latest("k2") != st.Entries[1].Seq || s2.rlog.latest("x") != 0 {
		t.Fatalf("coverage after reload: k2 %d x %d", s2.rlog.latest("k2"), s2.rlog.latest("x"))
	}
	if err := f2.Trim(bg, st.Entries[1].Seq); err != nil {
		t.Fatal(err)
	}
	f2.Close()
	f3, err := OpenFileRemovalStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f3.Close()
	if st, _ := f3.Load(bg); len(st.Entries) != 1 || st.Floor != st.Entries[0].Seq {
		t.Fatalf("after trim and reopen: %+v", st)
	}
	// Not a removal log: refused, naming it.
	bad := t.TempDir()
	os.WriteFile(filepath.Join(bad, removalFile), appendRecord(nil, []byte("Zjunk")), 0o644)
	if _, err := OpenFileRemovalStore(bad); err == nil || !strings.Contains(err.Error(), "not a removal log") {
		t.Fatalf("a foreign file: %v", err)
	}
}

// A removal waits behind a RemoveAll still scanning: its entry is after
// the open one, and nothing after the open entry is written before it.
func TestRemovalWaitsBehindOpenEntry(t *testing.T) {
	s, _ := testService(t, nil)
	now := s.now()
	open := s.rlog.add(masterapi.Removal{Kind: masterapi.RemovalEvery}, &s.tokens, now, true)
	later := s.rlog.add(masterapi.Removal{Kind: masterapi.RemovalKey, Key: "k"}, &s.tokens, now, false)
	done := make(chan error, 1)
	go func() { done <- s.rlog.wait(bg, later) }()
	select {
	case err := <-done:
		t.Fatalf("an entry after an open one became durable first: %v", err)
	case <-time.After(50 * time.Millisecond): // no event to wait for: the absence of one
	}
	if err := s.rlog.seal(open, nil); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, _, d := s.rlog.position(); d != later {
		t.Fatalf("durable %d, want %d", d, later)
	}
}

// The forget list: a DRAM replica evicted (the object lives on SSD) is
// handed to its node with the next pull, once.
func TestPullForgetList(t *testing.T) {
	s, _ := testService(t, func(c *Config) { c.EnableOffload = true })
	mount(t, s, "a", 1<<20)
	r := put(t, s, "k", 100, "a")
	tasks, _ := heartbeat(s, "a", 0)
	if len(tasks) != 1 {
		t.Fatal(tasks)
	}
	if _, err := s.NotifyOffloadSuccess(bg, masterapi.NotifyRequest{Node: "a", Persisted: []masterapi.SSDObject{{Key: "k", Size: 100, CRC: crcOf("k")}}}); err != nil {
		t.Fatal(err)
	}
	if res, _ := s.EvictDRAM(bg, []string{"k"}, false); res.Dropped != 1 {
		t.Fatal(res)
	}
	rep, _ := s.PullRemovals(bg, masterapi.PullRequest{Node: "a"})
	if len(rep.Forget) != 1 || rep.Forget[0] != (masterapi.DRAMRef{Offset: r.Offset, Token: r.PutToken}) {
		t.Fatalf("forget %+v, want the evicted replica", rep.Forget)
	}
	if rep, _ := s.PullRemovals(bg, masterapi.PullRequest{Node: "a"}); len(rep.Forget) != 0 {
		t.Fatalf("forget handed out twice: %+v", rep.Forget)
	}
}

// A put of a key whose removal is not durable yet waits for it, and fails
// when the store fails it: otherwise a lost removal (a crash, a leader
// cut from etcd) would let the removed copies come back over a newer put
// that was acknowledged.
func TestPutWaitsForTheRemovalBeforeIt(t *testing.T) {
	fs := &failingStore{MemoryRemovalStore: NewMemoryRemovalStore()}
	s, _ := testService(t, func(c *Config) { c.Removals = fs })
	mount(t, s, "a", 1<<20)
	put(t, s, "k", 100, "a")
	fs.fail = errors.New("etcd unreachable")
	if err := s.Remove(bg, "k", true); err == nil {
		t.Fatal("a removal that is not durable was acknowledged")
	}
	if _, err := s.PutStart(bg, masterapi.PutStartRequest{Key: "k", Size: 100, CRC: 1}); !errors.Is(err, errcode.ErrInternal) || !strings.Contains(err.Error(), "etcd unreachable") {
		t.Fatalf("a put over a removal that is not durable: %v", err)
	}
	put(t, s, "other", 100, "a") // other keys are not held up
	fs.fail = nil
	put(t, s, "k", 100, "a")
	if got := fs.st.Entries; len(got) != 1 || got[0].Key != "k" {
		t.Fatalf("store entries %+v", got)
	}
}
