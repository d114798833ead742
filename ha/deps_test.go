package ha

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoServerDependency: package ha is linked into every program that
// follows an elected master (tierstore-node, tierstore), so it must depend
// on the etcd client only, never on the etcd server.
func TestNoServerDependency(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	out, err := exec.Command(gobin, "list", "-deps", "github.com/tierstore/tierstore/ha").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	var client bool
	for _, d := range deps {
		if strings.HasPrefix(d, "go.etcd.io/etcd/server/") || strings.HasPrefix(d, "go.etcd.io/raft/") ||
			strings.HasPrefix(d, "go.etcd.io/bbolt") {
			t.Errorf("package ha depends on %s", d)
		}
		client = client || d == "go.etcd.io/etcd/client/v3"
	}
	if !client {
		t.Fatalf("go list output has no etcd client; listing broken? %d deps", len(deps))
	}
}
