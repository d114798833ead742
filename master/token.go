package master

import "sync/atomic"

// tokenClockShift places the wall clock's milliseconds above 22 bits of
// sequence: 2^22 tokens per millisecond before the sequence runs ahead of
// the clock, and 42 bits of milliseconds (until the year 2109).
const tokenClockShift = 22

// tokenSource issues put tokens (docs/design.md invariant 8). Each token is
// max(last+1, unix_ms<<22): strictly larger than every token this master
// issued before, and larger than every token of a master that ran before it
// (a restart, or another leader) as long as this master's wall clock is
// not behind the previous master's by more than the time between them and
// the previous master did not issue more than 2^22 tokens per millisecond
// on average ahead of its clock. Tokens are therefore ordered
// like the allocations they name: a range allocated again always comes with
// a larger token than its previous owner's, which is what a node needs to
// refuse a late write of a previous owner. Token 0 is never issued.
type tokenSource struct {
	last atomic.Uint64 // the last token issued
}

// next returns a new token; nowNS is the current time in unix nanoseconds.
func (t *tokenSource) next(nowNS int64) uint64 {
	floor := uint64(0)
	if nowNS > 0 {
		floor = uint64(nowNS/1e6) << tokenClockShift
	}
	for {
		last := t.last.Load()
		n := max(last+1, floor)
		if t.last.CompareAndSwap(last, n) {
			return n
		}
	}
}
