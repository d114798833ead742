package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/cluster"
)

// bins holds the binaries built by TestMain; binDir is their directory.
var (
	bins   *cluster.Binaries
	binDir string
)

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	b, err := cluster.Build(context.Background(), raceEnabled)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer b.Close()
	bins, binDir = b, b.Dir
	return m.Run()
}

// proc is a running binary started by a test.
type proc struct {
	*cluster.Proc
	t *testing.T
}

// start runs binary with args and waits (bounded) for its "listening on"
// line on stdout. The process is killed at the end of the test, and its
// output is logged when the test failed.
func start(t *testing.T, binary string, args ...string) *proc {
	t.Helper()
	cp, err := bins.Start(binary, 30*time.Second, args...)
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{Proc: cp, t: t}
	t.Cleanup(func() {
		p.Kill(syscall.SIGKILL)
		if strings.Contains(p.Output(), "WARNING: DATA RACE") {
			t.Errorf("%s reported a data race", binary)
		}
		if t.Failed() {
			t.Logf("---- %s %v output:\n%s", binary, args, p.Output())
		}
	})
	return p
}

// wait waits (bounded) for the process to exit and returns its status.
func (p *proc) wait(d time.Duration) error {
	err := p.Wait(d)
	if errors.Is(err, cluster.ErrStillRunning) {
		p.t.Fatalf("%s did not exit within %v\n%s", p.Name, d, p.Output())
	}
	return err
}

func startMaster(t *testing.T, port int, extra ...string) *proc {
	return start(t, "tierstore-master", cluster.MasterArgs(port, extra...)...)
}

func startNode(t *testing.T, master, ssdDir string, extra ...string) *proc {
	return start(t, "tierstore-node", cluster.NodeArgs(master, ssdDir, extra...)...)
}

// cli runs the tierstore command and returns its stdout, stderr and exit code.
func cli(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "tierstore"), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if strings.Contains(errb.String(), "WARNING: DATA RACE") {
		t.Errorf("tierstore %v reported a data race:\n%s", args, errb.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("tierstore %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

func newClient(t *testing.T, master string, preferred string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{MasterAddr: master, PreferredNode: preferred, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func randomValue(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}
