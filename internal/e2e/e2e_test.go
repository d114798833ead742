package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/rpcpb"
	"github.com/tierstore/tierstore/internal/testkit"
	"github.com/tierstore/tierstore/masterapi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func putAll(t *testing.T, c *client.Client, prefix string, n, size int) (map[string][]byte, []string) {
	t.Helper()
	vals := map[string][]byte{}
	keys := make([]string, n)
	ctx := context.Background()
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%03d", prefix, i)
		vals[keys[i]] = randomValue(size)
		if err := c.Put(ctx, keys[i], vals[keys[i]]); err != nil {
			t.Fatalf("put %s: %v", keys[i], err)
		}
	}
	return vals, keys
}

func waitSSDReplicas(t *testing.T, c *client.Client, n int64) {
	t.Helper()
	testkit.Within(t, 30*time.Second, "objects offloaded", func() error {
		st, err := c.Stats(context.Background())
		if err != nil {
			return err
		}
		if st.SSDReplicas < n {
			return fmt.Errorf("%d of %d SSD replicas", st.SSDReplicas, n)
		}
		return nil
	})
}

func nodeStats(t *testing.T, endpoint string) *rpcpb.PeerStatsReply {
	t.Helper()
	cc, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := rpcpb.NewNodePeerClient(cc).NodeStats(ctx, &rpcpb.PeerStatsRequest{})
	if err != nil {
		t.Fatalf("node stats of %s: %v", endpoint, err)
	}
	return st
}

// Two nodes, two clients: objects put through one are read through the
// other (from DRAM, then, after `tierstore evict --tier dram --all`,
// from the SSD of whichever node holds them), and the CLI reads them too.
func TestTwoNodesCrossRead(t *testing.T) {
	m := startMaster(t, 0)
	a := startNode(t, m.Addr, t.TempDir())
	b := startNode(t, m.Addr, t.TempDir())
	const n, size = 12, 96 << 10
	// Half the objects on each node.
	ca := newClient(t, m.Addr, a.Node)
	cb := newClient(t, m.Addr, b.Node)
	va, ka := putAll(t, ca, "a", n/2, size)
	vb, kb := putAll(t, cb, "b", n/2, size)
	vals := map[string][]byte{}
	for k, v := range va {
		vals[k] = v
	}
	for k, v := range vb {
		vals[k] = v
	}
	keys := append(ka, kb...)

	reader := newClient(t, m.Addr, "")
	ctx := context.Background()
	for _, k := range keys {
		got, err := reader.Get(ctx, k)
		if err != nil || !bytes.Equal(got, vals[k]) {
			t.Fatalf("DRAM read of %s through another client: %v (equal=%v)", k, err, bytes.Equal(got, vals[k]))
		}
	}
	if rs := reader.ReadStats(); rs.RemoteDRAM != n {
		t.Fatalf("read stats after DRAM reads: %+v", rs)
	}
	waitSSDReplicas(t, reader, n)

	// The DRAM reads above granted read leases, which eviction honours:
	// evict until every DRAM replica is gone (the leases expire in 3s).
	dropped := 0
	testkit.Within(t, 20*time.Second, "evict --tier dram --all", func() error {
		out, errOut, code := cli(t, "evict", "--master", m.Addr, "--tier", "dram", "--all")
		var d int
		if _, err := fmt.Sscanf(out, "dropped %d", &d); code != 0 || err != nil {
			t.Fatalf("evict: code %d, out %q, err %q", code, out, errOut)
		}
		dropped += d
		if dropped < n {
			return fmt.Errorf("%d of %d DRAM replicas dropped", dropped, n)
		}
		return nil
	})
	st, err := reader.Stats(ctx)
	if err != nil || st.DRAMReplicas != 0 || dropped != n {
		t.Fatalf("after evict (%d dropped): %+v, %v", dropped, st, err)
	}
	for _, k := range keys {
		got, err := reader.Get(ctx, k)
		if err != nil || !bytes.Equal(got, vals[k]) {
			t.Fatalf("SSD read of %s: %v", k, err)
		}
	}
	if rs := reader.ReadStats(); rs.RemoteSSD != n {
		t.Fatalf("read stats after SSD reads: %+v", rs)
	}
	// Each node served the SSD reads of the objects it holds.
	for _, p := range []*proc{a, b} {
		if s := nodeStats(t, p.Addr); s.PeerReadsSsd < n/2 || s.SsdObjects != n/2 {
			t.Fatalf("node %s: %d SSD reads served, %d SSD objects", p.Node, s.PeerReadsSsd, s.SsdObjects)
		}
	}
	// The CLI reads an object held by node a from SSD, byte for byte.
	file := t.TempDir() + "/v"
	if _, errOut, code := cli(t, "get", "--master", m.Addr, ka[0], file); code != 0 {
		t.Fatalf("cli get: %d %s", code, errOut)
	}
	if got, _ := os.ReadFile(file); !bytes.Equal(got, vals[ka[0]]) {
		t.Fatal("cli get returned other bytes")
	}
	// A key that never existed is OBJECT_NOT_FOUND, through the library and the CLI.
	if _, err := reader.Get(ctx, "never-put"); !errors.Is(err, errcode.ErrObjectNotFound) {
		t.Fatalf("missing key: %v", err)
	}
	if _, errOut, code := cli(t, "get", "--master", m.Addr, "never-put"); code != 1 || !strings.Contains(errOut, "OBJECT_NOT_FOUND") {
		t.Fatalf("cli get of a missing key: %d %q", code, errOut)
	}
}

// kill -9 of a node in the middle of offloading, restart on the same
// --ssd_dir: everything the master reported on SSD before the kill is
// readable afterwards, and nothing is ever read with wrong bytes.
//
// The kill must land mid-offload: some objects on SSD, some not. With one
// object per bucket (--bucket_keys_limit=1) every object costs its own
// bucket write, fsync and index commit. The 60 objects are put with one
// BatchPut, the test polls the master back to back until the first one is
// announced on SSD and kills the node at once: the other 59 bucket writes
// and fsyncs cannot all have finished within one poll. The test does not
// assume it: it asks the master again after the kill (the dead node can
// announce nothing more) and fails if every object was on SSD, so a kill
// after the offload finished cannot pass.
func TestNodeKill9MidOffload(t *testing.T) {
	m := startMaster(t, 0)
	dir := t.TempDir()
	a := startNode(t, m.Addr, dir, "--bucket_keys_limit=1", "--heartbeat_interval=20ms")
	c := newClient(t, m.Addr, a.Node)
	const n, size = 60, 128 << 10
	ctx := context.Background()

	// All objects in one BatchPut: their offload tasks are queued together
	// at its BatchPutEnd.
	keys := make([]string, n)
	vals := map[string][]byte{}
	values := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k-%03d", i)
		values[i] = randomValue(size)
		vals[keys[i]] = values[i]
	}
	for i, err := range c.BatchPut(ctx, keys, values) {
		if err != nil {
			t.Fatalf("batch put %s: %v", keys[i], err)
		}
	}
	onSSDKeys := func() []string {
		res, err := c.Master().BatchGetReplicaList(ctx, keys)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for i, r := range res {
			if r.Err != nil {
				continue
			}
			for _, rep := range r.Info.Replicas {
				if rep.Kind == masterapi.SSD {
					out = append(out, keys[i])
					break
				}
			}
		}
		return out
	}
	// Poll the master back to back (each poll is one RPC) until the first
	// object is announced on SSD, then kill -9 at once.
	var onDisk []string
	for deadline := time.Now().Add(30 * time.Second); len(onDisk) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no object reached SSD in 30s")
		}
		onDisk = onSSDKeys()
	}
	a.Kill(syscall.SIGKILL)
	atKill := onSSDKeys() // the dead node announces nothing more
	t.Logf("killed the node with %d of %d objects reported on SSD (%d at the last poll before the kill)", len(atKill), n, len(onDisk))
	if len(atKill) >= n {
		t.Fatalf("all %d objects were on SSD at the kill: the kill did not land mid-offload", n)
	}

	a2 := startNode(t, m.Addr, dir, "--bucket_keys_limit=1")
	_ = a2
	// Every object on SSD at the kill (a superset of what the master
	// reported just before it) is readable after the restart.
	for _, k := range atKill {
		testkit.Within(t, 20*time.Second, "read after restart of "+k, func() error {
			got, err := c.Get(ctx, k)
			if err != nil {
				return err
			}
			if !bytes.Equal(got, vals[k]) {
				t.Fatalf("%s read with wrong bytes after the restart", k)
			}
			return nil
		})
	}
	// No key is ever served with wrong bytes (the others may be lost: their
	// only replica was the dead node's DRAM).
	readable := 0
	for _, k := range keys {
		got, err := c.Get(ctx, k)
		if err == nil && !bytes.Equal(got, vals[k]) {
			t.Fatalf("%s read with wrong bytes", k)
		}
		if err == nil {
			readable++
		}
	}
	t.Logf("after the restart %d of %d objects are readable", readable, n)
}

// kill -9 of the master, restart on the same port: the node remounts and
// re-registers its SSD objects, which are readable again.
func TestMasterKill9Restart(t *testing.T) {
	port := testkit.FreePort(t)
	state := "--state_dir=" + t.TempDir() // the removal log survives the kill
	m := startMaster(t, port, state)
	a := startNode(t, m.Addr, t.TempDir())
	c := newClient(t, m.Addr, a.Node)
	const n, size = 10, 64 << 10
	vals, keys := putAll(t, c, "m", n, size)
	waitSSDReplicas(t, c, n)

	m.Kill(syscall.SIGKILL)
	m2 := startMaster(t, port, state)
	c2 := newClient(t, m2.Addr, "")
	ctx := context.Background()
	for _, k := range keys {
		testkit.Within(t, 20*time.Second, "read after master restart of "+k, func() error {
			got, err := c2.Get(ctx, k)
			if err != nil {
				return err
			}
			if !bytes.Equal(got, vals[k]) {
				t.Fatalf("%s read with wrong bytes", k)
			}
			return nil
		})
	}
	// The node re-registers its DRAM objects too (docs/ha.md), so reads
	// come from DRAM or SSD, never fail.
	if rs := c2.ReadStats(); rs.RemoteSSD+rs.RemoteDRAM != n {
		t.Fatalf("reads after the master restart: %+v", rs)
	}
	if s := nodeStats(t, a.Addr); s.SsdObjects != n {
		t.Fatalf("node holds %d SSD objects, want %d", s.SsdObjects, n)
	}
}

// A node that stops pinging (SIGSTOP): after client_ttl its objects answer
// REPLICA_IS_GONE inside their read lease and OBJECT_NOT_FOUND after it;
// objects held by a live node stay readable.
func TestNodeStopsPinging(t *testing.T) {
	const lease = 5 * time.Second
	m := startMaster(t, 0, "--client_ttl=1", fmt.Sprintf("--default_kv_lease_ttl=%d", lease.Milliseconds()))
	a := startNode(t, m.Addr, "")
	b := startNode(t, m.Addr, "")
	ca := newClient(t, m.Addr, a.Node)
	cb := newClient(t, m.Addr, b.Node)
	ctx := context.Background()
	va := randomValue(4096)
	vb := randomValue(4096)
	if err := ca.Put(ctx, "on-a", va); err != nil {
		t.Fatal(err)
	}
	if err := cb.Put(ctx, "on-b", vb); err != nil {
		t.Fatal(err)
	}
	// A lookup grants a read lease of default_kv_lease_ttl: it ends at or
	// after beforeLease+lease on the master's clock, and no later than
	// leased+lease.
	beforeLease := time.Now()
	if ok, err := ca.Exists(ctx, "on-a"); err != nil || !ok {
		t.Fatalf("exists: %v %v", ok, err)
	}
	leased := time.Now()
	a.Kill(syscall.SIGSTOP)
	t.Cleanup(func() { a.Kill(syscall.SIGCONT) })

	var gone time.Time
	// Reads are bounded: a stopped process accepts connections but never
	// answers, so a read through its socket waits for the deadline.
	getA := func() error {
		ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err := cb.Get(ctx, "on-a")
		return err
	}
	testkit.Within(t, 10*time.Second, "REPLICA_IS_GONE after client_ttl", func() error {
		err := getA()
		if errors.Is(err, errcode.ErrReplicaGone) {
			gone = time.Now()
			return nil
		}
		return fmt.Errorf("got %v", err)
	})
	if gone.After(leased.Add(lease)) {
		t.Fatalf("REPLICA_IS_GONE first seen %v after the lease was granted, outside the %v lease", gone.Sub(leased), lease)
	}
	testkit.Within(t, 15*time.Second, "OBJECT_NOT_FOUND after the lease", func() error {
		err := getA()
		if errors.Is(err, errcode.ErrObjectNotFound) {
			if time.Now().Before(beforeLease.Add(lease)) {
				t.Fatalf("OBJECT_NOT_FOUND inside the lease")
			}
			return nil
		}
		if !errors.Is(err, errcode.ErrReplicaGone) {
			t.Fatalf("between expiry and the end of the lease: %v", err)
		}
		return fmt.Errorf("got %v", err)
	})
	got, err := ca.Get(ctx, "on-b")
	if err != nil || !bytes.Equal(got, vb) {
		t.Fatalf("object on the live node: %v", err)
	}
}

// The demo command exits 0 and prints PASS.
func TestDemoPrintsPASS(t *testing.T) {
	out, errOut, code := cli(t, "demo", "--dir", t.TempDir(), "--objects", "11", "--size", "256KiB", "--backend", "pwrite")
	if code != 0 || !strings.Contains(out, "PASS") {
		t.Fatalf("demo: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "reads: local/remote SSD") || !strings.Contains(out, "11 / 0") {
		t.Fatalf("demo table lacks the SSD reads:\n%s", out)
	}
}

// SIGTERM drains and stops a node cleanly (exit 0) and unmounts its
// segment; the SSD objects survive for the next start on the same directory.
func TestNodeSIGTERM(t *testing.T) {
	m := startMaster(t, 0)
	dir := t.TempDir()
	a := startNode(t, m.Addr, dir)
	c := newClient(t, m.Addr, a.Node)
	vals, keys := putAll(t, c, "t", 5, 32<<10)
	waitSSDReplicas(t, c, 5)
	a.Kill(syscall.SIGTERM)
	if err := a.wait(30 * time.Second); err != nil {
		t.Fatalf("node exit after SIGTERM: %v\n%s", err, a.Output())
	}
	ctx := context.Background()
	st, err := c.Stats(ctx)
	if err != nil || st.Segments != 0 {
		t.Fatalf("segment still mounted after SIGTERM: %+v %v", st, err)
	}
	startNode(t, m.Addr, dir)
	for _, k := range keys {
		testkit.Within(t, 20*time.Second, "read after clean restart of "+k, func() error {
			got, err := c.Get(ctx, k)
			if err != nil {
				return err
			}
			if !bytes.Equal(got, vals[k]) {
				t.Fatalf("%s read with wrong bytes", k)
			}
			return nil
		})
	}
}

// tierstore serve: master and node in one process; the CLI stores and reads
// through it; SIGTERM stops it with exit 0.
func TestServe(t *testing.T) {
	s := start(t, "tierstore", "serve", "--dir", t.TempDir(), "--port", "0", "--memory", "32MiB", "--backend", "pwrite")
	in := t.TempDir() + "/in"
	val := randomValue(300 << 10)
	if err := os.WriteFile(in, val, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, e, code := cli(t, "put", "--master", s.Addr, "served", in); code != 0 {
		t.Fatalf("put: %d %s", code, e)
	}
	out := t.TempDir() + "/out"
	if _, e, code := cli(t, "get", "--master", s.Addr, "served", out); code != 0 {
		t.Fatalf("get: %d %s", code, e)
	}
	if got, _ := os.ReadFile(out); !bytes.Equal(got, val) {
		t.Fatal("get returned other bytes")
	}
	s.Kill(syscall.SIGTERM)
	if err := s.wait(30 * time.Second); err != nil {
		t.Fatalf("serve exit after SIGTERM: %v", err)
	}
}

// A key force-removed after it reached a node's SSD leaves that SSD at the
// node's next reconcile (the master answers it as unwanted), and a remote
// reader gets client.ErrObjectNotFound; the other keys stay.
func TestRemovedKeyLeavesNodeSSD(t *testing.T) {
	m := startMaster(t, 0)
	a := startNode(t, m.Addr, t.TempDir(), "--reconcile_interval=300ms")
	c := newClient(t, m.Addr, a.Node)
	vals, keys := putAll(t, c, "rm", 3, 32<<10)
	waitSSDReplicas(t, c, 3)
	ctx := context.Background()
	if err := c.Remove(ctx, keys[0], true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, keys[0]); !errors.Is(err, client.ErrObjectNotFound) || client.CodeOf(err).String() != "OBJECT_NOT_FOUND" {
		t.Fatalf("get of a removed key over gRPC: %v", err)
	}
	testkit.Within(t, 20*time.Second, "removed key deleted from the node's SSD", func() error {
		if st := nodeStats(t, a.Addr); st.GetSsdObjects() != 2 {
			return fmt.Errorf("%d objects on SSD", st.GetSsdObjects())
		}
		return nil
	})
	for _, k := range keys[1:] {
		if got, err := c.Get(ctx, k); err != nil || !bytes.Equal(got, vals[k]) {
			t.Fatalf("get %s: %v", k, err)
		}
	}
}
