package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tierstore/tierstore/client"
)

// binDir holds the binaries built by TestMain.
var binDir string

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "tierstore-e2e-bin-*")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = dir
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	args := []string{"build", "-o", dir + "/"}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "./cmd/tierstore-master", "./cmd/tierstore-node", "./cmd/tierstore")...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: go build: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out))), nil
}

// proc is a running binary started by a test.
type proc struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	addr string // parsed from the "listening on" line
	node string // tierstore-node: the node id
	mu   sync.Mutex
	logs bytes.Buffer // stdout+stderr, for failure reports
	done chan struct{}
	err  error // exit status, valid after done
}

var listenRE = regexp.MustCompile(`listening on (\S+)`)
var nodeRE = regexp.MustCompile(`node=(\S+)`)

type lockedWriter struct{ p *proc }

func (w lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.logs.Write(b)
}

// start runs binary with args and waits (bounded) for its "listening on"
// line on stdout. The process is killed at the end of the test.
func start(t *testing.T, binary string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: binary, done: make(chan struct{})}
	p.cmd = exec.Command(filepath.Join(binDir, binary), args...)
	p.cmd.Stderr = lockedWriter{p}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", binary, err)
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			lockedWriter{p}.Write([]byte(line + "\n"))
			if !sent && listenRE.MatchString(line) {
				lines <- line
				sent = true
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill(syscall.SIGKILL)
		if strings.Contains(p.output(), "WARNING: DATA RACE") {
			t.Errorf("%s reported a data race", binary)
		}
		if t.Failed() {
			t.Logf("---- %s %v output:\n%s", binary, args, p.output())
		}
	})
	select {
	case line := <-lines:
		p.addr = listenRE.FindStringSubmatch(line)[1]
		if m := nodeRE.FindStringSubmatch(line); m != nil {
			p.node = m[1]
		}
	case <-p.done:
		t.Fatalf("%s exited before listening: %v\n%s", binary, p.err, p.output())
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not report its address within 30s\n%s", binary, p.output())
	}
	return p
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// kill sends sig to the process (only this one, by pid) and, for SIGKILL,
// waits for it to exit.
func (p *proc) kill(sig syscall.Signal) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	if sig == syscall.SIGKILL {
		<-p.done
	}
}

// wait waits (bounded) for the process to exit and returns its status.
func (p *proc) wait(d time.Duration) error {
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		p.t.Fatalf("%s did not exit within %v\n%s", p.name, d, p.output())
		return nil
	}
}

// freePort returns a currently free TCP port on 127.0.0.1 (for a master that
// must come back on the same address after a kill -9).
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// masterArgs are the flags of a test master: offload on, short TTLs.
func masterArgs(port int, extra ...string) []string {
	args := []string{
		"--rpc_address=127.0.0.1", fmt.Sprintf("--rpc_port=%d", port), "--metrics_port=0",
		"--enable_offload=true", "--client_ttl=2", "--default_kv_lease_ttl=3000",
	}
	return append(args, extra...)
}

func startMaster(t *testing.T, port int, extra ...string) *proc {
	return start(t, "tierstore-master", masterArgs(port, extra...)...)
}

func startNode(t *testing.T, master, ssdDir string, extra ...string) *proc {
	args := []string{"--master=" + master, "--listen=127.0.0.1:0", "--memory=64MiB",
		"--heartbeat_interval=100ms", "--ping_interval=200ms", "--backend=pwrite"}
	if ssdDir != "" {
		args = append(args, "--enable_offload", "--ssd_dir="+ssdDir)
	}
	return start(t, "tierstore-node", append(args, extra...)...)
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

// eventually polls cond every 50ms until it returns nil or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	var last error
	for {
		if last = cond(); last == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, d, last)
		}
		time.Sleep(50 * time.Millisecond) // poll interval of a bounded wait
	}
}
