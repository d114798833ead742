package cluster

import (
	"os/exec"
	"syscall"
)

// DieWithParent makes cmd's process receive SIGKILL when the process that
// starts it dies, so that a test or bench run killed by its timeout (or by
// kill -9) leaves no tierstore-master or tierstore-node running behind it.
// Call it before cmd.Start.
//
// Linux delivers the signal when the OS thread that forked the child
// exits, not only the process; the Go runtime ends a thread only when a
// goroutine exits while locked to it, and every goroutine of this module
// that locks its thread (backend/uring's pool and reactor) unlocks it
// before it returns.
func DieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
