package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tierstore/tierstore/master"
	"github.com/tierstore/tierstore/masterapi"
	"github.com/tierstore/tierstore/node"
)

func runCLI(stdin string, args ...string) (string, string, int) {
	var out, errb bytes.Buffer
	code := run(args, strings.NewReader(stdin), &out, &errb)
	return out.String(), errb.String(), code
}

func TestUsageErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{nil, "usage"},
		{[]string{"frobnicate"}, `unknown command "frobnicate" (run "tierstore --help"`},
		{[]string{"put", "--master", "x:1"}, "want KEY [FILE]"},
		{[]string{"get", "--master", "x:1", "a", "b", "c"}, "want KEY [FILE]"},
		{[]string{"exists", "--master", "x:1"}, "want KEY"},
		{[]string{"stats", "--master", "x:1", "extra"}, "no arguments"},
		{[]string{"evict", "--master", "x:1", "--all"}, "--tier"},
		{[]string{"evict", "--master", "x:1", "--tier", "ssd", "--all"}, "--tier"},
		{[]string{"evict", "--master", "x:1", "--tier", "dram"}, "keys or --all"},
		{[]string{"evict", "--master", "x:1", "--tier", "dram", "--all", "k"}, "keys or --all"},
		{[]string{"demo", "--size", "lots"}, "--size"},
		{[]string{"demo", "--objects", "0"}, "--objects"},
		{[]string{"serve"}, "--dir"},
		{[]string{"serve", "--dir", "d", "stray"}, `"stray"`},
		{[]string{"serve", "--port", "70000", "--dir", "d"}, "--port"},
		{[]string{"serve", "--memory", "4XB", "--dir", "d"}, "--memory"},
		{[]string{"demo", "--size", "0"}, "--size"},
		{[]string{"demo", "--size", "65MiB"}, "--size"},
		{[]string{"demo", "--timeout", "0"}, "--timeout"},
		{[]string{"demo", "--timeout", "-1s"}, "--timeout"},
		{[]string{"demo", "--timeout", "soon"}, "--timeout"},
		{[]string{"demo", "--backend", "foo"}, "--backend"},
		{[]string{"demo", "--objects", "x"}, "--objects"},
		{[]string{"demo", "stray"}, `"stray"`},
		{[]string{"demo", "--no_such"}, "--no_such"},
		{[]string{"put", "--master", "x:1", ""}, "KEY"},
		{[]string{"rm", "--master", "x:1"}, "want KEY"},
		{[]string{"rm", "--master", "x:1", "a", "b"}, "want KEY"},
		{[]string{"rm", "--master", "x:1", "--all", "k"}, "not both"},
		{[]string{"rm", "--master", "x:1", "--regex", "^a", "k"}, "not both"},
		{[]string{"rm", "--master", "x:1", "--all", "--regex", "^a"}, "not both"},
		{[]string{"rm", "--master", "x:1", "--regex", "a("}, `--regex "a(": error parsing regexp`},
		{[]string{"evict", "--master", "x:1", "--tier", "dram", "--regex", "a"}, "--regex"},
		{[]string{"exists", "--master", "x:1", "a", "b"}, "want KEY"},
		{[]string{"get", "--master", "", "k"}, "--master"},
		{[]string{"get", "--timeout", "0", "k"}, "--timeout"},
		{[]string{"evict", "--master", "x:1", "--tier", "dram", ""}, "KEY"},
		// Each command has only its own flags.
		{[]string{"stats", "--all"}, "--all"},
		{[]string{"stats", "--force"}, "--force"},
		{[]string{"get", "--tier", "dram", "k"}, "--tier"},
		{[]string{"rm", "--node", "x:2", "k"}, "--node"},
		{[]string{"put", "--force", "k"}, "--force"},
		// A FILE that cannot be read is a usage error of the command line
		// (issue 10), named as such, before anything connects.
		{[]string{"put", "--master", "x:1", "k", "/nonexistent/tierstore-put-input"}, "FILE: open /nonexistent/tierstore-put-input"},
		// A long key is shortened in messages (issue 10).
		{[]string{"stats", "--master", "x:1", strings.Repeat("k", 4096)}, "...(4096 bytes)"},
	}
	for _, c := range cases {
		out, errOut, code := runCLI("", c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) || out != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 mentioning %q", c.args, code, out, errOut, c.want)
		}
		if len(c.args) > 0 && strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: want one line, stderr %q", c.args, errOut)
		}
		if len(c.args) > 0 && len(errOut) > 200 {
			t.Errorf("%v: message of %d bytes, want it short: %q", c.args, len(errOut), errOut)
		}
	}
}

// TestHelp: "tierstore CMD -h" prints the command's usage with only its own
// flags and their defaults to stdout and exits 0.
func TestHelp(t *testing.T) {
	all := []string{"-master", "-timeout", "-force", "-regex", "-tier", "-all", "-node", "-dir", "-objects", "-size", "-backend", "-port", "-memory", "-ssd_capacity", "-v"}
	own := map[string][]string{
		"put":    {"-master", "-timeout"},
		"get":    {"-master", "-timeout"},
		"exists": {"-master", "-timeout"},
		"rm":     {"-master", "-timeout", "-force", "-all", "-regex"},
		"stats":  {"-master", "-timeout", "-node"},
		"evict":  {"-master", "-timeout", "-tier", "-all"},
		"demo":   {"-dir", "-objects", "-size", "-backend", "-timeout", "-v"},
		"serve":  {"-dir", "-port", "-memory", "-ssd_capacity", "-backend"},
	}
	for cmd, flags := range own {
		for _, h := range []string{"-h", "--help"} {
			out, errOut, code := runCLI("", cmd, h)
			if code != 0 || errOut != "" || !strings.HasPrefix(out, "usage: tierstore "+cmd+" ") {
				t.Errorf("%s %s: exit %d, stderr %q, stdout %q", cmd, h, code, errOut, out)
				continue
			}
			listed := map[string]bool{}
			for _, line := range strings.Split(out, "\n") {
				if f, ok := strings.CutPrefix(line, "  -"); ok {
					listed["-"+strings.Fields(f)[0]] = true
				}
			}
			for _, f := range all {
				if want := slices.Contains(flags, f); listed[f] != want {
					t.Errorf("%s %s: flag %s listed=%v, want %v:\n%s", cmd, h, f, listed[f], want, out)
				}
			}
		}
	}
	if out, _, code := runCLI("", "demo", "-h"); code != 0 || !strings.Contains(out, "(default 11)") || !strings.Contains(out, `(default "1MiB")`) {
		t.Errorf("demo -h lacks the defaults: %q", out)
	}
	if out, _, code := runCLI("", "--help"); code != 0 || !strings.Contains(out, "usage: tierstore") {
		t.Errorf("tierstore --help: %d %q", code, out)
	}
}

// The object commands against a real master (gRPC on 127.0.0.1) and a real
// node (DRAM only).
func TestObjectCommands(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	mc := master.DefaultConfig()
	mc.Logger = quiet
	m, err := master.New(mc)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := master.NewServer(m)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	addr := lis.Addr().String()
	nc := node.DefaultConfig()
	nc.Memory, nc.Logger = 8<<20, quiet
	nm := &cutOff{NodeAPI: m}
	n, err := node.Start(context.Background(), nc, nm)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()

	dir := t.TempDir()
	in := filepath.Join(dir, "in")
	val := bytes.Repeat([]byte("tierstore "), 50000)
	if err := os.WriteFile(in, val, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, e, code := runCLI("", "put", "--master", addr, "k1", in); code != 0 {
		t.Fatalf("put: %d %s", code, e)
	}
	if _, e, code := runCLI("from stdin", "put", "--master", addr, "k2"); code != 0 {
		t.Fatalf("put from stdin: %d %s", code, e)
	}
	if _, e, code := runCLI("", "put", "--master", addr, "k1", in); code != 1 || !strings.Contains(e, "OBJECT_ALREADY_EXISTS") {
		t.Fatalf("second put: %d %s", code, e)
	}
	// A 4 KiB key is quoted by its first 48 bytes and its length, not in
	// full.
	long := strings.Repeat("k", 4096)
	if _, e, code := runCLI("v", "put", "--master", addr, long); code != 0 {
		t.Fatalf("put of a 4 KiB key: %d %s", code, e)
	}
	if _, e, code := runCLI("v", "put", "--master", addr, long); code != 1 || !strings.Contains(e, `"`+long[:48]+`"...(4096 bytes)`) || len(e) > 400 {
		t.Fatalf("second put of a 4 KiB key: %d, %d bytes: %s", code, len(e), e)
	}
	if _, e, code := runCLI("", "rm", "--master", addr, "--force", long); code != 0 {
		t.Fatalf("rm of the 4 KiB key: %d %s", code, e)
	}
	out := filepath.Join(dir, "out")
	if _, e, code := runCLI("", "get", "--master", addr, "k1", out); code != 0 {
		t.Fatalf("get: %d %s", code, e)
	}
	if got, _ := os.ReadFile(out); !bytes.Equal(got, val) {
		t.Fatal("get wrote other bytes")
	}
	if o, _, code := runCLI("", "get", "--master", addr, "k2"); code != 0 || o != "from stdin" {
		t.Fatalf("get to stdout: %d %q", code, o)
	}
	if o, _, code := runCLI("", "exists", "--master", addr, "k1"); code != 0 || strings.TrimSpace(o) != "true" {
		t.Fatalf("exists: %d %q", code, o)
	}
	if o, _, code := runCLI("", "exists", "--master", addr, "nope"); code != 1 || strings.TrimSpace(o) != "false" {
		t.Fatalf("exists of a missing key: %d %q", code, o)
	}
	if o, _, code := runCLI("", "stats", "--master", addr, "--node", n.Endpoint()); code != 0 || !strings.Contains(o, "objects            2") ||
		!strings.Contains(o, "nodes              1") || !strings.Contains(o, "node "+n.Endpoint()) {
		t.Fatalf("stats: %d\n%s", code, o)
	}
	// The per-node table: one row for the node, with both objects in DRAM
	// and none on SSD.
	o, _, _ := runCLI("", "stats", "--master", addr)
	row := nodeRow(t, o, n.Name())
	if row[1] != n.Endpoint() || row[2] != "alive" || row[8] != "2" || row[11] != "0" || row[7] != "MiB" || row[6] != "8.0" {
		t.Fatalf("stats node row %q in:\n%s", row, o)
	}
	// No SSD replica: nothing to drop, and evict says why.
	if o, e, code := runCLI("", "evict", "--master", addr, "--tier", "dram", "--all"); code != 0 ||
		strings.TrimSpace(o) != "dropped 0 DRAM replicas; skipped 2: 2 without an SSD copy yet" {
		t.Fatalf("evict: %d %q %q", code, o, e)
	}
	if o, e, code := runCLI("", "evict", "--master", addr, "--tier", "dram", "k1", "nope"); code != 0 ||
		strings.TrimSpace(o) != "dropped 0 DRAM replicas; skipped 2: 1 without an SSD copy yet, 1 not found" {
		t.Fatalf("evict of named keys: %d %q %q", code, o, e)
	}
	if _, e, code := runCLI("", "rm", "--master", addr, "k1"); code != 1 || !strings.Contains(e, "OBJECT_HAS_LEASE") {
		t.Fatalf("rm inside the lease: %d %s", code, e)
	}
	if _, e, code := runCLI("", "rm", "--master", addr, "--force", "k1"); code != 0 {
		t.Fatalf("rm --force: %d %s", code, e)
	}
	if _, e, code := runCLI("", "get", "--master", addr, "k1"); code != 1 || !strings.Contains(e, "OBJECT_NOT_FOUND") {
		t.Fatalf("get after rm: %d %s", code, e)
	}
	// rm --regex and rm --all print the count removed; a bad pattern the
	// master refuses is INVALID_PARAMS naming it (the CLI's own check is
	// bypassed by sending it to the master directly through the client).
	for _, k := range []string{"rx/1", "rx/2", "ry/1"} {
		if _, e, code := runCLI("v", "put", "--master", addr, k); code != 0 {
			t.Fatalf("put %s: %d %s", k, code, e)
		}
	}
	if o, e, code := runCLI("", "rm", "--master", addr, "--regex", "^rx/"); code != 0 || strings.TrimSpace(o) != "removed 2" {
		t.Fatalf("rm --regex: %d %q %q", code, o, e)
	}
	if o, e, code := runCLI("", "get", "--master", addr, "rx/1"); code != 1 || !strings.Contains(e, "OBJECT_NOT_FOUND") {
		t.Fatalf("get after rm --regex: %d %q %q", code, o, e)
	}
	if _, err := m.RemoveByRegex(context.Background(), "r(", false); err == nil || !strings.Contains(err.Error(), `pattern "r("`) {
		t.Fatalf("bad pattern at the master: %v", err)
	}
	// The node holding k2's only replica dies inside k2's lease (granted by
	// the get above): exists and get tell the same story.
	if _, e, code := runCLI("", "exists", "--master", addr, "k2"); code != 0 {
		t.Fatalf("exists k2: %d %s", code, e)
	}
	// The node cannot come back (remount and re-register k2) before the
	// commands below have looked.
	nm.cut.Store(true)
	m.ExpireNode(n.Name())
	for _, cmd := range []string{"exists", "get"} {
		if o, e, code := runCLI("", cmd, "--master", addr, "k2"); code != 1 || !strings.Contains(e, "REPLICA_IS_GONE") {
			t.Fatalf("%s of an object lost inside its lease: %d %q %q", cmd, code, o, e)
		}
	}
	// k2 is leased: rm --all skips it, rm --all --force does not (ry/1,
	// on the expired node and unleased, went with the sweep).
	if o, e, code := runCLI("", "rm", "--master", addr, "--all"); code != 0 || strings.TrimSpace(o) != "removed 0" {
		t.Fatalf("rm --all: %d %q %q", code, o, e)
	}
	if o, e, code := runCLI("", "rm", "--master", addr, "--all", "--force"); code != 0 || strings.TrimSpace(o) != "removed 1" {
		t.Fatalf("rm --all --force: %d %q %q", code, o, e)
	}
}

// cutOff is a node's master connection whose way back can be cut: once
// cut, MountSegment fails, so a node the master expired stays out (its
// pings are answered NEED_REMOUNT, its remounts fail) instead of
// re-registering its objects whenever its next ping comes.
type cutOff struct {
	masterapi.NodeAPI
	cut atomic.Bool
}

func (c *cutOff) MountSegment(ctx context.Context, req masterapi.MountRequest) error {
	if c.cut.Load() {
		return errors.New("test: the node is cut off from the master")
	}
	return c.NodeAPI.MountSegment(ctx, req)
}

// The demo, in-process: a small run passes and prints the table.
func TestDemoSmall(t *testing.T) {
	out, errOut, code := runCLI("", "demo", "--dir", t.TempDir(), "--objects", "5", "--size", "64KiB", "--backend", "pwrite")
	if code != 0 || !strings.HasSuffix(out, "PASS\n") {
		t.Fatalf("demo: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"objects                      5", "DRAM replicas dropped        5", "reads: local/remote SSD      5 / 0", "SHA-256 verified             5 / 5"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
}

// nodeRow returns the whitespace-separated fields of the per-node table row
// of node in a stats output (a size is two fields: number and unit).
func nodeRow(t *testing.T, out, node string) []string {
	t.Helper()
	header := false
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "NODE" {
			header = true
		}
		if header && len(f) > 0 && f[0] == node {
			if len(f) != 17 {
				t.Fatalf("row of %s has %d fields: %q", node, len(f), line)
			}
			return f
		}
	}
	t.Fatalf("no per-node row for %s in:\n%s", node, out)
	return nil
}

// TestNodeTable: every row of masterapi.Stats.PerNode is printed, columns in
// header order, a retired incarnation marked.
func TestNodeTable(t *testing.T) {
	var b bytes.Buffer
	printNodeTable(&b, []masterapi.NodeStats{
		{Node: "node-a", Endpoint: "127.0.0.1:7001", Alive: true, Segments: 1, SegmentSize: 64 << 20, SegmentUsed: 3 << 20,
			DRAMReplicas: 3, DRAMBytes: 3 << 20, SSDReplicas: 5, SSDBytes: 5 << 20, OffloadQueued: 2, OffloadInFlight: 1},
		{Node: "node-b", Endpoint: "127.0.0.1:7002", SegmentSize: 32 << 20, DRAMReplicas: 1, DRAMBytes: 100},
	})
	out := b.String()
	if !strings.Contains(out, "NODE") || !strings.Contains(out, "SSD OBJECTS") {
		t.Fatalf("no header:\n%s", out)
	}
	a := nodeRow(t, out, "node-a")
	want := []string{"node-a", "127.0.0.1:7001", "alive", "3.0", "MiB", "/", "64.0", "MiB", "3", "3.0", "MiB", "5", "5.0", "MiB", "2", "/", "1"}
	if strings.Join(a, " ") != strings.Join(want, " ") {
		t.Fatalf("row a %q, want %q", a, want)
	}
	r := nodeRow(t, out, "node-b")
	if r[2] != "retired" || r[8] != "1" || r[9] != "100" || r[10] != "B" || r[11] != "0" {
		t.Fatalf("row b %q", r)
	}
	b.Reset()
	printNodeTable(&b, nil)
	if b.Len() != 0 {
		t.Fatalf("empty table printed %q", b.String())
	}
}
