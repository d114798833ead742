package node

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/master"
)

// lifeModel is what a key may read: the value of its latest acknowledged
// put, unless an acknowledged removal followed it. A put whose outcome is
// unknown (it failed after PutStart) may or may not have happened: its
// value is allowed too, until the next acknowledged removal or put.
type lifeModel struct {
	allowed map[string][][]byte // key -> the values a Get may return
}

func (m *lifeModel) acked(k string, v []byte)   { m.allowed[k] = [][]byte{v} }
func (m *lifeModel) maybe(k string, v []byte)   { m.allowed[k] = append(m.allowed[k], v) }
func (m *lifeModel) removed(k string)           { delete(m.allowed, k) }
func (m *lifeModel) ok(k string, v []byte) bool { return containsValue(m.allowed[k], v) }

func containsValue(vs [][]byte, v []byte) bool {
	for _, w := range vs {
		if bytes.Equal(w, v) {
			return true
		}
	}
	return false
}

// lifeRig is a real master (restarted with the same removal log), a real
// node with the real tier engine on disk (restarted on the same
// directory), and a client reading over the data plane.
type lifeRig struct {
	t   *testing.T
	mc  master.Config
	m   *master.Service
	sw  *switchable
	cfg Config
	n   *Node
	c   *client.Client
}

func newLifeRig(t *testing.T) *lifeRig {
	r := &lifeRig{t: t, mc: testMasterConfig(), sw: &switchable{}}
	r.mc.Removals = master.NewMemoryRemovalStore()
	r.mc.DefaultKVLeaseTTL = 50 * time.Millisecond // non-forced removes get through between reads
	r.m = newMaster(t, r.mc)
	r.sw.cur.Store(r.m)
	r.cfg = testNodeConfig("127.0.0.1:0")
	r.cfg.EnableOffload, r.cfg.SSDDir, r.cfg.Backend = true, t.TempDir(), "pwrite"
	r.cfg.Memory = 4 << 20
	r.startNode()
	r.newClient()
	return r
}

// newClient connects a client to the current master (the node is reached
// over its data plane).
func (r *lifeRig) newClient() {
	r.c = newTestClient(r.t, client.Config{Master: r.m, Timeout: 10 * time.Second})
}

func (r *lifeRig) startNode() {
	n, err := Start(context.Background(), r.cfg, r.sw, WithName("model-node"))
	if err != nil {
		r.t.Fatal(err)
	}
	r.n = n
}

// restartMaster replaces the master by a new one on the same removal log
// (its metadata starts empty) and lets the node remount and re-register
// at once, as its ping and heartbeat loops would.
func (r *lifeRig) restartMaster() {
	r.m.Close()
	r.m = newMaster(r.t, r.mc)
	r.sw.cur.Store(r.m)
	r.newClient()
	r.n.pingLocked()
	r.n.heartbeat()
}

// restartNode stops the node (its DRAM is lost) and starts it again on the
// same SSD directory: it re-registers what its SSD holds.
func (r *lifeRig) restartNode() {
	if err := r.n.Close(); err != nil {
		r.t.Fatal(err)
	}
	r.startNode()
}

// TestLifecycleModel runs random sequences of put, get, remove (forced or
// not), remove_all, remove_by_regex, DRAM eviction, offload, removal-log
// pulls, master restart and node restart against the model: a key reads
// only bytes of its latest acknowledged put, and only if no acknowledged
// removal followed it (issue 21, invariant 10). Misses are allowed (DRAM
// is lost with the node, a cache may drop what it holds).
func TestLifecycleModel(t *testing.T) {
	// Each check starts a master, a node and its tier: 10 checks of about
	// 30 steps unless -rapid.checks says otherwise (rapid's default, 100,
	// is for cheaper properties).
	defaultFlag("rapid.checks", "10")
	rapid.Check(t, func(rt *rapid.T) {
		r := newLifeRig(t)
		defer func() { r.n.Close() }()
		model := &lifeModel{allowed: map[string][][]byte{}}
		ctx := context.Background()
		keys := []string{"a/1", "a/2", "b/1", "b/2"}
		version := 0
		rt.Repeat(map[string]func(*rapid.T){
			"put": func(rt *rapid.T) {
				k := rapid.SampledFrom(keys).Draw(rt, "key")
				version++
				v := versioned(k, uint64(version), rapid.IntRange(100, 64<<10).Draw(rt, "size"))
				switch err := r.c.Put(ctx, k, v); {
				case err == nil:
					model.acked(k, v)
				case errors.Is(err, errcode.ErrObjectExists):
				default:
					model.maybe(k, v)
				}
			},
			"get": func(rt *rapid.T) {
				k := rapid.SampledFrom(keys).Draw(rt, "key")
				v, err := r.c.Get(ctx, k)
				if err == nil && !model.ok(k, v) {
					rt.Fatalf("get %s returned a value that is not its latest acknowledged put (or it was removed): %s", k, describe(k, v))
				}
				if errors.Is(err, errcode.ErrChecksumMismatch) {
					rt.Fatalf("get %s: %v", k, err)
				}
			},
			"remove": func(rt *rapid.T) {
				k := rapid.SampledFrom(keys).Draw(rt, "key")
				if r.c.Remove(ctx, k, rapid.Bool().Draw(rt, "force")) == nil {
					model.removed(k)
				}
			},
			"remove_by_regex": func(rt *rapid.T) {
				prefix := rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "prefix")
				if _, err := r.c.RemoveByRegex(ctx, "^"+prefix+"/", true); err == nil {
					for _, k := range keys {
						if k[0] == prefix[0] {
							model.removed(k)
						}
					}
				}
			},
			"remove_all": func(rt *rapid.T) {
				if _, err := r.c.RemoveAll(ctx, true); err == nil {
					model.allowed = map[string][][]byte{}
				}
			},
			"evict": func(rt *rapid.T) {
				_, _ = r.c.EvictDRAM(ctx, nil, true)
			},
			"offload":        func(*rapid.T) { r.n.OffloadNow() },
			"pull":           func(*rapid.T) { _ = r.n.SyncRemovals(ctx) },
			"restart master": func(*rapid.T) { r.restartMaster() },
			"restart node":   func(*rapid.T) { r.restartNode() },
		})
	})
}

// defaultFlag sets the test flag name to v unless the command line gave it.
func defaultFlag(name, v string) {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	if f := flag.Lookup(name); f != nil && !given {
		_ = f.Value.Set(v)
	}
}

func describe(k string, v []byte) string {
	if err := checkVersioned(k, v); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("a version of %s of %d bytes", k, len(v))
}
