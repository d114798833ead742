//go:build linux

package netlab

import (
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// Sweeper removes files and directories when this process ends, however it
// ends: Close removes them, and so does a shell started by NewSweeper if the
// process dies first (a test timeout, kill -9): it ignores signals, reads
// the paths Add sends it on a pipe whose write end only this process holds,
// and at the pipe's end (EOF: Close, or this process's death) removes them
// all. It is for what a run creates outside any lab (its temporary
// directories of binaries, histories and SSD files), which namespaces do
// not take with them. Safe for concurrent use.
type Sweeper struct {
	mu  sync.Mutex // guards in and cmd
	cmd *exec.Cmd
	in  io.WriteCloser
}

// sweepScript collects one path a line until EOF, then removes them.
const sweepScript = `trap '' INT TERM HUP; while IFS= read -r p; do set -- "$@" "$p"; done; [ $# -eq 0 ] || rm -rf -- "$@"`

// NewSweeper starts the shell that removes the paths given to Add.
func NewSweeper() (*Sweeper, error) {
	cmd, in, err := startReaper(sweepScript, "sweeper")
	if err != nil {
		return nil, err
	}
	return &Sweeper{cmd: cmd, in: in}, nil
}

// Add registers path (absolute, one line) for removal.
func (s *Sweeper) Add(path string) error {
	if !filepath.IsAbs(path) || strings.ContainsAny(path, "\n\r") || filepath.Clean(path) == "/" {
		return fmt.Errorf("netlab: sweeper: %q is not an absolute path of one line below /", path)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.in == nil {
		return errors.New("netlab: sweeper closed")
	}
	if _, err := io.WriteString(s.in, filepath.Clean(path)+"\n"); err != nil {
		return fmt.Errorf("netlab: sweeper: %w", err)
	}
	return nil
}

// Close removes every path added and returns when they are gone. Safe to
// call more than once.
func (s *Sweeper) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.in == nil {
		return nil
	}
	s.in.Close()
	s.in = nil
	if err := s.cmd.Wait(); err != nil {
		return fmt.Errorf("netlab: sweeper: %w", err)
	}
	return nil
}

// startReaper starts sh -c script name args... in a process group of its
// own (a signal to the test's group does not reach it) with a pipe on its
// stdin whose write end only this process holds: the script's reads end
// when this process closes it or dies.
func startReaper(script, name string, args ...string) (*exec.Cmd, io.WriteCloser, error) {
	cmd := exec.Command("sh", append([]string{"-c", script, name}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, fmt.Errorf("netlab: %s: %w", name, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("netlab: %s: %w", name, err)
	}
	return cmd, in, nil
}
