package master

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
)

// TestRemoveAllAndRegexOverGRPC: RemoveAll and RemoveByRegex through a
// real gRPC connection. Both honour leases, offload pins and puts in
// progress unless forced, answer the count removed, and send each key
// through the one removal path (a refused key is left whole, exactly as
// Remove leaves it); a pattern that does not compile is INVALID_PARAMS
// naming it, and removes nothing.
func TestRemoveAllAndRegexOverGRPC(t *testing.T) {
	s, clk := testService(t, func(c *Config) { c.EnableOffload = true; c.OffloadOnEvict = true; c.ClientTTL = time.Hour })
	var api masterapi.API = remoteService(t, s)
	ctx, cancel := context.WithTimeout(bg, 20*time.Second)
	defer cancel()
	mount(t, api, "a", 1<<20)
	for _, k := range []string{"layer0/a", "layer0/b", "layer1/a", "layer1/b", "other"} {
		put(t, api, k, 1000, "a")
	}
	// layer0/b is leased, layer1/b has a put in progress (a new key),
	// other is pinned by an offload task.
	if _, err := api.GetReplicaList(ctx, "layer0/b"); err != nil {
		t.Fatal(err)
	}
	if _, err := api.PutStart(ctx, masterapi.PutStartRequest{Key: "layer1/c", Size: 1000, CRC: 1, PreferredNode: "a"}); err != nil {
		t.Fatal(err)
	}
	sh := s.shardOf("other")
	sh.mu.Lock()
	s.enqueue("other", sh.objs["other"])
	sh.mu.Unlock()

	// A bad pattern: INVALID_PARAMS naming it, nothing removed.
	_, err := api.RemoveByRegex(ctx, "layer(", false)
	mustIs(t, err, errcode.ErrInvalidParams)
	if !strings.Contains(err.Error(), `"layer("`) {
		t.Fatalf("the error does not name the pattern: %v", err)
	}
	// Backreferences are Mooncake's ECMAScript, not RE2: refused the same.
	if _, err := api.RemoveByRegex(ctx, `(a)\1`, true); !errors.Is(err, errcode.ErrInvalidParams) {
		t.Fatalf("backreference: %v", err)
	}
	if st, _ := api.Stats(ctx); st.Objects != 6 {
		t.Fatalf("a refused pattern removed objects: %d left", st.Objects)
	}

	// Matched anywhere in the key (std::regex_search): "/a$" is layer0/a
	// and layer1/a.
	if n, err := api.RemoveByRegex(ctx, "/a$", false); err != nil || n != 2 {
		t.Fatalf("RemoveByRegex(/a$) = %d, %v; want 2", n, err)
	}
	// ^layer: layer0/b is leased and layer1/c in progress: skipped.
	if n, err := api.RemoveByRegex(ctx, "^layer", false); err != nil || n != 1 {
		t.Fatalf("RemoveByRegex(^layer) = %d, %v; want 1 (layer1/b)", n, err)
	}
	left := keysOf(s)
	if want := []string{"layer0/b", "layer1/c", "other"}; !slices.Equal(left, want) {
		t.Fatalf("left %q, want %q", left, want)
	}
	// Non-forced RemoveAll skips all three, as Remove refuses each.
	if n, err := api.RemoveAll(ctx, false); err != nil || n != 0 {
		t.Fatalf("RemoveAll(false) = %d, %v; want 0", n, err)
	}
	for _, k := range left {
		if err := api.Remove(ctx, k, false); err == nil {
			t.Fatalf("Remove(%q) succeeded where RemoveAll skipped it", k)
		}
	}
	// After the lease: layer0/b goes; the other two still hold.
	clk.Advance(time.Minute)
	if n, err := api.RemoveAll(ctx, false); err != nil || n != 1 {
		t.Fatalf("RemoveAll(false) after the lease = %d, %v; want 1", n, err)
	}
	// Forced: everything, the put in progress included.
	if n, err := api.RemoveByRegex(ctx, "", true); err != nil || n != 2 {
		t.Fatalf("forced RemoveByRegex(\"\") = %d, %v; want 2", n, err)
	}
	if st, _ := api.Stats(ctx); st.Objects != 0 {
		t.Fatalf("%d objects left", st.Objects)
	}
	if n, err := api.RemoveAll(ctx, true); err != nil || n != 0 {
		t.Fatalf("RemoveAll of nothing = %d, %v", n, err)
	}
}

// keysOf lists s's keys, sorted.
func keysOf(s *Service) []string {
	var out []string
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k := range s.everyObject(sh) {
			out = append(out, k)
		}
		sh.mu.Unlock()
	}
	slices.Sort(out)
	return out
}

// A walk over every object (RemoveByRegex, RemoveAll) releases each
// shard's lock every scanHold objects: lookups, and puts of keys the
// removal does not match, go on in between (at 50M objects one shard's
// walk would hold them for tens of ms; a put of a matching key waits for
// the removal to be durable anyway, removalLog.waitKey), and what they put
// is not removed.
func TestRemovalWalkReleasesShardLock(t *testing.T) {
	for _, all := range []bool{false, true} {
		t.Run(fmt.Sprintf("all=%v", all), func(t *testing.T) {
			s, _ := testService(t, func(c *Config) { c.Shards = 1 })
			const n = 2*scanHold + 100
			mount(t, s, "n1", 64*(n+10))
			for i := range n {
				put(t, s, fmt.Sprintf("k%d", i), 64, "n1")
			}
			var during []string
			yields := 0
			s.hooks.scanYielded = func() {
				yields++
				if !shardReleased(t, s, "walk") {
					return // (a put or lookup here would wait for it for ever)
				}
				if _, err := s.ExistKey(bg, "k0"); err != nil {
					t.Fatal(err)
				}
				if !all { // RemoveAll matches every key: its puts wait for it
					k := fmt.Sprintf("other%d", len(during))
					put(t, s, k, 64, "n1")
					during = append(during, k)
				}
			}
			var removed int64
			var err error
			if all {
				removed, err = s.RemoveAll(bg, true)
			} else {
				removed, err = s.RemoveByRegex(bg, "^k", true)
			}
			if err != nil {
				t.Fatal(err)
			}
			if removed != n {
				t.Fatalf("removed %d objects, want the %d put before the call", removed, n)
			}
			if yields != n/scanHold || !all && len(during) != yields {
				t.Fatalf("the walk yielded %d times (%d puts in between), want %d", yields, len(during), n/scanHold)
			}
			for _, k := range during {
				if ok, err := s.ExistKey(bg, k); err != nil || !ok {
					t.Fatalf("%s, put while the walk had yielded, is gone (%v, %v)", k, ok, err)
				}
			}
		})
	}
}
