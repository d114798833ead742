package node

import (
	"fmt"
	"slices"
	"sort"
)

// Put ownership of segment ranges (docs/design.md invariant 8), node side.
//
// The master hands every put a token (PutStart's answer), strictly
// increasing, and never gives a range to another put while the put that
// owns it may still write, except after the discard timeout. A writer that
// outlived its put (discarded, revoked, its object force-removed) may still
// send bytes to the node; the node must not let them land on a range a
// newer put now owns. So the node remembers, per segment, which put last
// wrote each byte range:
//
//   - claims are disjoint ranges [start, end) of the segment, each with the
//     token of the put that last wrote it;
//   - a write of token g to [a, b) is refused (ErrRangeNotOwned) if a claim
//     overlapping [a, b) has a token larger than g; otherwise the
//     overlapped parts of lower claims are dropped (a claim is trimmed or
//     split around [a, b)) and [a, b) is claimed by g;
//   - token 0 is an unknown writer: always refused (ErrNoPutToken); every
//     PutStart of the master answers a token.
//
// Memory bound: claims are disjoint, so there are at most as many as
// distinct put ranges still partly visible; a write adds at most two (its
// own and the right part of a claim it splits). The table holds at most
// claimsLimit(segment size) claims of 24 bytes (4096 .. 1 Mi claims: at
// most 24 MiB, 1.5 MiB for a 1 GiB segment). Beyond that the claims of the
// oldest puts (the lowest quarter of tokens) are forgotten and floor rises
// to the largest forgotten token: a write whose token is not above floor
// is refused, because the node can no longer tell what it would overwrite.
// Only a put that is older than hundreds of thousands of newer puts and
// still writing is refused that way (the master discards such a put after
// put_start_discard_timeout_sec anyway); it fails cleanly, nothing is lost.
//
// Storage: the claims sorted by start, in chunks of at most claimChunk
// (a two-level sorted list): lookups are two binary searches, a write
// moves at most two chunks' worth of entries.
//
// Not safe for concurrent use: Node.ownMu protects it.
type claims struct {
	chunks [][]claim // non-empty, sorted, claims disjoint across all chunks
	n      int       // claims in chunks
	limit  int       // most claims kept (shed beyond)
	floor  uint64    // writes with a token <= floor are refused (claims shed)
}

// claim: the put with token last wrote [start, end).
type claim struct {
	start, end int64
	token      uint64
}

const claimChunk = 256

// claimsLimit is the most claims kept for a segment of size bytes: one per
// 16 KiB of segment, at least 4096 and at most 1 Mi.
func claimsLimit(size int64) int {
	return int(min(max(size/(16<<10), 4096), 1<<20))
}

func newClaims(limit int) *claims { return &claims{limit: limit} }

// locate returns the position (chunk, index) of the first claim whose end
// is above a: since claims are disjoint and sorted by start, their ends are
// sorted too. (len(chunks), 0) when there is none.
func (c *claims) locate(a int64) (int, int) {
	ci := sort.Search(len(c.chunks), func(i int) bool { ch := c.chunks[i]; return ch[len(ch)-1].end > a })
	if ci == len(c.chunks) {
		return ci, 0
	}
	ch := c.chunks[ci]
	return ci, sort.Search(len(ch), func(i int) bool { return ch[i].end > a })
}

// each calls fn for every claim overlapping [a, b), in order, until fn
// returns false.
func (c *claims) each(a, b int64, fn func(claim) bool) {
	ci, k := c.locate(a)
	for ; ci < len(c.chunks); ci, k = ci+1, 0 {
		for _, cl := range c.chunks[ci][k:] {
			if cl.start >= b || !fn(cl) {
				return
			}
		}
	}
}

// check reports whether a write of token to [a, b) is allowed, without
// recording anything.
func (c *claims) check(a, b int64, token uint64) error {
	if token == 0 {
		return fmt.Errorf("%w: write to [%d, %d) carries no put token", ErrNoPutToken, a, b)
	}
	if token <= c.floor {
		return fmt.Errorf("%w: put token %d is older than the oldest put the node still tracks (%d)", ErrRangeNotOwned, token, c.floor+1)
	}
	var err error
	c.each(a, b, func(cl claim) bool {
		if cl.token > token {
			err = fmt.Errorf("%w: [%d, %d) was written by put %d, newer than put %d", ErrRangeNotOwned, max(a, cl.start), min(b, cl.end), cl.token, token)
			return false
		}
		return true
	})
	return err
}

// claim checks a write of token to [a, b) and, when it is allowed,
// records that token owns [a, b).
func (c *claims) claim(a, b int64, token uint64) error {
	if err := c.check(a, b, token); err != nil {
		return err
	}
	if a >= b {
		return nil
	}
	c.splice(a, b, claim{a, b, token})
	if c.n > c.limit {
		c.shed()
	}
	return nil
}

// splice replaces every claim overlapping [a, b) by its parts outside
// [a, b) (a left part of the first one, a right part of the last one) and
// nw.
func (c *claims) splice(a, b int64, nw claim) {
	ci, k := c.locate(a)
	if ci == len(c.chunks) { // every claim ends at or before a
		if ci == 0 {
			c.chunks = append(c.chunks, []claim{nw})
		} else {
			c.chunks[ci-1] = append(c.chunks[ci-1], nw)
			c.split(ci - 1)
		}
		c.n++
		return
	}
	// (cj, m): just after the last overlapped claim; cj stays a valid chunk.
	var out []claim
	var right []claim
	cj, m := ci, k
	for {
		ch := c.chunks[cj]
		if m == len(ch) {
			if cj == len(c.chunks)-1 {
				break
			}
			cj, m = cj+1, 0
			continue
		}
		cl := ch[m]
		if cl.start >= b {
			break
		}
		if cl.start < a {
			out = append(out, claim{cl.start, a, cl.token})
		}
		if cl.end > b {
			right = append(right, claim{b, cl.end, cl.token})
		}
		m++
		c.n--
	}
	out = append(append(out, nw), right...)
	c.n += len(out)
	merged := slices.Concat(c.chunks[ci][:k], out, c.chunks[cj][m:])
	c.chunks = slices.Replace(c.chunks, ci, cj+1, merged)
	c.split(ci)
}

// split halves chunk ci while it holds more than claimChunk claims.
func (c *claims) split(ci int) {
	ch := c.chunks[ci]
	if len(ch) <= claimChunk {
		return
	}
	half := len(ch) / 2
	left := slices.Clone(ch[:half])
	right := slices.Clone(ch[half:])
	c.chunks = slices.Replace(c.chunks, ci, ci+1, left, right)
	c.split(ci + 1)
	c.split(ci)
}

// shed forgets the claims of the oldest puts (the lowest quarter of the
// tokens) and raises floor to the largest forgotten token.
func (c *claims) shed() {
	tokens := make([]uint64, 0, c.n)
	for _, ch := range c.chunks {
		for _, cl := range ch {
			tokens = append(tokens, cl.token)
		}
	}
	slices.Sort(tokens)
	thr := tokens[len(tokens)/4]
	c.floor = max(c.floor, thr)
	var kept []claim
	for _, ch := range c.chunks {
		for _, cl := range ch {
			if cl.token > thr {
				kept = append(kept, cl)
			}
		}
	}
	c.chunks, c.n = nil, 0
	for len(kept) > 0 {
		k := min(len(kept), claimChunk)
		c.chunks = append(c.chunks, slices.Clone(kept[:k]))
		c.n += k
		kept = kept[k:]
	}
}

// reset forgets every claim (a remount: the master that hands out tokens
// may be a new one).
func (c *claims) reset() {
	c.chunks, c.n, c.floor = nil, 0, 0
}

// all returns every claim in order (tests).
func (c *claims) all() []claim {
	var out []claim
	for _, ch := range c.chunks {
		out = append(out, ch...)
	}
	return out
}
