//go:build linux

package netlab

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tierstore/tierstore/internal/cluster"
)

// ErrUnavailable: the machine cannot run a lab (not root, a tool missing).
// The message names what is missing.
var ErrUnavailable = errors.New("netlab: unavailable")

// Subnet is the lab's address range; host i (from 0) is 10.231.0.(i+2).
const Subnet = "10.231.0.0/24"

const prefix = "ts-lab-"

// labSeq numbers the labs of this process.
var labSeq atomic.Int64

// Caps says which optional parts of a lab work on this machine.
type Caps struct {
	TBF   bool   // tc qdisc tbf (bandwidth caps)
	Relay bool   // tun devices: delay, jitter, duplication, reordering
	Netem bool   // tc netem (absent from this project's CI kernel; unused)
	Notes string // what is missing and why, one line per part
}

// Lab is one test network. Create it with New, end it with Close.
type Lab struct {
	// Name is the switch namespace and the prefix of every host namespace.
	Name string
	Caps Caps

	bins     *cluster.Binaries
	reaper   *exec.Cmd
	reaperIn io.WriteCloser
	relay    *Relay

	// mu guards hosts, procs, faults, tables and closed.
	mu     sync.Mutex
	hosts  []*Host
	procs  []*cluster.Proc
	faults map[string]Fault
	tables map[*Host]string // the filter table last loaded into each host
	closed bool
}

// Host is one namespace of a lab.
type Host struct {
	Name string // as given to AddHost: "m1", "n2", "c1"
	NS   string // namespace name
	IP   string // address on the lab's bridge
	lab  *Lab
}

// Available reports whether this machine can run a lab: ErrUnavailable
// naming what is missing, or nil.
func Available() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: not root (network namespaces need CAP_NET_ADMIN)", ErrUnavailable)
	}
	var missing []string
	for _, tool := range []string{"ip", "iptables", "iptables-restore", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s not installed (apt-get install -y iproute2 iptables)", ErrUnavailable, strings.Join(missing, ", "))
	}
	return nil
}

// New creates an empty lab (the switch namespace and its bridge) after
// removing the labs of dead processes. Processes are started from bins.
func New(bins *cluster.Binaries) (*Lab, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	CleanStale()
	pid := os.Getpid()
	l := &Lab{Name: fmt.Sprintf("%s%d-%d", prefix, pid, labSeq.Add(1)), bins: bins,
		faults: map[string]Fault{}, tables: map[*Host]string{}}
	if err := l.startReaper(); err != nil {
		return nil, err
	}
	if err := run("ip", "netns", "add", l.Name); err != nil {
		l.stopReaper()
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	br := fmt.Sprintf("%s%d", prefix, pid)
	if err := noIPv6(l.Name); err != nil {
		l.Close()
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if err := l.runAll([][]string{
		{"ip", "-n", l.Name, "link", "add", br, "type", "bridge"},
		{"ip", "-n", l.Name, "link", "set", br, "up"},
	}); err != nil {
		l.Close()
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	l.Caps = l.probe()
	l.relay = newRelay()
	return l, nil
}

// probe tries the optional parts in the switch namespace.
func (l *Lab) probe() Caps {
	var c Caps
	var notes []string
	if err := run("ip", "-n", l.Name, "link", "add", "probe0", "type", "veth", "peer", "name", "probe1"); err == nil {
		c.TBF = run("tc", "-n", l.Name, "qdisc", "add", "dev", "probe0", "root", "tbf", "rate", "10mbit", "burst", "32kbit", "latency", "50ms") == nil
		c.Netem = run("tc", "-n", l.Name, "qdisc", "replace", "dev", "probe0", "root", "netem", "delay", "1ms") == nil
		_ = run("ip", "-n", l.Name, "link", "del", "probe0")
	}
	if !c.TBF {
		notes = append(notes, "tc tbf unavailable: no bandwidth caps")
	}
	if !c.Netem {
		notes = append(notes, "tc netem unavailable (delay goes through the relay)")
	}
	if f, err := openTun(l.Name, "tlprobe"); err != nil {
		notes = append(notes, "tun unavailable, no relay (delay, jitter, duplication, reordering): "+err.Error())
	} else {
		f.Close()
		c.Relay = true
	}
	c.Notes = strings.Join(notes, "; ")
	return c
}

// AddHost creates host name (a namespace with eth0 on the bridge, lo up,
// and an empty filter table).
func (l *Lab) AddHost(name string) (*Host, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, errors.New("netlab: lab closed")
	}
	for _, h := range l.hosts {
		if h.Name == name {
			return nil, fmt.Errorf("netlab: host %q exists", name)
		}
	}
	i := len(l.hosts)
	if i >= 250 {
		return nil, errors.New("netlab: at most 250 hosts")
	}
	h := &Host{Name: name, NS: l.Name + "-" + name, IP: fmt.Sprintf("10.231.0.%d", i+2), lab: l}
	veth := fmt.Sprintf("v%d", i)
	br := fmt.Sprintf("%s%d", prefix, os.Getpid())
	if err := run("ip", "netns", "add", h.NS); err != nil {
		return nil, err
	}
	l.hosts = append(l.hosts, h)
	if err := noIPv6(h.NS); err != nil {
		return nil, err
	}
	err := l.runAll([][]string{
		{"ip", "-n", l.Name, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", h.NS},
		{"ip", "-n", l.Name, "link", "set", veth, "master", br},
		{"ip", "-n", l.Name, "link", "set", veth, "up"},
		{"ip", "-n", h.NS, "addr", "add", h.IP + "/24", "dev", "eth0"},
		{"ip", "-n", h.NS, "link", "set", "eth0", "up"},
		{"ip", "-n", h.NS, "link", "set", "lo", "up"},
	})
	if err != nil {
		return nil, err
	}
	return h, nil
}

// noIPv6 switches IPv6 off in namespace ns before any link is added to
// it: a link then gets no link-local address, so a host sends no neighbour
// or router solicitation, nor anything else, but the IPv4 traffic of the
// lab (whose relay forwards IPv4 only).
func noIPv6(ns string) error {
	return inNS(ns, func() error {
		for _, c := range []string{"default", "all"} {
			p := "/proc/sys/net/ipv6/conf/" + c + "/disable_ipv6"
			if err := os.WriteFile(p, []byte("1"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("netlab: %s: %w", ns, err) // a kernel without IPv6 has no such file: nothing to switch off
			}
		}
		return nil
	})
}

// Hosts returns the lab's hosts in the order they were added.
func (l *Lab) Hosts() []*Host {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*Host(nil), l.hosts...)
}

// Host returns the host named name, or nil.
func (l *Lab) Host(name string) *Host {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, h := range l.hosts {
		if h.Name == name {
			return h
		}
	}
	return nil
}

// command is name with args, to be run in h.
func (h *Host) command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.NS, name}, args...)...)
}

// Exec runs a command in h and returns its combined output.
func (h *Host) Exec(name string, args ...string) ([]byte, error) {
	out, err := h.command(name, args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("netlab: %s: %s %s: %w: %s", h.Name, name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return out, nil
}

// Start runs a binary of the lab's Binaries in h (cluster.Binaries.Start:
// wait up to wait for its "listening on" line; 0 does not wait). Close
// kills it.
func (h *Host) Start(binary string, wait time.Duration, args ...string) (*cluster.Proc, error) {
	p, err := h.lab.bins.StartWrapped([]string{"ip", "netns", "exec", h.NS}, binary, wait, args...)
	if err != nil {
		return nil, fmt.Errorf("netlab: %s: %w", h.Name, err)
	}
	h.lab.mu.Lock()
	h.lab.procs = append(h.lab.procs, p)
	h.lab.mu.Unlock()
	return p, nil
}

// Close heals every fault, kills every process the lab started and
// removes its namespaces. Safe to call more than once.
func (l *Lab) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	procs := l.procs
	flaps := l.activeFlapsLocked()
	l.mu.Unlock()
	for _, f := range flaps {
		f.stop()
	}
	for _, p := range procs {
		p.Kill(syscall.SIGCONT) // a paused process dies on SIGKILL too, but let it read it
		p.Kill(syscall.SIGKILL)
	}
	if l.relay != nil {
		l.relay.Close()
	}
	err := removeLab(l.Name)
	l.stopReaper()
	return err
}

// removeLab kills the processes left in the namespaces of lab name (by
// pid, as ip netns pids lists them) and deletes the namespaces.
func removeLab(name string) error {
	var errs []error
	for _, ns := range namespaces() {
		if ns != name && !strings.HasPrefix(ns, name+"-") {
			continue
		}
		if out, err := exec.Command("ip", "netns", "pids", ns).Output(); err == nil {
			for _, f := range strings.Fields(string(out)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		if err := run("ip", "netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// labRE matches a lab's namespaces: group 0 is the lab's name, 1 its pid.
var labRE = regexp.MustCompile(`^` + prefix + `(\d+)-\d+`)

// CleanStale removes the labs (namespaces ts-lab-PID-*) of processes that
// are no longer running: what a killed test left behind.
func CleanStale() {
	for _, ns := range namespaces() {
		m := labRE.FindStringSubmatch(ns)
		if m == nil {
			continue
		}
		pid, _ := strconv.Atoi(m[1])
		if pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue // a live process's lab (another test running now)
		}
		_ = removeLab(m[0])
	}
}

// namespaces lists the named network namespaces.
func namespaces() []string {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return nil
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	return names
}

// startReaper starts the shell that removes the lab when this process dies
// without Close: it ignores signals and waits for EOF on its stdin, whose
// write end only this process holds.
func (l *Lab) startReaper() error {
	script := `trap '' INT TERM HUP; read _ ; for ns in $(ip netns list | awk '{print $1}'); do case "$ns" in "$1"|"$1"-*) for p in $(ip netns pids "$ns"); do kill -9 "$p"; done; ip netns del "$ns";; esac; done`
	cmd, in, err := startReaper(script, "reaper", l.Name)
	if err != nil {
		return err
	}
	l.reaper, l.reaperIn = cmd, in
	return nil
}

// stopReaper ends the reaper after a clean Close (it then finds nothing
// to remove).
func (l *Lab) stopReaper() {
	if l.reaper == nil {
		return
	}
	l.reaperIn.Close()
	_ = l.reaper.Wait()
	l.reaper = nil
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("netlab: %s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func (l *Lab) runAll(cmds [][]string) error {
	for _, c := range cmds {
		if err := run(c[0], c[1:]...); err != nil {
			return err
		}
	}
	return nil
}
