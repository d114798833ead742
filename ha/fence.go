package ha

import (
	"sync/atomic"
	"time"
)

// fence is a leader's conservative knowledge of its own etcd lease: the
// leadership is valid only while now < until, where until is the latest
// sentAt + TTL - margin over every keepalive that etcd confirmed. sentAt is
// read BEFORE the keepalive request leaves, so it is no later than the
// moment etcd renewed the lease; etcd cannot expire the lease (and so cannot
// let another candidate win) before sentAt + TTL. The argument in full is in
// doc.go.
//
// Once valid() has returned false the fence stays down: a late confirmation
// cannot raise it again (lost is checked first and is never cleared). The
// leader must step down and campaign anew, under a new term.
//
// Concurrency: valid and remaining may be called from any goroutine without
// locks; confirm is called by the keepalive goroutine and drop by whoever
// ends the leadership. Both fields are atomics; no lock is needed because
// until only grows (CAS loop) and lost only goes from false to true.
type fence struct {
	now    clock
	margin time.Duration
	until  atomic.Int64 // clock reading (ns) at which validity ends
	lost   atomic.Bool  // sticky: set once validity ended or the leadership was dropped
}

// confirm records a keepalive that etcd answered with ttl, whose request was
// sent no earlier than sentAt.
func (f *fence) confirm(sentAt, ttl time.Duration) {
	u := int64(sentAt + ttl - f.margin)
	for {
		old := f.until.Load()
		if u <= old || f.lost.Load() {
			return
		}
		if f.until.CompareAndSwap(old, u) {
			return
		}
	}
}

// valid reports whether the lease is certainly still alive minus the margin.
func (f *fence) valid() bool {
	if f.lost.Load() {
		return false
	}
	if int64(f.now()) >= f.until.Load() {
		f.lost.Store(true)
		return false
	}
	return true
}

// remaining is how long the fence stays up without another confirmation;
// 0 when it is down.
func (f *fence) remaining() time.Duration {
	if !f.valid() {
		return 0
	}
	if d := time.Duration(f.until.Load()) - f.now(); d > 0 {
		return d
	}
	return 0
}

// drop takes the fence down for good.
func (f *fence) drop() { f.lost.Store(true) }
