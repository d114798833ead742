package master

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/tierstore/tierstore/masterapi"
)

// TestObjSlabBounded (property): a chunk's slabs hand out distinct
// slots, make exactly one slot per object when every key is new (in
// about log2 of the chunk's size allocations), and at most twice the
// slots used (plus a first slab) whatever the mix of new and known keys.
func TestObjSlabBounded(t *testing.T) {
	n := &node{id: "a"}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, count := range []int{1, 2, 15, 16, 17, 100, 4095, 4096, 16384} {
		for _, newShare := range []float64{1, 0.5, 0.01, 0} {
			sl := objSlab{left: count}
			seen := map[*object]bool{}
			used, slabs := 0, 0
			for i := range count {
				sl.left--
				if rng.Float64() >= newShare && newShare < 1 {
					continue
				}
				before := sl.made
				o := sl.newSSDObject(int64(i+1), uint32(i), n, 7)
				if sl.made != before {
					slabs++
				}
				used++
				if seen[o] {
					t.Fatalf("%d items, %.2f new: object %d handed out twice", count, newShare, i)
				}
				seen[o] = true
				if o.size != int64(i+1) || o.crc != uint32(i) || len(o.ssd) != 1 || cap(o.ssd) != 1 || o.ssd[0].node != n || o.ssd[0].seen != 7 {
					t.Fatalf("%d items: object %d is %+v", count, i, *o)
				}
				if x := (*ssdObject)(unsafe.Pointer(o)); &o.ssd[0] != &x.rep[0] {
					t.Fatalf("%d items: object %d's replica is not in its own slot", count, i)
				}
			}
			name := fmt.Sprintf("%d items, %.2f new: %d objects", count, newShare, used)
			if sl.made > 2*used+objSlabMin || sl.made > count {
				t.Fatalf("%s in %d slots", name, sl.made)
			}
			if most := bits.Len(uint(count/objSlabMin)) + 1; newShare == 1 && (sl.made != count || slabs > most) {
				t.Fatalf("%s in %d slots, %d slabs: want %d slots in at most %d", name, sl.made, slabs, count, most)
			}
		}
	}
	// Every object is distinct: the whole set checked above, and a
	// write to one leaves its slab neighbours as they were.
	sl := objSlab{left: 64}
	var objs []*object
	for i := range 64 {
		sl.left--
		objs = append(objs, sl.newSSDObject(int64(i+1), 0, n, 0))
	}
	objs[10].size, objs[10].ssd = 999, append(objs[10].ssd, ssdReplica{node: &node{id: "b"}})
	for i, o := range objs {
		if i != 10 && (o.size != int64(i+1) || len(o.ssd) != 1 || o.ssd[0].node != n) {
			t.Fatalf("object %d changed with its neighbour: %+v", i, *o)
		}
	}
}

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
		for k, o := range sh.objs {
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
