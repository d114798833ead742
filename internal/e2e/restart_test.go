package e2e

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/testkit"
)

// A single master restarted on its state directory (kill -9) never
// reports an acknowledged object missing: a lookup made before the node
// has re-registered its objects is answered "ask again" inside the
// rebuild window, which the client sends again, so it finds the object
// once the node is back instead of answering OBJECT_NOT_FOUND. A key
// never put is not found once the window has closed. The node pings
// every second, so the lookups right after the restart come before it
// re-registers (without the window the first of them answered false).
func TestMasterRestartReportsNoMiss(t *testing.T) {
	port, state := testkit.FreePort(t), t.TempDir()
	margs := []string{"--state_dir=" + state, "--rebuild_window=5s"}
	m := startMaster(t, port, margs...)
	startNode(t, m.Addr, t.TempDir(), "--heartbeat_interval=1s", "--ping_interval=1s")
	vals, keys := putAll(t, newClient(t, m.Addr, ""), "r", 16, 64<<10)
	ctx := context.Background()
	for round := range 2 {
		m.Kill(syscall.SIGKILL)
		m = startMaster(t, port, margs...)
		c := newClient(t, m.Addr, "")
		ok, err := c.BatchExists(ctx, keys)
		for i, k := range keys {
			if err[i] != nil || !ok[i] {
				t.Fatalf("restart %d: exists %s right after the restart: %v %v, want true", round, k, ok[i], err[i])
			}
		}
		for _, k := range keys {
			got, err := c.Get(ctx, k)
			if err != nil || !bytes.Equal(got, vals[k]) {
				t.Fatalf("restart %d: get %s: %v (%d bytes)", round, k, err, len(got))
			}
		}
	}
	// What an operator sees right after a restart: exists answers true.
	m.Kill(syscall.SIGKILL)
	m = startMaster(t, port, margs...)
	if out, e, code := cli(t, "exists", "--master", m.Addr, keys[0]); code != 0 || strings.TrimSpace(out) != "true" {
		t.Fatalf("tierstore exists right after a restart: exit %d, %q %s", code, out, e)
	}
	c := newClient(t, m.Addr, "")
	if _, err := c.Get(ctx, "never-put"); !errors.Is(err, client.ErrObjectNotFound) {
		t.Fatalf("get of a key never put after the window: %v, want OBJECT_NOT_FOUND", err)
	}
}
