package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// Package client stays light (docs/design.md, package map): a program that
// only puts and gets must not link pebble, io_uring, the SSD tier, the
// bucket backends, the store node, the master's implementation or
// Prometheus. The example program under examples/putget is checked too.
func TestClientDependenciesStayLight(t *testing.T) {
	forbidden := []string{
		"github.com/cockroachdb/pebble",
		"github.com/tierstore/tierstore/internal/uring",
		"github.com/tierstore/tierstore/tier",
		"github.com/tierstore/tierstore/backend",
		"github.com/tierstore/tierstore/index",
		"github.com/tierstore/tierstore/node",
		"github.com/tierstore/tierstore/master",
		"github.com/prometheus/",
	}
	for _, pkg := range []string{"github.com/tierstore/tierstore/client", "github.com/tierstore/tierstore/examples/putget"} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, f := range forbidden {
				if dep == f || strings.HasPrefix(dep, f+"/") || (strings.HasSuffix(f, "/") && strings.HasPrefix(dep, f)) {
					t.Errorf("%s depends on %s", pkg, dep)
				}
			}
		}
	}
}
