//go:build linux

package netlab

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/cluster"
)

// newLab returns a lab with hosts a, b and c, closed at the end of the
// test; it skips with one line when the machine cannot run one.
func newLab(t *testing.T) (*Lab, *Host, *Host, *Host) {
	t.Helper()
	if err := Available(); err != nil {
		t.Skip(err)
	}
	l, err := New(nil)
	if errors.Is(err, ErrUnavailable) {
		t.Skip(err)
	} else if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
		for _, ns := range namespaces() {
			if strings.HasPrefix(ns, l.Name) {
				t.Errorf("namespace %s left after Close", ns)
			}
		}
	})
	var hs []*Host
	for _, n := range []string{"a", "b", "c"} {
		h, err := l.AddHost(n)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	return l, hs[0], hs[1], hs[2]
}

// udpSink listens on h and counts the datagrams it receives, in order of
// arrival (each carries its sequence number).
type udpSink struct {
	c    *net.UDPConn
	addr string
}

func newSink(t *testing.T, h *Host) *udpSink {
	t.Helper()
	var c *net.UDPConn
	if err := h.Do(func() (err error) {
		c, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(h.IP)})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &udpSink{c: c, addr: c.LocalAddr().String()}
}

// collectUntil reads datagrams until stop is closed and then none has
// come for quiet (the ones still on their way); a nil stop: until none
// has come for quiet.
func (s *udpSink) collectUntil(stop <-chan struct{}, quiet time.Duration) []uint32 {
	var seqs []uint32
	buf := make([]byte, 64)
	stopped := stop == nil
	for {
		_ = s.c.SetReadDeadline(time.Now().Add(quiet))
		n, err := s.c.Read(buf)
		if ne, ok := err.(net.Error); err != nil && !(ok && ne.Timeout()) {
			return seqs // the sink is closed
		}
		if err != nil {
			if stopped {
				return seqs
			}
			select {
			case <-stop:
				stopped = true // one more quiet period for the datagrams in flight
			default:
			}
			continue
		}
		if n >= 4 {
			seqs = append(seqs, binary.BigEndian.Uint32(buf))
		}
	}
}

// collect reads datagrams until none has come for quiet.
func (s *udpSink) collect(quiet time.Duration) []uint32 { return s.collectUntil(nil, quiet) }

// send sends n numbered datagrams from h to addr, gap apart.
func send(t *testing.T, h *Host, addr string, n int, gap time.Duration) {
	t.Helper()
	sendUntil(t, h, addr, gap, time.Hour, func(sent int) bool { return sent == n })
}

// sendUntil sends numbered datagrams from h to addr, one every gap, until
// done(datagrams sent so far) reports true (checked before each) or limit
// has passed; it returns how many it sent.
func sendUntil(t *testing.T, h *Host, addr string, gap, limit time.Duration, done func(sent int) bool) int {
	t.Helper()
	var c net.Conn
	if err := h.Do(func() (err error) { c, err = net.Dial("udp4", addr); return err }); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var b [4]byte
	deadline := time.Now().Add(limit)
	n := 0
	for ; !done(n); n++ {
		if time.Now().After(deadline) {
			t.Fatalf("sendUntil: not done after %v (%d datagrams sent)", limit, n)
		}
		binary.BigEndian.PutUint32(b[:], uint32(n))
		_, _ = c.Write(b[:]) // a dropped datagram is what some tests look for
		if gap > 0 {
			time.Sleep(gap) // pacing of the sender, not a synchronisation
		}
	}
	return n
}

// reaches reports whether 20 datagrams sent from -> to arrive (any of
// them).
func reaches(t *testing.T, from, to *Host) bool {
	t.Helper()
	s := newSink(t, to)
	send(t, from, s.addr, 20, 0)
	return len(s.collect(200*time.Millisecond)) > 0
}

func TestPartitionsByName(t *testing.T) {
	l, a, b, c := newLab(t)
	if !reaches(t, a, b) || !reaches(t, b, a) || !reaches(t, a, c) {
		t.Fatal("hosts of a fresh lab do not reach each other")
	}
	steps := []struct {
		f    Fault
		want map[[2]*Host]bool // from, to -> reachable
	}{
		{Partition(b), map[[2]*Host]bool{{a, b}: false, {b, a}: false, {c, b}: false, {a, c}: true}},
		{OneWay(a, b), map[[2]*Host]bool{{a, b}: false, {b, a}: true, {a, c}: true}},
		{Cut([]*Host{a}, []*Host{b}), map[[2]*Host]bool{{a, b}: false, {b, a}: false, {a, c}: true, {c, b}: true}},
		{Split([]*Host{a, c}), map[[2]*Host]bool{{a, c}: true, {a, b}: false, {b, c}: false, {c, a}: true}},
	}
	for _, st := range steps {
		if err := l.Inject(st.f); err != nil {
			t.Fatal(err)
		}
		if err := l.Inject(st.f); err == nil {
			t.Errorf("%s injected twice without an error", st.f)
		}
		for p, want := range st.want {
			if got := reaches(t, p[0], p[1]); got != want {
				t.Errorf("%s: %s -> %s reachable %v, want %v", st.f, p[0].Name, p[1].Name, got, want)
			}
		}
		if err := l.Heal(st.f); err != nil {
			t.Fatal(err)
		}
		if !reaches(t, a, b) || !reaches(t, b, a) {
			t.Errorf("%s healed, a and b still do not reach each other", st.f)
		}
	}
}

func TestHealAll(t *testing.T) {
	l, a, b, c := newLab(t)
	for _, f := range []Fault{Partition(b), OneWay(a, c), Flap(Cut([]*Host{c}, []*Host{b}), time.Millisecond, time.Hour)} {
		if err := l.Inject(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.HealAll(); err != nil {
		t.Fatal(err)
	}
	if n := len(l.Active()); n != 0 {
		t.Fatalf("%d faults active after HealAll: %v", n, l.Active())
	}
	for _, p := range [][2]*Host{{a, b}, {a, c}, {c, b}, {b, c}} {
		if !reaches(t, p[0], p[1]) {
			t.Errorf("after HealAll %s does not reach %s", p[0].Name, p[1].Name)
		}
	}
}

func TestLoss(t *testing.T) {
	l, a, b, _ := newLab(t)
	if err := l.Inject(Loss([]*Host{a}, []*Host{b}, 0.5)); err != nil {
		t.Fatal(err)
	}
	s := newSink(t, b)
	send(t, a, s.addr, 400, 0)
	// Binomial(400, 0.5): 200 +- 10; [120, 280] is 8 standard deviations.
	if got := len(s.collect(300 * time.Millisecond)); got < 120 || got > 280 {
		t.Errorf("50%% loss let %d of 400 datagrams through", got)
	}
}

// echo serves a TCP echo on h and returns its address.
func echo(t *testing.T, h *Host) string {
	t.Helper()
	var ln net.Listener
	if err := h.Do(func() (err error) { ln, err = net.Listen("tcp4", h.IP+":0"); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// rtt is the time of one 1-byte round trip over a new TCP connection from
// h to addr (after the handshake).
func rtt(t *testing.T, h *Host, addr string) time.Duration {
	t.Helper()
	var c net.Conn
	if err := h.Do(func() (err error) { c, err = net.DialTimeout("tcp4", addr, 5*time.Second); return err }); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	if _, err := c.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}

func TestRelayDelay(t *testing.T) {
	l, a, b, c := newLab(t)
	if !l.Caps.Relay {
		t.Skip(l.Caps.Notes)
	}
	addr := echo(t, b)
	f := Delay([]*Host{a}, []*Host{b}, Shape{Delay: 60 * time.Millisecond})
	if err := l.Inject(f); err != nil {
		t.Fatal(err)
	}
	if d := rtt(t, a, addr); d < 120*time.Millisecond {
		t.Errorf("round trip through a 60 ms relay link took %v, want >= 120ms", d)
	}
	if d := rtt(t, c, addr); d >= 120*time.Millisecond {
		t.Logf("c -> b (not shaped) took %v", d) // not an error on a loaded machine, but worth seeing
	}
	if l.RelayStats().Relayed == 0 {
		t.Error("the relay forwarded nothing")
	}
	if err := l.Heal(f); err != nil {
		t.Fatal(err)
	}
	before := l.RelayStats().Relayed
	_ = rtt(t, a, addr)
	if after := l.RelayStats().Relayed; after != before {
		t.Errorf("healed link still goes through the relay (%d packets)", after-before)
	}
}

func TestRelayDuplicatesAndReorders(t *testing.T) {
	l, a, b, _ := newLab(t)
	if !l.Caps.Relay {
		t.Skip(l.Caps.Notes)
	}
	f := Delay([]*Host{a}, []*Host{b}, Shape{Delay: 20 * time.Millisecond, Jitter: 15 * time.Millisecond, Dup: 1})
	if err := l.Inject(f); err != nil {
		t.Fatal(err)
	}
	s := newSink(t, b)
	send(t, a, s.addr, 100, time.Millisecond)
	got := s.collect(300 * time.Millisecond)
	if len(got) != 200 {
		t.Errorf("Dup 100%%: %d datagrams arrived for 100 sent, want 200", len(got))
	}
	inversions := 0
	for i := 1; i < len(got); i++ {
		if got[i] < got[i-1] {
			inversions++
		}
	}
	if inversions == 0 {
		t.Error("15 ms jitter on 1 ms spaced datagrams reordered none")
	}
	if err := l.Heal(f); err != nil {
		t.Fatal(err)
	}
	// Reorder alone: a fraction overtakes the delayed rest.
	f = Delay([]*Host{a}, []*Host{b}, Shape{Delay: 30 * time.Millisecond, Reorder: 0.3})
	if err := l.Inject(f); err != nil {
		t.Fatal(err)
	}
	send(t, a, s.addr, 100, time.Millisecond)
	got = s.collect(300 * time.Millisecond)
	inversions = 0
	for i := 1; i < len(got); i++ {
		if got[i] < got[i-1] {
			inversions++
		}
	}
	if len(got) != 100 || inversions == 0 {
		t.Errorf("Reorder 30%%: %d arrived (want 100), %d inversions (want > 0)", len(got), inversions)
	}
}

// TestFlap: a flapping link passes some datagrams and drops others, with
// gaps in what arrives. The sender runs until the flap has cut the link
// three times (not for a fixed time: under load the iptables calls that
// cut and heal the link wait for the xtables lock and stretch the phases),
// so a whole down phase lies between up phases it sent in.
func TestFlap(t *testing.T) {
	l, a, b, _ := newLab(t)
	f := Flap(Partition(b), 150*time.Millisecond, 150*time.Millisecond)
	s := newSink(t, b)
	stop := make(chan struct{})
	arrived := make(chan []uint32, 1)
	go func() { arrived <- s.collectUntil(stop, 200*time.Millisecond) }()
	if err := l.Inject(f); err != nil {
		t.Fatal(err)
	}
	sent := sendUntil(t, a, s.addr, 5*time.Millisecond, 30*time.Second, func(int) bool { return Downs(f) >= 3 })
	close(stop)
	got := <-arrived
	if err := l.Heal(f); err != nil {
		t.Fatal(err)
	}
	if Downs(f) < 3 || len(got) == 0 || len(got) == sent {
		t.Fatalf("flap: %d downs, %d of %d datagrams arrived; want >= 3 downs and some but not all", Downs(f), len(got), sent)
	}
	gaps := 0
	for i := 1; i < len(got); i++ {
		if got[i] > got[i-1]+1 {
			gaps++
		}
	}
	if gaps == 0 {
		t.Errorf("no gap in what arrived through a flapping link: %v", got)
	}
	if !reaches(t, a, b) {
		t.Error("healed flap still cuts the link")
	}
}

func TestBandwidth(t *testing.T) {
	l, a, b, _ := newLab(t)
	if !l.Caps.TBF {
		t.Skip(l.Caps.Notes)
	}
	addr := echo(t, b)
	if err := l.Inject(Bandwidth(a, "8mbit")); err != nil {
		t.Fatal(err)
	}
	var c net.Conn
	if err := a.Do(func() (err error) { c, err = net.Dial("tcp4", addr); return err }); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	go func() { _, _ = c.Write(make([]byte, 1<<20)) }()
	if _, err := io.ReadFull(c, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	// 1 MiB at 8 Mbit/s takes at least 1 s (minus the 64 KiB burst).
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Errorf("1 MiB through an 8 Mbit/s cap in %v", d)
	}
}

// TestKilledLabIsRemoved: a process that creates a lab and dies by
// SIGKILL leaves nothing behind (its reaper removes the lab), and
// CleanStale removes a lab whose process is gone.
func TestKilledLabIsRemoved(t *testing.T) {
	if os.Getenv("NETLAB_CHILD") == "1" {
		l, err := New(nil)
		if err != nil {
			fmt.Println("ERR", err)
			os.Exit(1)
		}
		if _, err := l.AddHost("x"); err != nil {
			fmt.Println("ERR", err)
			os.Exit(1)
		}
		fmt.Println("LAB", l.Name)
		select {} // until killed
	}
	if err := Available(); err != nil {
		t.Skip(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledLabIsRemoved$")
	cmd.Env = append(os.Environ(), "NETLAB_CHILD=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var line string
	if _, err := fmt.Fscanln(out, &line, new(string)); err != nil || line != "LAB" {
		_ = cmd.Process.Kill()
		t.Fatalf("child: %q %v", line, err)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	name := fmt.Sprintf("%s%d-", prefix, cmd.Process.Pid)
	if err := pollGone(name, 10*time.Second); err != nil {
		t.Error(err)
	}

	// A lab left by a process that is gone and whose reaper did not run.
	stale := fmt.Sprintf("%s%d-1", prefix, cmd.Process.Pid)
	for _, ns := range []string{stale, stale + "-h"} {
		if err := run("ip", "netns", "add", ns); err != nil {
			t.Fatal(err)
		}
	}
	CleanStale()
	for _, ns := range namespaces() {
		if strings.HasPrefix(ns, stale) {
			t.Errorf("CleanStale left %s", ns)
		}
	}
}

// pollGone waits (bounded) until no namespace starts with prefix.
func pollGone(prefix string, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for {
		var left []string
		for _, ns := range namespaces() {
			if strings.HasPrefix(ns, prefix) {
				left = append(left, ns)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("namespaces left by a killed lab: " + strings.Join(left, " "))
		}
		time.Sleep(50 * time.Millisecond) // poll the namespace list, bounded
	}
}

// TestStartAndPause: a process started in a host runs in the host's
// network namespace; Pause stops it (every thread in state T) and healing
// resumes it; Close kills it.
func TestStartAndPause(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("sleep not found")
	}
	l, err := New(&cluster.Binaries{Dir: filepath.Dir(sleep)})
	if errors.Is(err, ErrUnavailable) {
		t.Skip(err)
	} else if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	h, err := l.AddHost("a")
	if err != nil {
		t.Fatal(err)
	}
	p, err := h.Start("sleep", 0, "600")
	if err != nil {
		t.Fatal(err)
	}
	var want, got syscall.Stat_t
	if err := syscall.Stat("/run/netns/"+h.NS, &want); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for { // ip netns exec enters the namespace, then execs sleep in place
		if err := syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", p.Pid()), &got); err == nil && got.Ino == want.Ino {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d is not in namespace %s", p.Pid(), h.NS)
		}
		time.Sleep(10 * time.Millisecond) // poll /proc, bounded
	}
	f := Pause("sleep", p)
	if err := l.Inject(f); err != nil {
		t.Fatal(err)
	}
	if st := state(t, p.Pid()); st != 'T' {
		t.Errorf("paused process in state %c, want T", st)
	}
	if err := l.Heal(f); err != nil {
		t.Fatal(err)
	}
	if st := state(t, p.Pid()); st == 'T' {
		t.Error("healed pause: the process is still stopped")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(5 * time.Second); err == nil || errors.Is(err, cluster.ErrStillRunning) {
		t.Errorf("after Close the process: %v, want killed", err)
	}
}

// state is the state letter of pid in /proc.
func state(t *testing.T, pid int) byte {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	i := strings.LastIndexByte(string(b), ')')
	return b[i+2]
}

// TestNothingLeavesTheLab: a lab adds no link or address to the namespace
// the test runs in; a host has its lab address, loopback and one route,
// to the lab's subnet, and no IPv6 address (so it sends no neighbour or
// router solicitation); a packet for any address outside the lab is
// refused in the host (network unreachable) before anything is sent.
func TestNothingLeavesTheLab(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	links := func() string {
		out, err := exec.Command("ip", "-o", "link", "show").Output()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 1 {
				names = append(names, f[1])
			}
		}
		return strings.Join(names, " ")
	}
	addrs := func() string {
		out, err := exec.Command("ip", "-o", "addr", "show").Output()
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	linksBefore, addrsBefore := links(), addrs()
	l, a, b, _ := newLab(t)
	if got := links(); got != linksBefore {
		t.Errorf("links of the test's namespace changed:\nbefore %s\nafter  %s", linksBefore, got)
	}
	if got := addrs(); got != addrsBefore {
		t.Errorf("addresses of the test's namespace changed:\nbefore %s\nafter  %s", addrsBefore, got)
	}
	for _, ns := range []string{l.Name, a.NS} {
		out, err := exec.Command("ip", "-n", ns, "-6", "-o", "addr", "show").Output()
		if err != nil {
			t.Fatal(err)
		}
		if s := strings.TrimSpace(string(out)); s != "" {
			t.Errorf("namespace %s has IPv6 addresses:\n%s", ns, s)
		}
	}
	out, err := exec.Command("ip", "-n", a.NS, "-4", "route", "show", "table", "all").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		dst := strings.Fields(line)[0]
		if dst == "local" || dst == "broadcast" { // the local table: the host's own addresses
			dst = strings.Fields(line)[1]
		}
		if dst != Subnet && !strings.HasPrefix(dst, "127.") && dst != a.IP && dst != "10.231.0.255" {
			t.Errorf("host %s has a route outside the lab: %s", a.Name, line)
		}
	}
	// The machine's own addresses and its default gateway's side of the
	// world, from inside a host: refused before a packet is sent.
	for _, dst := range []string{"192.0.2.1:9", "10.255.255.53:53", "8.8.8.8:53", "10.231.1.2:9"} {
		err := a.Do(func() error {
			c, err := net.Dial("udp4", dst)
			if err == nil {
				c.Close()
			}
			return err
		})
		if !errors.Is(err, syscall.ENETUNREACH) {
			t.Errorf("from host %s, dial %s: %v, want network unreachable", a.Name, dst, err)
		}
	}
	if !reaches(t, a, b) {
		t.Error("hosts of the lab do not reach each other")
	}
}

// TestSweeper: Close removes the paths added; a process killed with
// SIGKILL has them removed by its sweeper shell; bad paths are refused.
func TestSweeper(t *testing.T) {
	if os.Getenv("NETLAB_SWEEP_CHILD") != "" {
		s, err := NewSweeper()
		if err == nil {
			err = s.Add(os.Getenv("NETLAB_SWEEP_CHILD"))
		}
		if err != nil {
			fmt.Println("ERR", err)
			os.Exit(1)
		}
		fmt.Println("ADDED")
		select {} // until killed
	}
	s, err := NewSweeper()
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "rel/dir", "/", "/tmp/a\n/etc"} {
		if err := s.Add(bad); err == nil {
			t.Errorf("Add(%q): no error", bad)
		}
	}
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	keep := filepath.Join(t.TempDir(), "keep")
	if err := os.WriteFile(keep, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(dir); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Close %s: %v, want gone", dir, err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("a path not added was removed: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}

	// A process killed by SIGKILL.
	dir = filepath.Join(t.TempDir(), "killed")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSweeper$")
	cmd.Env = append(os.Environ(), "NETLAB_SWEEP_CHILD="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var line string
	if _, err := fmt.Fscanln(out, &line); err != nil || line != "ADDED" {
		_ = cmd.Process.Kill()
		t.Fatalf("child: %q %v", line, err)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still there 10 s after its process was killed", dir)
		}
		time.Sleep(20 * time.Millisecond) // poll the directory, bounded
	}
}

// TestAvailableNamesWhatIsMissing: without a tool, Available answers
// ErrUnavailable in one line naming the tools missing and the packages.
func TestAvailableNamesWhatIsMissing(t *testing.T) {
	if os.Geteuid() != 0 {
		err := Available()
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "not root") {
			t.Fatalf("not root: Available() = %v, want ErrUnavailable saying not root", err)
		}
		return
	}
	dir := t.TempDir()
	for _, tool := range []string{"ip", "tc"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Skip(err)
		}
		if err := os.Symlink(p, filepath.Join(dir, tool)); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir)
	err := Available()
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("without iptables: Available() = %v, want ErrUnavailable", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "iptables, iptables-restore not installed") || !strings.Contains(msg, "apt-get install") || strings.Contains(msg, "\n") {
		t.Errorf("without iptables: %q, want one line naming iptables and iptables-restore and the packages", msg)
	}
	if _, err := New(nil); !errors.Is(err, ErrUnavailable) {
		t.Errorf("New without iptables: %v, want ErrUnavailable", err)
	}
}
