//go:build linux

package netlab

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Shape is what the relay does to each packet of a shaped link.
type Shape struct {
	// Delay and Jitter: each packet waits Delay plus a uniform draw in
	// [-Jitter, +Jitter], independently, so packets overtake each other
	// as on a real link with jitter.
	Delay, Jitter time.Duration
	// Loss, Dup and Reorder are fractions of packets dropped, sent twice
	// (the copy with its own delay), and sent at once, overtaking every
	// packet still waiting.
	Loss, Dup, Reorder float64
}

func (s Shape) String() string {
	var p []string
	if s.Delay > 0 || s.Jitter > 0 {
		p = append(p, fmt.Sprintf("delay %v±%v", s.Delay, s.Jitter))
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"loss", s.Loss}, {"dup", s.Dup}, {"reorder", s.Reorder}} {
		if f.v > 0 {
			p = append(p, fmt.Sprintf("%s %g%%", f.name, f.v*100))
		}
	}
	if len(p) == 0 {
		return "relay"
	}
	return strings.Join(p, " ")
}

// RelayStats counts what the relay did.
type RelayStats struct {
	Relayed, Dropped, Duplicated, Reordered int64
}

// Relay forwards IPv4 packets between the tun devices of the lab's hosts,
// shaping those of each directed pair of hosts that has a Shape. A host's
// route to a shaped peer points at its tun device, so its packets reach
// the relay instead of the bridge.
type Relay struct {
	// mu guards tuns, shapes, rng and closed.
	mu     sync.Mutex
	tuns   map[netip.Addr]*os.File
	shapes map[[2]netip.Addr]Shape // (src, dst)
	rng    *rand.Rand
	closed bool
	wg     sync.WaitGroup // readers

	relayed, dropped, duplicated, reordered atomic.Int64
}

func newRelay() *Relay {
	return &Relay{tuns: map[netip.Addr]*os.File{}, shapes: map[[2]netip.Addr]Shape{},
		rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x7e1a))}
}

// Stats returns the relay's counters.
func (r *Relay) Stats() RelayStats {
	return RelayStats{Relayed: r.relayed.Load(), Dropped: r.dropped.Load(), Duplicated: r.duplicated.Load(), Reordered: r.reordered.Load()}
}

// attach gives h a tun device tl0 (up) read by the relay; a no-op when h
// has one.
func (r *Relay) attach(h *Host) error {
	a := netip.MustParseAddr(h.IP)
	r.mu.Lock()
	_, ok := r.tuns[a]
	r.mu.Unlock()
	if ok {
		return nil
	}
	f, err := openTun(h.NS, "tl0")
	if err != nil {
		return err
	}
	if err := run("ip", "-n", h.NS, "link", "set", "tl0", "up"); err != nil {
		f.Close()
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		f.Close()
		return fmt.Errorf("netlab: relay closed")
	}
	r.tuns[a] = f
	r.wg.Add(1)
	go r.read(f)
	return nil
}

func (r *Relay) setShape(from, to *Host, s Shape, on bool) {
	k := [2]netip.Addr{netip.MustParseAddr(from.IP), netip.MustParseAddr(to.IP)}
	r.mu.Lock()
	defer r.mu.Unlock()
	if on {
		r.shapes[k] = s
	} else {
		delete(r.shapes, k)
	}
}

// read forwards the packets of one tun device until it is closed.
func (r *Relay) read(f *os.File) {
	defer r.wg.Done()
	buf := make([]byte, 1<<16)
	for {
		n, err := f.Read(buf)
		if err != nil {
			return
		}
		if n < 20 || buf[0]>>4 != 4 {
			continue // IPv4 only (the lab has no IPv6 addresses)
		}
		src, _ := netip.AddrFromSlice(buf[12:16])
		dst, _ := netip.AddrFromSlice(buf[16:20])
		r.forward(append([]byte(nil), buf[:n]...), src, dst)
	}
}

// forward sends pkt to dst's tun device after the pair's shape.
func (r *Relay) forward(pkt []byte, src, dst netip.Addr) {
	r.mu.Lock()
	out := r.tuns[dst]
	s := r.shapes[[2]netip.Addr{src, dst}]
	lost := s.Loss > 0 && r.rng.Float64() < s.Loss
	dup := s.Dup > 0 && r.rng.Float64() < s.Dup
	delays := []time.Duration{r.delay(s)}
	if dup {
		delays = append(delays, r.delay(s))
	}
	r.mu.Unlock()
	if out == nil || lost {
		r.dropped.Add(1)
		return
	}
	if dup {
		r.duplicated.Add(1)
	}
	for _, d := range delays {
		r.relayed.Add(1)
		if d <= 0 {
			_, _ = out.Write(pkt)
			continue
		}
		time.AfterFunc(d, func() { _, _ = out.Write(pkt) })
	}
}

// delay draws one packet's delay. Caller holds r.mu.
func (r *Relay) delay(s Shape) time.Duration {
	if s.Reorder > 0 && r.rng.Float64() < s.Reorder {
		r.reordered.Add(1)
		return 0
	}
	d := s.Delay
	if s.Jitter > 0 {
		d += time.Duration(r.rng.Int64N(int64(2*s.Jitter)+1)) - s.Jitter
	}
	return d
}

// Close stops the relay and closes its tun devices (they disappear).
func (r *Relay) Close() {
	r.mu.Lock()
	r.closed = true
	for _, f := range r.tuns {
		f.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// Delay routes the traffic between the groups a and b (both ways) through
// the relay with shape s. Healing routes it back over the bridge (packets
// waiting in the relay are still delivered).
func Delay(a, b []*Host, s Shape) Fault {
	return &shaped{a: a, b: b, s: s}
}

type shaped struct {
	a, b []*Host
	s    Shape
}

func (f *shaped) String() string { return f.s.String() + " " + names(f.a) + "<->" + names(f.b) }

func (f *shaped) pairs(fn func(x, y *Host) error) error {
	for _, x := range f.a {
		for _, y := range f.b {
			if x == y {
				continue
			}
			if err := fn(x, y); err != nil {
				return err
			}
			if err := fn(y, x); err != nil {
				return err
			}
		}
	}
	return nil
}

func (f *shaped) inject(l *Lab) error {
	if !l.Caps.Relay {
		return fmt.Errorf("the relay is unavailable on this machine (%s)", l.Caps.Notes)
	}
	for _, h := range append(append([]*Host(nil), f.a...), f.b...) {
		if err := l.relay.attach(h); err != nil {
			return err
		}
	}
	return f.pairs(func(x, y *Host) error {
		l.relay.setShape(x, y, f.s, true)
		return run("ip", "-n", x.NS, "route", "replace", y.IP+"/32", "dev", "tl0")
	})
}

func (f *shaped) heal(l *Lab) error {
	return f.pairs(func(x, y *Host) error {
		err := run("ip", "-n", x.NS, "route", "del", y.IP+"/32", "dev", "tl0")
		l.relay.setShape(x, y, f.s, false)
		return err
	})
}

// RelayStats returns what the lab's relay has done so far.
func (l *Lab) RelayStats() RelayStats { return l.relay.Stats() }
