package cluster

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// orphanRole, set in the environment, makes TestDieWithParent's process
// play the parent: it starts a long sleep with DieWithParent, prints the
// sleep's pid and waits on stdin until it is killed.
const orphanRole = "TIERSTORE_CLUSTER_ORPHAN_PARENT"

// TestDieWithParent kills a parent with SIGKILL, as a test timeout or an
// operator does, and checks that the child it started is gone too.
func TestDieWithParent(t *testing.T) {
	if os.Getenv(orphanRole) == "1" {
		child := exec.Command("sleep", "120")
		DieWithParent(child)
		if err := child.Start(); err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
		fmt.Println("child", child.Process.Pid)
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	if _, err := exec.LookPath("sleep"); err != nil {
		t.Skip("no sleep binary")
	}
	parent := exec.Command(os.Args[0], "-test.run=^TestDieWithParent$")
	parent.Env = append(os.Environ(), orphanRole+"=1")
	stdin, err := parent.StdinPipe()
	require.NoError(t, err)
	defer stdin.Close()
	out, err := parent.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, parent.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "the parent printed nothing")
	pidText, ok := strings.CutPrefix(strings.TrimSpace(line), "child ")
	require.True(t, ok, "parent said %q", line)
	pid, err := strconv.Atoi(pidText)
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })

	require.True(t, alive(pid), "the child is not running before its parent dies")
	require.NoError(t, parent.Process.Kill())
	_ = parent.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polling an external process's state, bounded
	}
	require.False(t, alive(pid), "child %d outlived its parent", pid)
}

// alive reports whether pid runs and is not a zombie (a killed orphan may
// stay a zombie where PID 1 does not reap).
func alive(pid int) bool {
	st, ok := procState("/proc/" + strconv.Itoa(pid) + "/stat")
	return ok && st != 'Z'
}

// TestKillSIGSTOPWaitsUntilStopped: Kill(SIGSTOP) returns only once every
// thread of the process is stopped, so a request sent next reaches a
// paused process.
func TestKillSIGSTOPWaitsUntilStopped(t *testing.T) {
	if _, err := exec.LookPath("sleep"); err != nil {
		t.Skip("no sleep binary")
	}
	cmd := exec.Command("sleep", "120")
	DieWithParent(cmd)
	require.NoError(t, cmd.Start())
	p := &Proc{Name: "sleep", cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.Kill(syscall.SIGKILL) })
	p.Kill(syscall.SIGSTOP)
	require.True(t, stopped(cmd.Process.Pid), "Kill(SIGSTOP) returned before the process stopped")
	p.Kill(syscall.SIGCONT)
}
