package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/testkit"
	"github.com/tierstore/tierstore/masterapi"
)

// A removal is final (issue 21, docs/design.md invariant 10), through the
// real binaries: after each event below a removed key reads as not found,
// `exists` says false, and the node that held it drops its copies, while
// a key that was not removed (the control) comes back whole. Each test
// waits for the control to be readable again, which proves that the
// re-registrations it is about have happened.

// lifecycleRig is one master (with a state directory, so the removal log
// survives its kill -9) and one node with an SSD.
type lifecycleRig struct {
	t      *testing.T
	port   int
	state  string
	ssd    string
	master *proc
	node   *proc
	c      *client.Client
	vals   map[string][]byte
	keys   []string // removed by the scenario
	ctrl   string   // kept
}

const lifecycleSize = 256 << 10

func newLifecycleRig(t *testing.T) *lifecycleRig {
	r := &lifecycleRig{t: t, port: testkit.FreePort(t), state: t.TempDir(), ssd: t.TempDir()}
	r.startMaster()
	r.startNode()
	r.c = newClient(t, r.master.Addr, "")
	r.vals, r.keys = putAll(t, r.c, "k", 5, lifecycleSize)
	r.ctrl = "control"
	r.vals[r.ctrl] = randomValue(lifecycleSize)
	if err := r.c.Put(context.Background(), r.ctrl, r.vals[r.ctrl]); err != nil {
		t.Fatal(err)
	}
	waitSSDReplicas(t, r.c, 6)
	return r
}

func (r *lifecycleRig) startMaster() {
	r.master = startMaster(r.t, r.port, "--state_dir="+r.state)
}

func (r *lifecycleRig) startNode() {
	r.node = startNode(r.t, r.master.Addr, r.ssd, "--reconcile_interval=1h") // reconcile would hide a resurrection
}

// removeAll removes the scenario's keys with one `tierstore rm --regex`,
// forced (the puts' and the offload's leases and pins do not matter
// here), and checks the count.
func (r *lifecycleRig) removeAll() {
	r.t.Helper()
	if out, e, code := cli(r.t, "rm", "--master", r.master.Addr, "--force", "--regex", "^k-"); code != 0 || strings.TrimSpace(out) != fmt.Sprintf("removed %d", len(r.keys)) {
		r.t.Fatalf("rm --regex: %d %q %s", code, out, e)
	}
}

// checkGone waits until the control key reads back whole (through a new
// client: the master may have restarted), then checks that every removed
// key is not found for get and false for exists, that the master knows
// the control only, and that the node holds only the control on SSD (its
// live SSD bytes are the control's, in NodeStats and `tierstore stats`).
func (r *lifecycleRig) checkGone() {
	t := r.t
	t.Helper()
	c := newClient(t, r.master.Addr, "")
	ctx := context.Background()
	testkit.Within(t, 30*time.Second, "the control key readable", func() error {
		got, err := c.Get(ctx, r.ctrl)
		if err == nil && !bytes.Equal(got, r.vals[r.ctrl]) {
			t.Fatal("the control key read back other bytes")
		}
		return err
	})
	for _, k := range r.keys {
		if _, err := c.Get(ctx, k); !errors.Is(err, client.ErrObjectNotFound) {
			t.Fatalf("get %s after its removal: %v (want OBJECT_NOT_FOUND)", k, err)
		}
		if out, _, code := cli(t, "exists", "--master", r.master.Addr, k); code != 1 || strings.TrimSpace(out) != "false" {
			t.Fatalf("exists %s after its removal: exit %d, %q", k, code, out)
		}
	}
	testkit.Within(t, 20*time.Second, "the node holds the control only", func() error {
		st, err := c.Stats(ctx)
		if err != nil {
			return err
		}
		if st.Objects != 1 {
			return fmt.Errorf("the master knows %d objects", st.Objects)
		}
		if ns := nodeStats(t, r.node.Addr); ns.GetSsdObjects() != 1 || ns.GetSsdBytesLive() != lifecycleSize {
			return fmt.Errorf("the node holds %d SSD objects, %d live bytes", ns.GetSsdObjects(), ns.GetSsdBytesLive())
		}
		return nil
	})
	// What an operator sees: the removed objects' bytes are not live.
	if out, e, code := cli(t, "stats", "--master", r.master.Addr, "--node", r.node.Addr); code != 0 || !strings.Contains(out, "256.0 KiB live") {
		t.Fatalf("stats --node: %d %s\n%s", code, e, out)
	}
}

// The scenario: the five keys on SSD, two evicted from DRAM, all
// five removed; kill -9 of the master, then of the node: none comes back,
// and an evicted DRAM copy is not re-registered either.
func TestRemoveThenMasterAndNodeKill9(t *testing.T) {
	r := newLifecycleRig(t)
	if out, e, code := cli(t, "evict", "--master", r.master.Addr, "--tier", "dram", r.keys[0], r.keys[1]); code != 0 || !strings.HasPrefix(out, "dropped 2") {
		t.Fatalf("evict: %d %q %s", code, out, e)
	}
	r.removeAll()
	r.master.Kill(syscall.SIGKILL)
	r.startMaster()
	r.checkGone()
	r.node.Kill(syscall.SIGKILL)
	r.startNode()
	r.checkGone()
}

// A DRAM eviction the node has applied is final: after a kill -9 of the
// master the evicted keys are readable from SSD only (no DRAM replica is
// re-registered), the others from DRAM too.
func TestEvictThenMasterKill9(t *testing.T) {
	r := newLifecycleRig(t)
	if _, e, code := cli(t, "evict", "--master", r.master.Addr, "--tier", "dram", r.keys[0], r.keys[1]); code != 0 {
		t.Fatalf("evict: %d %s", code, e)
	}
	testkit.Within(t, 10*time.Second, "the node forgot the evicted DRAM records", func() error {
		if n := nodeStats(t, r.node.Addr).GetDramRecords(); n != 4 {
			return fmt.Errorf("%d DRAM records", n)
		}
		return nil
	})
	r.master.Kill(syscall.SIGKILL)
	r.startMaster()
	r.checkDRAM(map[string]bool{r.keys[0]: true, r.keys[1]: true})
}

// An acknowledged DRAM eviction the node has not applied yet (it is
// stopped, so it cannot pull the removal log) survives a kill -9 of the
// master in that window: the evicted keys come back from SSD only. A
// newer put of an evicted key (evicted, removed, put again before the
// window) keeps its DRAM copy: the eviction's entry covers only older
// puts.
func TestEvictAcknowledgedBeforeTheNodeLearnsOfIt(t *testing.T) {
	r := newLifecycleRig(t)
	again := r.keys[2]
	r.evictDRAM(again)
	if err := r.c.Remove(context.Background(), again, true); err != nil {
		t.Fatal(err)
	}
	r.vals[again] = randomValue(lifecycleSize)
	if err := r.c.Put(context.Background(), again, r.vals[again]); err != nil {
		t.Fatal(err)
	}
	waitSSDReplicas(t, r.c, 6)
	r.node.Kill(syscall.SIGSTOP)
	r.evictDRAM(r.keys[0], r.keys[1])
	r.master.Kill(syscall.SIGKILL)
	r.startMaster()
	r.node.Kill(syscall.SIGCONT)
	r.checkDRAM(map[string]bool{r.keys[0]: true, r.keys[1]: true})
}

// evictDRAM evicts keys from DRAM with `tierstore evict --tier dram`
// and checks that each was dropped.
func (r *lifecycleRig) evictDRAM(keys ...string) {
	r.t.Helper()
	args := append([]string{"evict", "--master", r.master.Addr, "--tier", "dram"}, keys...)
	if out, e, code := cli(r.t, args...); code != 0 || !strings.HasPrefix(out, fmt.Sprintf("dropped %d", len(keys))) {
		r.t.Fatalf("evict: %d %q %s", code, out, e)
	}
}

// checkDRAM waits, through a new client, until every key of r.vals has
// its SSD replica re-registered, then checks that the evicted keys have no
// DRAM replica, the others one, and that each reads back its bytes.
func (r *lifecycleRig) checkDRAM(evicted map[string]bool) {
	t := r.t
	t.Helper()
	c := newClient(t, r.master.Addr, "")
	ctx := context.Background()
	testkit.Within(t, 30*time.Second, "the control key readable", func() error { _, err := c.Get(ctx, r.ctrl); return err })
	for _, k := range append([]string{r.ctrl}, r.keys...) {
		// The DRAM re-registration comes before the SSD one: once the SSD
		// replica is listed, every DRAM replica that will be is.
		waitReRegistered(t, c, k, evicted[k], 20*time.Second, "the replicas of "+k)
		if got, err := c.Get(ctx, k); err != nil || !bytes.Equal(got, r.vals[k]) {
			t.Fatalf("get %s: %v", k, err)
		}
	}
}

// waitReRegistered waits (within d, saying what) until the master lists
// key's SSD replica and, unless the key was evicted from DRAM, a DRAM one;
// an evicted key whose DRAM replica comes back fails the test at once.
func waitReRegistered(t *testing.T, c *client.Client, key string, evicted bool, d time.Duration, what string) {
	t.Helper()
	testkit.Within(t, d, what, func() error {
		info, err := c.Master().GetReplicaList(context.Background(), key)
		if err != nil {
			return err
		}
		dram, ssd := false, false
		for _, rep := range info.Replicas {
			dram = dram || rep.Kind == masterapi.DRAM
			ssd = ssd || rep.Kind == masterapi.SSD
		}
		switch {
		case !ssd:
			return fmt.Errorf("no SSD replica yet: %+v", info.Replicas)
		case evicted && dram:
			t.Fatalf("%s was evicted from DRAM, yet its DRAM replica was re-registered: %+v", key, info.Replicas)
		case !evicted && !dram:
			return fmt.Errorf("no DRAM replica yet: %+v", info.Replicas)
		}
		return nil
	})
}

// kill -9 between the acknowledgement of a removal and its arrival at the
// node: the node is stopped (it cannot pull) when the removals are
// acknowledged, then the master is killed and restarted (or the node is
// killed and restarted on its SSD directory).
func TestRemovalAcknowledgedBeforeTheNodeLearnsOfIt(t *testing.T) {
	for _, who := range []string{"master", "node"} {
		t.Run("kill -9 of the "+who, func(t *testing.T) {
			r := newLifecycleRig(t)
			r.node.Kill(syscall.SIGSTOP)
			r.removeAll()
			if who == "master" {
				r.master.Kill(syscall.SIGKILL)
				r.startMaster()
				r.node.Kill(syscall.SIGCONT)
			} else {
				r.node.Kill(syscall.SIGKILL)
				r.startNode()
			}
			r.checkGone()
		})
	}
}

// A node partitioned when the removals are acknowledged (here: stopped),
// for less than client_ttl and for more (the master expired it; it comes
// back with its DRAM records and its SSD, and a cursor from before).
func TestRemoveWhileNodePartitionedThenHeal(t *testing.T) {
	for _, away := range []time.Duration{500 * time.Millisecond, 5 * time.Second} { // client_ttl is 2 s
		t.Run(fmt.Sprint("away ", away), func(t *testing.T) {
			r := newLifecycleRig(t)
			r.node.Kill(syscall.SIGSTOP)
			r.removeAll()
			time.Sleep(away) // the partition's length is the scenario, not a wait for an event
			r.node.Kill(syscall.SIGCONT)
			r.checkGone()
		})
	}
}

// An HA failover (kill -9 of the leader) after the removals: the next
// leader loads the removal log from etcd.
func TestRemoveThenHAFailover(t *testing.T) {
	h := startHA(t, 2)
	lead, term := h.leader(0)
	n := startNode(t, h.url, t.TempDir(), "--reconcile_interval=1h")
	c := haClient(t, h.url)
	vals, keys := putAll(t, c, "k", 5, lifecycleSize)
	vals["control"] = randomValue(lifecycleSize)
	ctx := context.Background()
	if err := c.Put(ctx, "control", vals["control"]); err != nil {
		t.Fatal(err)
	}
	waitSSDReplicas(t, c, 6)
	for _, k := range keys {
		if err := c.Remove(ctx, k, true); err != nil {
			t.Fatal(err)
		}
	}
	lead.Kill(syscall.SIGKILL)
	h.leader(term)
	testkit.Within(t, 30*time.Second, "the control key readable at the new leader", func() error {
		got, err := c.Get(ctx, "control")
		if err == nil && !bytes.Equal(got, vals["control"]) {
			t.Fatal("the control read back other bytes")
		}
		return err
	})
	for _, k := range keys {
		if _, err := c.Get(ctx, k); !errors.Is(err, client.ErrObjectNotFound) {
			t.Fatalf("get %s after the failover: %v", k, err)
		}
		if ok, err := c.Exists(ctx, k); ok || err != nil {
			t.Fatalf("exists %s after the failover: %v %v", k, ok, err)
		}
	}
	testkit.Within(t, 20*time.Second, "the node holds the control only", func() error {
		if got := nodeStats(t, n.Addr).GetSsdObjects(); got != 1 {
			return fmt.Errorf("%d SSD objects", got)
		}
		return nil
	})
}

// An acknowledged DRAM eviction the node has not applied yet (it is
// stopped) survives an HA failover (kill -9 of the leader): the next
// leader loads the eviction's entry from etcd and refuses the evicted
// DRAM copies; the keys stay readable from SSD, the others keep DRAM.
func TestEvictThenHAFailover(t *testing.T) {
	h := startHA(t, 2)
	lead, term := h.leader(0)
	n := startNode(t, h.url, t.TempDir(), "--reconcile_interval=1h")
	c := haClient(t, h.url)
	vals, keys := putAll(t, c, "k", 4, lifecycleSize)
	ctx := context.Background()
	waitSSDReplicas(t, c, 4)
	n.Kill(syscall.SIGSTOP)
	evicted := map[string]bool{keys[0]: true, keys[1]: true}
	if res, err := c.EvictDRAM(ctx, keys[:2], false); err != nil || res.Dropped != 2 {
		t.Fatalf("evict: %+v %v", res, err)
	}
	lead.Kill(syscall.SIGKILL)
	h.leader(term)
	n.Kill(syscall.SIGCONT)
	for _, k := range keys {
		waitReRegistered(t, c, k, evicted[k], 30*time.Second, "the replicas of "+k+" at the new leader")
		if got, err := c.Get(ctx, k); err != nil || !bytes.Equal(got, vals[k]) {
			t.Fatalf("get %s after the failover: %v", k, err)
		}
	}
}
