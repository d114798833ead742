package client

import (
	"testing"
	"time"

	"github.com/tierstore/tierstore/masterapi"
)

func cachedInfo(key string, lease time.Duration) masterapi.ObjectInfo {
	return masterapi.ObjectInfo{Key: key, Size: 10, CRC: 1, LeaseDeadline: time.Now().Add(lease),
		Replicas: []masterapi.Replica{{Kind: masterapi.DRAM, Status: masterapi.Complete, Node: "n", Endpoint: "127.0.0.1:1", Segment: "s", Length: 10, PutToken: 7}}}
}

// The cache's own rules (the behaviour over gRPC is node/loccache_test.go):
// least recently used out first, a lookup that overlapped a removal of
// this client is not kept, an answer without a lease or past its margin is
// not kept, a negative bound disables it.
func TestLocCacheRules(t *testing.T) {
	lc := newLocCache(2, 0)
	for _, k := range []string{"a", "b"} {
		lc.put(k, cachedInfo(k, 5*time.Second), time.Now(), lc.generation())
	}
	if _, ok := lc.get("a"); !ok {
		t.Fatal("a not cached")
	}
	lc.put("c", cachedInfo("c", 5*time.Second), time.Now(), lc.generation())
	if _, ok := lc.get("b"); ok {
		t.Fatal("b, the least recently used, was kept over the bound")
	}
	if _, ok := lc.get("a"); !ok {
		t.Fatal("a, used lately, was dropped")
	}

	gen := lc.generation()
	lc.removed("x", false)
	lc.put("d", cachedInfo("d", 5*time.Second), time.Now(), gen)
	if _, ok := lc.get("d"); ok {
		t.Fatal("a lookup sent before a removal of this client was cached")
	}

	lc.put("e", masterapi.ObjectInfo{Key: "e", Replicas: cachedInfo("e", 0).Replicas}, time.Now(), lc.generation())
	if _, ok := lc.get("e"); ok {
		t.Fatal("an answer without a lease was cached")
	}
	lc.put("f", cachedInfo("f", 100*time.Millisecond), time.Now().Add(-80*time.Millisecond), lc.generation())
	if _, ok := lc.get("f"); ok {
		t.Fatal("an answer sent 80 ms ago with 100 ms of lease (75 ms usable) was used")
	}

	lc.removed("", true)
	if n, b := lc.len(); n != 0 || b != 0 {
		t.Fatalf("RemoveAll left %d entries, %d bytes", n, b)
	}
	if newLocCache(-1, 0) != nil || newLocCache(0, -1) != nil {
		t.Fatal("a negative bound did not disable the cache")
	}
	if lc := newLocCache(0, 0); lc.maxEntries != DefaultLocationCacheEntries || lc.maxBytes != DefaultLocationCacheBytes {
		t.Fatalf("defaults %d %d", lc.maxEntries, lc.maxBytes)
	}
}
