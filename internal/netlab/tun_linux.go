package netlab

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// inNS runs fn on an OS thread inside namespace ns. What fn creates there
// (sockets, tun devices) stays in ns when used from any thread afterwards.
// The goroutine locked to the thread enters ns, runs fn and returns to this
// process's namespace; a thread that cannot return is left locked and so
// ends with the goroutine, never running anything else in the wrong
// namespace.
func inNS(ns string, fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		back, err := enter(ns, fn)
		if back {
			runtime.UnlockOSThread()
		}
		ch <- err
	}()
	return <-ch
}

// enter runs fn in ns on the current (locked) thread. back reports whether
// the thread is in its original namespace again.
func enter(ns string, fn func() error) (back bool, err error) {
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return true, err
	}
	defer orig.Close()
	target, err := os.Open("/run/netns/" + ns)
	if err != nil {
		return true, err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return true, fmt.Errorf("setns %s: %w", ns, err)
	}
	defer func() { back = unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil }()
	return false, fn()
}

// openTun creates tun device dev (IP packets, no packet information
// header) in namespace ns and returns its file, non-blocking (reads wait in
// Go's poller; Close wakes them). The device lives as long as the file.
func openTun(ns, dev string) (*os.File, error) {
	var f *os.File
	err := inNS(ns, func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return fmt.Errorf("/dev/net/tun: %w", err)
		}
		ifr, err := unix.NewIfreq(dev)
		if err != nil {
			unix.Close(fd)
			return err
		}
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			return fmt.Errorf("TUNSETIFF %s: %w", dev, err)
		}
		f = os.NewFile(uintptr(fd), "tun "+ns+"/"+dev)
		return nil
	})
	return f, err
}

// Do runs fn on a thread inside h's namespace: a socket fn opens (net.Dial
// to an IP address, net.Listen) belongs to h and may be used from anywhere
// afterwards. For tests of the lab itself; tierstore's processes run in
// hosts with Start.
func (h *Host) Do(fn func() error) error { return inNS(h.NS, fn) }
