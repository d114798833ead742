package master

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/tierstore/tierstore/masterapi"
)

// TestReRegisterDuplicateKeysInChunk: a chunk that names a key twice
// (both occurrences looked up before either is recorded) makes one
// object, and ends as re-registering the keys one call each does.
func TestReRegisterDuplicateKeysInChunk(t *testing.T) {
	var objs []masterapi.SSDObject
	for i := range 300 {
		k := fmt.Sprint("u", i)
		objs = append(objs, masterapi.SSDObject{Key: k, Size: 100, CRC: crcOf(k)})
		switch i % 3 {
		case 0: // the same object again
			objs = append(objs, masterapi.SSDObject{Key: k, Size: 100, CRC: crcOf(k)})
		case 1: // again with another size: a conflict
			objs = append(objs, masterapi.SSDObject{Key: k, Size: 101, CRC: crcOf(k)})
		}
	}
	chunk, _ := testService(t, nil)
	one, _ := testService(t, nil)
	mount(t, chunk, "a", 1<<20)
	mount(t, one, "a", 1<<20)
	errs, err := chunk.ReRegisterSSDObjects(bg, "a", objs)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range objs {
		want, err := one.ReRegisterSSDObjects(bg, "a", objs[i:i+1])
		if err != nil {
			t.Fatal(err)
		}
		if (errs[i] == nil) != (want[0] == nil) {
			t.Fatalf("%s (item %d): answered %v in a chunk, %v alone", d.Key, i, errs[i], want[0])
		}
	}
	if a, b := reregState(chunk), reregState(one); a != b {
		t.Fatalf("state after the chunk:\n%s\none by one:\n%s", a, b)
	}
	for _, s := range []*Service{chunk, one} {
		if err := s.Check(); err != nil {
			t.Fatal(err)
		}
		if st, _ := s.Stats(bg); st.Objects != 300 || st.SSDReplicas != 300 {
			t.Fatalf("stats %+v, want 300 objects and SSD replicas", st)
		}
	}
}

// TestReRegisterOverGRPCKeepsKeys: over gRPC the master keeps the decoded
// request's key bytes as its map keys (not copied again); chunk after
// chunk, sent 3 at a time as a node does, every key must stay what it
// was, so those bytes must be the call's own, never a receive buffer
// that a later call reuses.
func TestReRegisterOverGRPCKeepsKeys(t *testing.T) {
	s, _ := testService(t, nil)
	api := remoteService(t, s)
	mount(t, api, "a", 1<<20)
	const chunks, per = 24, 500
	var wg sync.WaitGroup
	sem := make(chan struct{}, 3)
	for c := range chunks {
		var objs []masterapi.SSDObject
		for i := range per {
			k := fmt.Sprintf("grpc/%03d/%04d/%s", c, i, strings.Repeat("x", (c*per+i)%40))
			objs = append(objs, masterapi.SSDObject{Key: k, Size: int64(1 + i), CRC: crcOf(k)})
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs, err := api.ReRegisterSSDColumns(bg, "a", masterapi.ColumnsOf(objs))
			if err != nil {
				t.Error(err)
				return
			}
			for i, e := range errs {
				if e != nil {
					t.Errorf("%s: %v", objs[i].Key, e)
				}
			}
		})
	}
	wg.Wait()
	var bad []string
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, o := range s.everyObject(sh) {
			n++
			var c, j int
			if _, err := fmt.Sscanf(k, "grpc/%03d/%04d/", &c, &j); err != nil || k != fmt.Sprintf("grpc/%03d/%04d/%s", c, j, strings.Repeat("x", (c*per+j)%40)) ||
				o.size != int64(1+j) || o.crc != crcOf(k) || s.shardIndex(k) != i {
				bad = append(bad, k)
			}
		}
		sh.mu.Unlock()
	}
	if n != chunks*per || len(bad) > 0 {
		t.Fatalf("%d objects, want %d; %d keys not as sent, e.g. %q", n, chunks*per, len(bad), bad[:min(len(bad), 3)])
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}

// populate changes no byte of the memory it is given, at page-aligned
// and unaligned ends alike (it is called on Go heap memory).
func TestPopulateKeepsBytes(t *testing.T) {
	buf := make([]byte, 5*4096+123)
	for i := range buf {
		buf[i] = byte(i*31 + 7)
	}
	for _, r := range [][2]int{{0, len(buf)}, {1, len(buf) - 1}, {4095, 4097}, {100, 200}} {
		populate(unsafe.Pointer(&buf[r[0]]), uintptr(r[1]-r[0]))
	}
	for i := range buf {
		if buf[i] != byte(i*31+7) {
			t.Fatalf("byte %d changed to %d", i, buf[i])
		}
	}
}
