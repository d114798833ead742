package master

import (
	"fmt"
	"sync/atomic"
	"time"
)

// The rebuild window. A Service that starts with metadata to rebuild from
// the nodes knows none of the objects they hold until they re-register
// them (their DRAM objects: ReRegisterDRAMObjects, dramreg.go; their SSD
// objects: ReRegisterSSDObjects): an elected leader at the start of its
// term, and a single master restarted on the removal log a predecessor
// wrote (--state_dir: the nodes keep their objects across the restart).
// For RebuildWindow after its start, while a live segment waits for its
// node's DRAM re-registration (HoldAllocation), and while re-registrations
// keep arriving (a node's SSD objects come in chunks for seconds at
// millions of objects: until rebuildQuiet after the last chunk, at most
// rebuildMost after the window's end), the Interceptor
// answers the misses of clients "ask again" (ErrRebuilding,
// UNAVAILABLE_IN_CURRENT_STATUS; host:port clients send them again,
// package mastergrpc), objects re-registered get a read lease
// of default_kv_lease_ttl (the predecessor's leases are honoured), and
// when the window closes the offload admission runs again for the DRAM
// objects without an SSD copy (the predecessor's tasks were lost with its
// metadata). A single master's first start (a new removal log) and one
// without --state_dir (the nodes drop what they hold) open no window.

// rebuildState is the Service's rebuild window.
type rebuildState struct {
	// open: the Service started with metadata to rebuild (set by New).
	open bool
	// until is the end of the rebuild window (unix ns; 0 when not open).
	until int64
	// readmitted: the offload admission of rebuilt DRAM objects ran
	// (once, when the window closed; at once without a window).
	readmitted atomic.Bool
	// lastReg is when the last re-registration call (DRAM or SSD)
	// arrived (unix ns; 0: none yet).
	lastReg atomic.Int64
}

// rebuildQuiet: the window stays open while re-registration calls arrive
// less than this apart (a node streams its SSD objects in chunks, three
// in flight, so a gap this long means it is done or stalled).
const rebuildQuiet = time.Second

// rebuildMost bounds how long after RebuildWindow re-registrations keep the
// window open (10M SSD objects took 3.6 to 16.7 s to re-register,
// docs/benchmarks.md "Reconcile at scale").
const rebuildMost = 30 * time.Second

// noteReRegistration records that a re-registration call arrived (for
// Rebuilding), when a window was opened.
func (s *Service) noteReRegistration() {
	if s.rebuild.open {
		s.rebuild.lastReg.Store(s.now())
	}
}

// startRebuild opens the rebuild window for an elected leader, or for a
// single master whose removal log a predecessor wrote (inherited). Called
// by New.
func (s *Service) startRebuild(inherited bool) {
	if !s.cfg.HA.on() && !inherited {
		s.rebuild.readmitted.Store(true)
		return
	}
	s.rebuild.open = true
	s.rebuild.until = s.now() + s.cfg.RebuildWindow.Nanoseconds()
	if s.cfg.HA.on() {
		s.log.Info("leading", "term", s.cfg.HA.Term, "rebuild_window", s.cfg.RebuildWindow)
	} else {
		s.log.Info("restarted on a predecessor's removal log: rebuilding from the nodes", "rebuild_window", s.cfg.RebuildWindow)
	}
}

// rebuildWho names the Service in a "rebuilding" answer.
func (s *Service) rebuildWho() string {
	if s.cfg.HA.on() {
		return fmt.Sprintf("leader of term %d", s.cfg.HA.Term)
	}
	return "restarted master"
}

// Rebuilding reports whether the rebuild window is open: the Service
// started with metadata to rebuild, and the window has not passed, or a
// live segment still waits for its node's DRAM re-registration, or
// re-registrations keep arriving (rebuildQuiet, within rebuildMost).
func (s *Service) Rebuilding() bool {
	if !s.rebuild.open {
		return false
	}
	now := s.now()
	if now < s.rebuild.until || s.anyHeld() {
		return true
	}
	last := s.rebuild.lastReg.Load()
	return last != 0 && now-last < rebuildQuiet.Nanoseconds() && now < s.rebuild.until+rebuildMost.Nanoseconds()
}

// anyHeld reports whether a live node's segment waits for its DRAM
// re-registration (HoldAllocation).
func (s *Service) anyHeld() bool {
	s.nodesMu.RLock()
	defer s.nodesMu.RUnlock()
	for _, n := range s.nodes {
		for _, g := range n.segments {
			if g.held.Load() && g.live() {
				return true
			}
		}
	}
	return false
}

// rebuildTick runs once the rebuild is over: the offload admission of the
// rebuilt DRAM objects, so tasks the predecessor had issued (and lost
// with its metadata) are issued again. Called by Tick.
func (s *Service) rebuildTick() {
	if s.rebuild.readmitted.Load() || s.Rebuilding() {
		return
	}
	if s.rebuild.readmitted.Swap(true) {
		return
	}
	n := 0
	s.eachDRAM(func(_ *shard, k string, o *object) { // SSD-only objects need nothing
		s.scanVisits.Add(1)
		if o.offload == nil && o.readableDRAM() && !o.readableSSD() {
			if _, queued := s.admitToSSD(k, o, s.policy.AtPutEnd, true); queued {
				n++
			}
		}
	})
	s.log.Info("rebuild over", "term", s.cfg.HA.Term, "offloads_queued_again", n)
}

// inWindow reports whether now is inside an open rebuild window.
func (s *Service) inWindow(now int64) bool { return s.rebuild.open && now < s.rebuild.until }

// rebuiltLease gives an object re-registered while the rebuild window is
// open a read lease of default_kv_lease_ttl: the predecessor's leases on
// it (at most that long) are honoured. Caller holds the shard lock.
func (s *Service) rebuiltLease(o *object, now int64) {
	if s.inWindow(now) {
		o.leaseUntil = max(o.leaseUntil, now+s.cfg.DefaultKVLeaseTTL.Nanoseconds())
		o.dramLeaseUntil = max(o.dramLeaseUntil, o.leaseUntil)
	}
}
