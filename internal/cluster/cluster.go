package cluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
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
	"time"
)

// Binaries is a directory holding tierstore-master, tierstore-node,
// tierstore and tierstore-etcd (an etcd server for tests of highly
// available masters) built from this module.
type Binaries struct {
	Dir string
}

// Build compiles the four binaries into a new temporary directory (with the
// race detector when race is true). Remove the directory with Close.
func Build(ctx context.Context, race bool) (*Binaries, error) {
	dir, err := os.MkdirTemp("", "tierstore-bin-*")
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	b := &Binaries{Dir: dir}
	if err := b.Add(ctx, race, "./cmd/tierstore-master", "./cmd/tierstore-node", "./cmd/tierstore", "./ha/cmd/tierstore-etcd"); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return b, nil
}

// Add compiles more main packages of this module (paths relative to the
// module root, "./internal/..."), into b.Dir.
func (b *Binaries) Add(ctx context.Context, race bool, pkgs ...string) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	args := []string{"build", "-o", b.Dir + "/"}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.CommandContext(ctx, "go", append(args, pkgs...)...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("cluster: go build: %w\n%s", err, out)
	}
	return nil
}

// Close removes the binaries.
func (b *Binaries) Close() error { return os.RemoveAll(b.Dir) }

// ModuleRoot is the directory of this module's go.mod.
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("cluster: go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("cluster: not inside the tierstore module")
	}
	return filepath.Dir(mod), nil
}

// Proc is a running binary.
type Proc struct {
	Name string
	Args []string
	// Addr is the address of the process's "listening on ADDR" line;
	// Node the node id of a tierstore-node ("node=ID").
	Addr, Node string

	cmd *exec.Cmd
	// mu protects logs.
	mu   sync.Mutex
	logs bytes.Buffer // stdout+stderr
	done chan struct{}
	err  error // exit status, valid after done
}

var (
	listenRE = regexp.MustCompile(`listening on (\S+)`)
	nodeRE   = regexp.MustCompile(`node=(\S+)`)
)

type logWriter struct{ p *Proc }

func (w logWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.logs.Write(b)
}

// Start runs binary (a name in b.Dir) with args and waits, up to wait, for
// its "listening on" line on stdout. On failure the process is killed and
// the error carries its output.
func (b *Binaries) Start(binary string, wait time.Duration, args ...string) (*Proc, error) {
	return b.StartWrapped(nil, binary, wait, args...)
}

// StartWrapped is Start with the command line prefixed by wrapper (for
// example "ip netns exec NS", which execs the binary in place, so the
// process started is the binary itself). A wait of 0 returns as soon as the
// process has started, for binaries that print no "listening on" line.
func (b *Binaries) StartWrapped(wrapper []string, binary string, wait time.Duration, args ...string) (*Proc, error) {
	p := &Proc{Name: binary, Args: args, done: make(chan struct{})}
	argv := append(append(append([]string(nil), wrapper...), filepath.Join(b.Dir, binary)), args...)
	p.cmd = exec.Command(argv[0], argv[1:]...)
	DieWithParent(p.cmd)
	p.cmd.Stderr = logWriter{p}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("cluster: start %s: %w", binary, err)
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			logWriter{p}.Write([]byte(line + "\n"))
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
	if wait == 0 {
		return p, nil
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case line := <-lines:
		p.Addr = listenRE.FindStringSubmatch(line)[1]
		if m := nodeRE.FindStringSubmatch(line); m != nil {
			p.Node = m[1]
		}
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("cluster: %s exited before listening: %v\n%s", binary, p.err, p.Output())
	case <-timer.C:
		p.Kill(syscall.SIGKILL)
		return nil, fmt.Errorf("cluster: %s did not report its address within %v\n%s", binary, wait, p.Output())
	}
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Output is everything the process printed so far.
func (p *Proc) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// Kill sends sig to the process (only this one, by pid) and, for SIGKILL,
// waits for it to exit; for SIGSTOP, waits (up to 5 s) until every thread
// of it is stopped, so that what the caller does next reaches a paused
// process (the signal is only queued when kill(2) returns: on a loaded
// machine a thread may still serve a request for a while).
func (p *Proc) Kill(sig syscall.Signal) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	switch sig {
	case syscall.SIGKILL:
		<-p.done
	case syscall.SIGSTOP:
		deadline := time.Now().Add(5 * time.Second)
		for !stopped(p.cmd.Process.Pid) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond) // polling the kernel's view of the threads, bounded
		}
	}
}

// stopped reports whether every thread of pid is stopped (state T or t in
// /proc/PID/task/TID/stat).
func stopped(pid int) bool {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, tk := range tasks {
		if st, ok := procState(filepath.Join(dir, tk.Name(), "stat")); !ok || (st != 'T' && st != 't') {
			return false
		}
	}
	return true
}

// procState returns the state letter (R, S, T, Z, ...) of a process or
// thread from its /proc stat file; false when the file is gone or odd.
func procState(statPath string) (byte, bool) {
	b, err := os.ReadFile(statPath)
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(b, ')') // the state follows the command name
	if i < 0 || i+2 >= len(b) {
		return 0, false
	}
	return b[i+2], true
}

// Wait waits up to d for the process to exit and returns its status;
// ErrStillRunning if it did not exit.
func (p *Proc) Wait(d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-p.done:
		return p.err
	case <-timer.C:
		return fmt.Errorf("%w: %s after %v", ErrStillRunning, p.Name, d)
	}
}

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ErrStillRunning: Wait's bound passed and the process had not exited.
var ErrStillRunning = errors.New("cluster: process still running")

// FreePort returns a currently free TCP port on 127.0.0.1 (for a master that
// must come back on the same address after a kill -9).
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("cluster: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// MasterArgs are the flags of a test master on 127.0.0.1:port: offload on,
// short TTLs (client_ttl 2 s, lease 3 s), no metrics port.
func MasterArgs(port int, extra ...string) []string {
	args := []string{
		"--rpc_address=127.0.0.1", fmt.Sprintf("--rpc_port=%d", port), "--metrics_port=0",
		"--enable_offload=true", "--client_ttl=2", "--default_kv_lease_ttl=3000",
	}
	return append(args, extra...)
}

// NodeArgs are the flags of a test node of master: 64 MiB of DRAM, fast
// heartbeat and ping, pwrite backend, SSD offload in ssdDir (none when "").
func NodeArgs(master, ssdDir string, extra ...string) []string {
	args := []string{"--master=" + master, "--listen=127.0.0.1:0", "--memory=64MiB",
		"--heartbeat_interval=100ms", "--ping_interval=200ms", "--backend=pwrite"}
	if ssdDir != "" {
		args = append(args, "--enable_offload", "--ssd_dir="+ssdDir)
	}
	return append(args, extra...)
}
