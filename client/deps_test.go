package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// depsBudget is the most non-standard packages (tierstore's own included)
// each light program may link: package client, and the example program
// under examples/putget that uses only the public packages. A client for
// host:port links the master contract (masterapi), its gRPC transport
// (mastergrpc), the data plane and gRPC with protobuf, nothing else. Raise
// a budget only on purpose, and say in the commit what the new packages
// are and why the client needs them.
var depsBudget = map[string]int{
	"github.com/tierstore/tierstore/client":          125, // +internal/filestamp (the one "file changed on disk" check tlsconf and grant share, stdlib only), +internal/tlsconf (mutual TLS, stdlib crypto only), +internal/keyspec and +internal/crc32c (one home each), +internal/grant (read grants: the sentinels of a refusal, stdlib crypto only), +golang.org/x/sys/cpu (crc32c's test for AVX-512 VPCLMULQDQ), +internal/aesgcm (the data plane records' AES-GCM with VAES, stdlib and x/sys/cpu only)
	"github.com/tierstore/tierstore/examples/putget": 126,
}

// forbidden are packages the light client must never link (docs/design.md,
// package map): the SSD tier and its storage, the node and the master's
// implementation, Prometheus, and the etcd client with its logger (etcd://
// master addresses are opt-in: importing package ha registers them).
var forbidden = []string{
	"github.com/cockroachdb/pebble",
	"github.com/tierstore/tierstore/internal/uring",
	"github.com/tierstore/tierstore/tier",
	"github.com/tierstore/tierstore/backend",
	"github.com/tierstore/tierstore/index",
	"github.com/tierstore/tierstore/node",
	"github.com/tierstore/tierstore/master",
	"github.com/tierstore/tierstore/ha",
	"github.com/prometheus/",
	"go.etcd.io/",
	"go.uber.org/zap",
}

// TestClientDependenciesStayLight counts the non-standard packages each
// light program links (failing above its budget) and refuses the
// forbidden ones.
func TestClientDependenciesStayLight(t *testing.T) {
	for pkg, budget := range depsBudget {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		deps := strings.Fields(string(out))
		t.Logf("%s links %d non-standard packages (budget %d)", pkg, len(deps), budget)
		if len(deps) > budget {
			t.Errorf("%s links %d non-standard packages, above its budget of %d:\n%s", pkg, len(deps), budget, strings.Join(deps, "\n"))
		}
		for _, dep := range deps {
			for _, f := range forbidden {
				if dep == f || strings.HasPrefix(dep, f+"/") || (strings.HasSuffix(f, "/") && strings.HasPrefix(dep, f)) {
					t.Errorf("%s depends on %s", pkg, dep)
				}
			}
		}
	}
}
