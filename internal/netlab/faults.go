//go:build linux

package netlab

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tierstore/tierstore/internal/cluster"
)

// Fault is a fault injected by name (Lab.Inject) and removed by the same
// name (Lab.Heal). Its String is the name, e.g. "partition n1",
// "one-way m1->n1", "loss 10% [c1]<->[n1 n2]".
type Fault interface {
	String() string
	inject(l *Lab) error
	heal(l *Lab) error
}

// drop is a directed link rule: packets from -> to are dropped with
// probability p (1: all). It is an iptables rule in to's INPUT chain.
type drop struct {
	from, to *Host
	p        float64
}

// dropper is a fault made of drops; the lab renders the drops of every
// active dropper into each host's filter table.
type dropper interface {
	Fault
	drops(l *Lab) []drop
}

// Inject starts f. A fault of the same name already active is an error.
func (l *Lab) Inject(f Fault) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return errors.New("netlab: lab closed")
	}
	if _, ok := l.faults[f.String()]; ok {
		l.mu.Unlock()
		return fmt.Errorf("netlab: fault %q is already active", f)
	}
	l.faults[f.String()] = f
	l.mu.Unlock()
	if err := f.inject(l); err != nil {
		l.mu.Lock()
		delete(l.faults, f.String())
		l.mu.Unlock()
		return fmt.Errorf("netlab: inject %s: %w", f, err)
	}
	return nil
}

// Heal removes the fault named as f. Healing a fault that is not active
// does nothing.
func (l *Lab) Heal(f Fault) error {
	l.mu.Lock()
	g, ok := l.faults[f.String()]
	delete(l.faults, f.String())
	l.mu.Unlock()
	if !ok {
		return nil
	}
	if err := g.heal(l); err != nil {
		return fmt.Errorf("netlab: heal %s: %w", g, err)
	}
	return nil
}

// HealAll removes every active fault and returns when the network is
// whole again.
func (l *Lab) HealAll() error {
	l.mu.Lock()
	var all []Fault
	for _, f := range l.faults {
		all = append(all, f)
	}
	l.mu.Unlock()
	var errs []error
	for _, f := range all {
		if _, ok := f.(*flap); ok { // stop flaps first: they inject again
			errs = append(errs, l.Heal(f))
		}
	}
	for _, f := range all {
		errs = append(errs, l.Heal(f))
	}
	return errors.Join(errs...)
}

// Active lists the names of the active faults.
func (l *Lab) Active() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var names []string
	for n := range l.faults {
		names = append(names, n)
	}
	return names
}

func (l *Lab) activeFlapsLocked() []*flap {
	var fs []*flap
	for _, f := range l.faults {
		if fl, ok := f.(*flap); ok {
			fs = append(fs, fl)
		}
	}
	return fs
}

// syncDrops loads into every host whose rules changed the drops of the
// active droppers: one iptables-restore per host, so a host's rules
// change at once.
func (l *Lab) syncDrops() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	rules := map[*Host][]string{}
	for _, f := range l.faults {
		d, ok := f.(dropper)
		if !ok {
			continue
		}
		for _, r := range d.drops(l) {
			rule := fmt.Sprintf("-A INPUT -s %s/32 -j DROP", r.from.IP)
			if r.p < 1 {
				rule = fmt.Sprintf("-A INPUT -s %s/32 -m statistic --mode random --probability %.4f -j DROP", r.from.IP, r.p)
			}
			rules[r.to] = append(rules[r.to], rule)
		}
	}
	var errs []error
	for _, h := range l.hosts {
		table := "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n" + strings.Join(sortedUnique(rules[h]), "\n") + "\nCOMMIT\n"
		if l.tables[h] == table || (l.tables[h] == "" && len(rules[h]) == 0) {
			continue
		}
		if err := h.restore(table); err != nil {
			errs = append(errs, err)
			continue
		}
		l.tables[h] = table
	}
	return errors.Join(errs...)
}

// restore replaces h's filter table.
func (h *Host) restore(table string) error {
	cmd := h.command("iptables-restore")
	cmd.Stdin = strings.NewReader(table)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("netlab: %s: iptables-restore: %w: %s", h.Name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// sortedUnique keeps the first of equal rules, in order (a rule twice
// would not change what is dropped, except for loss, which compounds: the
// same loss twice between one pair is kept twice).
func sortedUnique(rules []string) []string {
	seen := map[string]int{}
	var out []string
	for _, r := range rules {
		if strings.Contains(r, "statistic") || seen[r] == 0 {
			out = append(out, r)
		}
		seen[r]++
	}
	return out
}

// dropFault is every drop-made fault: a cut between two groups (both
// directions or one), or random loss between them.
type dropFault struct {
	name   string
	a, b   []*Host // b nil: every host not in a
	oneWay bool    // only a -> b
	p      float64 // 1: partition; below: loss
}

func (f *dropFault) String() string      { return f.name }
func (f *dropFault) inject(l *Lab) error { return l.syncDrops() }
func (f *dropFault) heal(l *Lab) error   { return l.syncDrops() }
func (f *dropFault) drops(l *Lab) []drop { // called with l.mu held
	b := f.b
	if b == nil {
		b = others(l.hosts, f.a)
	}
	var ds []drop
	for _, x := range f.a {
		for _, y := range b {
			if x == y {
				continue
			}
			ds = append(ds, drop{from: x, to: y, p: f.p})
			if !f.oneWay {
				ds = append(ds, drop{from: y, to: x, p: f.p})
			}
		}
	}
	return ds
}

func others(all, not []*Host) []*Host {
	var out []*Host
	for _, h := range all {
		in := false
		for _, n := range not {
			in = in || n == h
		}
		if !in {
			out = append(out, h)
		}
	}
	return out
}

func names(hs []*Host) string {
	s := make([]string, len(hs))
	for i, h := range hs {
		s[i] = h.Name
	}
	return "[" + strings.Join(s, " ") + "]"
}

// Partition cuts h off from every other host of the lab, both ways (its
// processes keep running and keep talking to themselves over loopback).
func Partition(h *Host) Fault {
	return &dropFault{name: "partition " + h.Name, a: []*Host{h}, p: 1}
}

// OneWay drops every packet from -> to; to -> from still flows (so a TCP
// connection between them can neither open nor carry data, but to's
// packets reach from).
func OneWay(from, to *Host) Fault {
	return &dropFault{name: "one-way " + from.Name + "->" + to.Name, a: []*Host{from}, b: []*Host{to}, oneWay: true, p: 1}
}

// Cut drops every packet between the groups a and b, both ways; each
// group still reaches itself and hosts in neither group.
func Cut(a, b []*Host) Fault {
	return &dropFault{name: "cut " + names(a) + "|" + names(b), a: a, b: b, p: 1}
}

// Split cuts the lab in two: a, and every other host.
func Split(a []*Host) Fault {
	return &dropFault{name: "split " + names(a) + "|rest", a: a, p: 1}
}

// Loss drops each packet between the groups a and b (both ways) with
// probability p (iptables statistic, random mode).
func Loss(a, b []*Host, p float64) Fault {
	return &dropFault{name: fmt.Sprintf("loss %g%% %s<->%s", p*100, names(a), names(b)), a: a, b: b, p: p}
}

// Bandwidth caps what h sends on its link to rate (tc tbf syntax, for
// example "40mbit").
func Bandwidth(h *Host, rate string) Fault { return &tbf{h: h, rate: rate} }

type tbf struct {
	h    *Host
	rate string
}

func (f *tbf) String() string { return "bandwidth " + f.h.Name + " " + f.rate }
func (f *tbf) inject(l *Lab) error {
	if !l.Caps.TBF {
		return errors.New("tc tbf is unavailable on this machine")
	}
	return run("tc", "-n", f.h.NS, "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", f.rate, "burst", "64kb", "latency", "200ms")
}
func (f *tbf) heal(l *Lab) error {
	return run("tc", "-n", f.h.NS, "qdisc", "del", "dev", "eth0", "root")
}

// Pause stops p with SIGSTOP (it keeps its sockets and leases; nothing it
// holds is answered); healing sends SIGCONT. name names the fault.
func Pause(name string, p *cluster.Proc) Fault { return &pause{name: name, p: p} }

type pause struct {
	name string
	p    *cluster.Proc
}

func (f *pause) String() string      { return "pause " + f.name }
func (f *pause) inject(l *Lab) error { f.p.Kill(syscall.SIGSTOP); return nil }
func (f *pause) heal(l *Lab) error   { f.p.Kill(syscall.SIGCONT); return nil }

// Flap injects inner for down, heals it for up, again and again, starting
// with up, until it is healed (which heals inner too).
func Flap(inner Fault, up, down time.Duration) Fault {
	return &flap{inner: inner, up: up, down: down}
}

type flap struct {
	inner    Fault
	up, down time.Duration

	mu    sync.Mutex // guards quit, done and downs
	quit  chan struct{}
	done  chan struct{}
	downs int
}

func (f *flap) String() string {
	return fmt.Sprintf("flap(up %v, down %v) %s", f.up, f.down, f.inner)
}

func (f *flap) inject(l *Lab) error {
	f.mu.Lock()
	f.quit, f.done = make(chan struct{}), make(chan struct{})
	quit, done := f.quit, f.done
	f.mu.Unlock()
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			case <-time.After(f.up):
			}
			if err := l.Inject(f.inner); err != nil {
				return // the lab is closing
			}
			f.mu.Lock()
			f.downs++
			f.mu.Unlock()
			select {
			case <-quit:
				return
			case <-time.After(f.down):
			}
			if err := l.Heal(f.inner); err != nil {
				return
			}
		}
	}()
	return nil
}

// stop ends the flapping goroutine and waits for it.
func (f *flap) stop() {
	f.mu.Lock()
	quit, done := f.quit, f.done
	f.quit = nil
	f.mu.Unlock()
	if quit != nil {
		close(quit)
		<-done
	}
}

func (f *flap) heal(l *Lab) error {
	f.stop()
	return l.Heal(f.inner)
}

// Downs is how many times a flap has cut its link so far.
func Downs(f Fault) int {
	fl, ok := f.(*flap)
	if !ok {
		return 0
	}
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return fl.downs
}
