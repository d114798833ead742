package master

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
)

// toSSD gives keys (put on node) their SSD copies: one heartbeat's tasks,
// all persisted.
func toSSD(t *testing.T, s *Service, node string, keys ...string) {
	t.Helper()
	tasks, err := heartbeat(s, node, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, k := range keys {
		want[k] = true
	}
	req := masterapi.NotifyRequest{Node: node}
	for _, tk := range tasks {
		if want[tk.Key] {
			req.Persisted = append(req.Persisted, masterapi.SSDObject{Key: tk.Key, Size: tk.Size, CRC: tk.CRC})
			delete(want, tk.Key)
		}
	}
	if len(want) > 0 {
		t.Fatalf("no offload task for %v (tasks %v)", want, taskKeys(tasks))
	}
	if _, err := s.NotifyOffloadSuccess(bg, req); err != nil {
		t.Fatal(err)
	}
}

// An acknowledged DRAM eviction is an entry of the removal log, durable
// before EvictDRAM answers: a restarted master (the same store) refuses
// the evicted DRAM record even though no node ever pulled the entry, and
// accepts the key's SSD copy (the eviction does not touch it) and a DRAM
// record of a newer put of the key.
func TestEvictDRAMIsALogEntry(t *testing.T) {
	store := NewMemoryRemovalStore()
	s, _ := offloadService(t, func(c *Config) { c.Removals = store })
	var api masterapi.API = remoteService(t, s) // EvictDRAM and the pulls over gRPC
	mount(t, s, "a", 1<<20)
	rk := put(t, s, "k", 1000, "a")
	ro := put(t, s, "other", 1000, "a")
	toSSD(t, s, "a", "k", "other")
	before := masterapi.RemovalCursor{Log: s.RemovalLog().ID, Seq: s.RemovalLog().Durable}
	if res, err := api.EvictDRAM(bg, []string{"k"}, false); err != nil || res.Dropped != 1 {
		t.Fatalf("EvictDRAM: %+v %v", res, err)
	}
	if len(store.st.Entries) != 1 {
		t.Fatalf("the store holds %d entries after the acknowledgement, want 1", len(store.st.Entries))
	}
	got, _ := pullAll(t, api, "a", before, before)
	if len(got) != 1 || got[0].Kind != masterapi.EvictionKey || got[0].Key != "k" || got[0].Seq <= rk.PutToken {
		t.Fatalf("pulled %+v, want one DRAM eviction of k above put %d", got, rk.PutToken)
	}

	// kill -9 of the master before any node applied it: the next one.
	s2, _ := offloadService(t, func(c *Config) { c.Removals = store })
	holdMount(t, s2, "a", 1<<20)
	recs := []masterapi.DRAMObject{
		{Key: "k", Offset: rk.Offset, Length: 1000, CRC: crcOf("k"), PutToken: rk.PutToken},
		{Key: "other", Offset: ro.Offset, Length: 1000, CRC: crcOf("other"), PutToken: ro.PutToken},
	}
	errs, err := s2.ReRegisterDRAMObjects(bg, "a", "seg0", recs, true)
	if err != nil || !errors.Is(errs[0], errcode.ErrObjectNotFound) || !strings.Contains(errs[0].Error(), "evicted") || errs[1] != nil {
		t.Fatalf("re-registration after the eviction: %v %v", errs, err)
	}
	pullAll(t, s2, "a", before, before) // the node's SSD cursor is below the entry
	errs, err = s2.ReRegisterSSDObjects(bg, "a", []masterapi.SSDObject{{Key: "k", Size: 1000, CRC: crcOf("k")}, {Key: "other", Size: 1000, CRC: crcOf("other")}})
	if err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatalf("the SSD copies (a DRAM eviction leaves them): %v %v", errs, err)
	}
	info, err := s2.GetReplicaList(bg, "k")
	if err != nil || kinds(info) != "SSD@a " {
		t.Fatalf("k after the restart: %s %v", kinds(info), err)
	}
	// A newer put of the key is not covered by the eviction's entry.
	mustIs(t, s2.Remove(bg, "k", true), nil)
	r2 := put(t, s2, "k", 1000, "a")
	s3, _ := offloadService(t, func(c *Config) { c.Removals = store })
	holdMount(t, s3, "a", 1<<20)
	if errs, err := s3.ReRegisterDRAMObjects(bg, "a", "seg0", []masterapi.DRAMObject{{Key: "k", Offset: r2.Offset, Length: 1000, CRC: crcOf("k"), PutToken: r2.PutToken}}, true); err != nil || errs[0] != nil {
		t.Fatalf("the put after the eviction: %v %v", errs, err)
	}
}

// EvictDRAM of all objects is one entry sparing the keys whose DRAM
// copies stayed: after a restart the evicted record is refused, the
// spared one (its offload still pending) accepted.
func TestEvictDRAMAllIsOneEntry(t *testing.T) {
	store := NewMemoryRemovalStore()
	s, _ := offloadService(t, func(c *Config) { c.Removals = store })
	mount(t, s, "a", 1<<20)
	rx := put(t, s, "x", 1000, "a")
	rn := put(t, s, "nodisk", 1000, "a")
	toSSD(t, s, "a", "x")
	if res, err := s.EvictDRAM(bg, nil, true); err != nil || res.Dropped != 1 || res.OffloadPending != 1 {
		t.Fatalf("EvictDRAM(all): %+v %v", res, err)
	}
	if es := store.st.Entries; len(es) != 1 || es[0].Kind != masterapi.EvictionEvery || len(es[0].Spared) != 1 || es[0].Spared[0] != "nodisk" {
		t.Fatalf("entries %+v, want one EvictionEvery sparing nodisk", es)
	}
	s2, _ := offloadService(t, func(c *Config) { c.Removals = store })
	holdMount(t, s2, "a", 1<<20)
	errs, err := s2.ReRegisterDRAMObjects(bg, "a", "seg0", []masterapi.DRAMObject{
		{Key: "x", Offset: rx.Offset, Length: 1000, CRC: crcOf("x"), PutToken: rx.PutToken},
		{Key: "nodisk", Offset: rn.Offset, Length: 1000, CRC: crcOf("nodisk"), PutToken: rn.PutToken},
	}, true)
	if err != nil || !errors.Is(errs[0], errcode.ErrObjectNotFound) || errs[1] != nil {
		t.Fatalf("re-registration after EvictDRAM(all): %v %v", errs, err)
	}
}

// An eviction whose entry cannot be made durable is not acknowledged
// (INTERNAL_ERROR naming the store's error).
func TestEvictDRAMNotDurableNotAcknowledged(t *testing.T) {
	fs := &failingStore{MemoryRemovalStore: NewMemoryRemovalStore()}
	s, _ := offloadService(t, func(c *Config) { c.Removals = fs })
	mount(t, s, "a", 1<<20)
	put(t, s, "k", 1000, "a")
	toSSD(t, s, "a", "k")
	fs.mu.Lock()
	fs.fail = errors.New("disk full")
	fs.mu.Unlock()
	_, err := s.EvictDRAM(bg, []string{"k"}, false)
	if !errors.Is(err, errcode.ErrInternal) || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("EvictDRAM with a failing store: %v", err)
	}
}

// A put of a key never waits for a DRAM eviction of it that is not
// durable yet (the eviction made no room for it, and its entry does not
// cover the newer put), while it does wait for a removal.
func TestPutDoesNotWaitForAnEviction(t *testing.T) {
	fs := &failingStore{MemoryRemovalStore: NewMemoryRemovalStore(), fail: errors.New("store down")}
	s, _ := testService(t, func(c *Config) { c.Removals = fs })
	s.rlog.add(masterapi.Removal{Kind: masterapi.EvictionKey, Key: "k"}, &s.tokens, s.now(), false)
	if err := s.rlog.waitKey(bg, "k"); err != nil {
		t.Fatalf("waitKey behind an eviction that is not durable: %v", err)
	}
	s.rlog.add(masterapi.Removal{Kind: masterapi.RemovalKey, Key: "k"}, &s.tokens, s.now(), false)
	if err := s.rlog.waitKey(bg, "k"); !errors.Is(err, errcode.ErrInternal) {
		t.Fatalf("waitKey behind a removal that is not durable: %v", err)
	}
}

// The file store keeps DRAM eviction entries across a restart; a log of
// format 1 (before them) is refused, naming both versions.
func TestFileRemovalStoreEvictions(t *testing.T) {
	dir := t.TempDir()
	f, err := OpenFileRemovalStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := offloadService(t, func(c *Config) { c.Removals = f })
	mount(t, s, "a", 1<<20)
	put(t, s, "k", 1000, "a")
	put(t, s, "x", 1000, "a")
	toSSD(t, s, "a", "k", "x")
	if res, err := s.EvictDRAM(bg, []string{"k"}, false); err != nil || res.Dropped != 1 {
		t.Fatal(res, err)
	}
	if res, err := s.EvictDRAM(bg, nil, true); err != nil || res.Dropped != 1 {
		t.Fatal(res, err)
	}
	s.Close()
	f.Close()
	f2, err := OpenFileRemovalStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := f2.Load(bg)
	f2.Close()
	if len(st.Entries) != 2 || st.Entries[0].Kind != masterapi.EvictionKey || st.Entries[0].Key != "k" || st.Entries[1].Kind != masterapi.EvictionEvery {
		t.Fatalf("reloaded %+v", st.Entries)
	}
	// The same file with a format-1 header.
	path := filepath.Join(dir, removalFile)
	b, _ := os.ReadFile(path)
	p, n, err := readRecord(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	p = append([]byte(nil), p...)
	p[1] = 1
	os.WriteFile(path, append(appendRecord(nil, p), b[n:]...), 0o644)
	if _, err := OpenFileRemovalStore(dir); err == nil || !strings.Contains(err.Error(), "removal log format 1, this build reads format 2") {
		t.Fatalf("a format-1 log: %v", err)
	}
}
