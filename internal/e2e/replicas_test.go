package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/testkit"
	"github.com/tierstore/tierstore/masterapi"
)

// Replicas on several nodes (issue 21 item 4), through real processes:
// three nodes, objects put with 2 replicas (through the CLI and the
// library), kill -9 of the node holding the first replica of each (and
// its SSD copy): every object reads back byte-identical, before the master
// notices (the reader falls back) and after; a put asking for more
// replicas than live nodes fails with a clear error; remove leaves
// nothing on the master or any node, the killed one included when it
// comes back on its SSD directory.
func TestReplicasSurviveKill9OfAHolder(t *testing.T) {
	m := startMaster(t, 0)
	nodes := map[string]*proc{}
	var a *proc
	aDir := t.TempDir()
	for i := 0; i < 3; i++ {
		dir := aDir
		if i > 0 {
			dir = t.TempDir()
		}
		p := startNode(t, m.Addr, dir, "--reconcile_interval=300ms")
		nodes[p.Node] = p
		if i == 0 {
			a = p
		}
	}
	ctx := context.Background()
	c := newClient(t, m.Addr, a.Node) // first replicas on a
	const n, size = 8, 256 << 10
	vals := map[string][]byte{}
	var keys []string
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("rep-%02d", i)
		keys, vals[k] = append(keys, k), randomValue(size)
		if err := c.PutWith(ctx, k, vals[k], client.PutOptions{Replicas: 2}); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
	}
	// The operator's way: 1 MiB from a file with --replicas 2.
	big := randomValue(1 << 20)
	file := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(file, big, 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := cli(t, "put", "--master", m.Addr, "--replicas", "2", "rep-big", file)
	if code != 0 || !strings.Contains(errOut, "2 replicas") {
		t.Fatalf("tierstore put --replicas 2: %d %q", code, errOut)
	}
	keys, vals["rep-big"] = append(keys, "rep-big"), big

	st, err := c.Stats(ctx)
	if err != nil || st.Objects != n+1 || st.DRAMReplicas != 2*(n+1) {
		t.Fatalf("after the puts: %+v %v", st, err)
	}
	if _, errOut, code := cli(t, "put", "--master", m.Addr, "--replicas", "4", "rep-four", file); code != 1 || !strings.Contains(errOut, "4 replicas asked, 3 live nodes") {
		t.Fatalf("4 replicas on 3 nodes: %d %q", code, errOut)
	}
	// Offload runs from one replica: every object reaches one SSD, once.
	waitSSDReplicas(t, c, n+1)
	if st, _ := c.Stats(ctx); st.SSDReplicas != n+1 {
		t.Fatalf("%d SSD replicas of %d objects", st.SSDReplicas, n+1)
	}

	// kill -9 of a: each object's first DRAM replica, and the SSD copies
	// a wrote, go with it.
	holders := firstHolders(t, c, keys)
	a.Kill(syscall.SIGKILL)
	delete(nodes, a.Node)
	reader := newClient(t, m.Addr, "")
	readAll := func(when string) {
		t.Helper()
		for _, k := range keys {
			got, err := reader.Get(ctx, k)
			if err != nil || !bytes.Equal(got, vals[k]) {
				t.Fatalf("%s: get %s: %v (equal %v)", when, k, err, bytes.Equal(got, vals[k]))
			}
		}
	}
	readAll("just after the kill")
	t.Logf("holders of the first replicas: %v; reads just after the kill: %+v", holders, reader.ReadStats())
	if rs := reader.ReadStats(); rs.RemoteDRAM != int64(len(keys)) {
		t.Fatalf("reads after the kill %+v: want every one from another node's DRAM", rs)
	}
	testkit.Within(t, 20*time.Second, "the master expires the killed node", func() error {
		if st, err := reader.Stats(ctx); err != nil || st.Nodes != 2 {
			return fmt.Errorf("%d live nodes (%v)", st.Nodes, err)
		}
		return nil
	})
	readAll("after the expiry")
	if got, _, code := cli(t, "get", "--master", m.Addr, "rep-big"); code != 0 || got != string(big) {
		t.Fatalf("cli get of rep-big after the kill: code %d, equal %v", code, got == string(big))
	}

	// Remove: nothing is left on the master or the nodes, the killed one
	// included once it comes back on its SSD directory (which holds the
	// SSD copies of the removed objects: they must not come back).
	for _, k := range keys[:n] {
		if err := reader.Remove(ctx, k, true); err != nil {
			t.Fatalf("remove %s: %v", k, err)
		}
	}
	if _, errOut, code := cli(t, "rm", "--master", m.Addr, "--force", "rep-big"); code != 0 {
		t.Fatalf("cli rm: %d %q", code, errOut)
	}
	for _, k := range keys {
		if out, _, code := cli(t, "exists", "--master", m.Addr, k); code != 1 || strings.TrimSpace(out) != "false" {
			t.Fatalf("exists %s after remove: %d %q", k, code, out)
		}
	}
	a2 := startNode(t, m.Addr, aDir, "--reconcile_interval=300ms")
	nodes[a2.Node] = a2
	testkit.Within(t, 20*time.Second, "nothing left", func() error {
		st, err := reader.Stats(ctx)
		if err != nil {
			return err
		}
		if st.Nodes != 3 || st.Objects != 0 || st.DRAMReplicas != 0 || st.SSDReplicas != 0 || st.SegmentUsed != 0 {
			return fmt.Errorf("master still has %+v", st)
		}
		for id, p := range nodes {
			if s := nodeStats(t, p.Addr); s.GetSsdObjects() != 0 {
				return fmt.Errorf("node %s holds %d SSD objects", id, s.GetSsdObjects())
			}
		}
		return nil
	})
	for _, k := range keys {
		if out, _, code := cli(t, "exists", "--master", m.Addr, k); code != 1 || strings.TrimSpace(out) != "false" {
			t.Fatalf("exists %s after the killed node came back: %d %q", k, code, out)
		}
	}
}

// firstHolders counts the objects whose first DRAM replica each node
// holds (all on the client's preferred node, the test expects).
func firstHolders(t *testing.T, c *client.Client, keys []string) map[string]int {
	t.Helper()
	res, err := c.Master().BatchGetReplicaList(masterapi.WithOffloadPath(context.Background()), keys)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for i, r := range res {
		if r.Err != nil || len(r.Info.Replicas) < 2 || r.Info.Replicas[0].Kind != masterapi.DRAM || r.Info.Replicas[1].Kind != masterapi.DRAM {
			t.Fatalf("%s: replicas %+v %v", keys[i], r.Info.Replicas, r.Err)
		}
		out[r.Info.Replicas[0].Node]++
	}
	return out
}
