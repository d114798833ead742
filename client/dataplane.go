package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/grant"
	"github.com/tierstore/tierstore/internal/keyspec"
	"github.com/tierstore/tierstore/internal/wire"
	"github.com/tierstore/tierstore/masterapi"
)

// Tier is where a Get was served or a Put written, from this client's
// point of view.
type Tier uint8

// Tiers, best first (the order in which Get tries replicas).
const (
	TierLocalDRAM Tier = iota
	TierRemoteDRAM
	TierLocalSSD
	TierRemoteSSD
)

// String is the tier's metric label: dram_local, dram_remote, ssd_local,
// ssd_remote (the node's histograms use the same).
func (t Tier) String() string {
	switch t {
	case TierLocalDRAM:
		return "dram_local"
	case TierRemoteDRAM:
		return "dram_remote"
	case TierLocalSSD:
		return "ssd_local"
	case TierRemoteSSD:
		return "ssd_remote"
	}
	return fmt.Sprintf("tier(%d)", uint8(t))
}

// Observer is told the latency of every Put, Get and GetInto that
// succeeded, with the tier that served it (for a batch call: each item,
// from the start of the batch to that item's end). Calls come from many
// goroutines at once and must not block. Package client/clientmetrics
// implements it with Prometheus histograms; this package does not depend
// on Prometheus.
type Observer interface {
	ObservePut(t Tier, d time.Duration)
	ObserveGet(t Tier, d time.Duration)
}

// ErrBufferTooSmall: GetInto's buffer is shorter than the object. Also
// wraps ErrInvalidParams. Nothing was written to the buffer.
var ErrBufferTooSmall = errors.New("client: buffer smaller than the object")

// GetInto reads key's value into buf and returns its length: buf[:n] is
// the value, checked against its size and CRC32C. A buffer shorter than
// the object is ErrBufferTooSmall, before anything is read. Nothing is
// ever written beyond len(buf); on error buf[:len] may hold anything. A
// remote read goes from the socket straight into buf (no allocation,
// no copy). Errors as Get.
func (c *Client) GetInto(ctx context.Context, key string, buf []byte) (int, error) {
	start := time.Now()
	if err := c.check(key); err != nil {
		return 0, err
	}
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	n := 0
	err := c.lookupAndRead(ctx, key, start, func(info masterapi.ObjectInfo) ([][]byte, error) {
		if err := fits(info, int64(len(buf))); err != nil {
			return nil, err
		}
		n = int(info.Size)
		return [][]byte{buf[:info.Size]}, nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

func fits(info masterapi.ObjectInfo, room int64) error {
	if info.Size > room {
		return fmt.Errorf("client: get %s: buffer of %d bytes, the object has %d: %w: %w", keyspec.Show(info.Key), room, info.Size, ErrBufferTooSmall, errcode.ErrInvalidParams)
	}
	return nil
}

// BatchGetInto reads keys[i] into bufs[i] with one BatchGetReplicaList,
// several transfers in flight at once; ns[i] is the length of value i,
// errs[i] its error (ErrBufferTooSmall when bufs[i] is too short: nothing
// is written to it). Nothing is written beyond any buffer's length.
func (c *Client) BatchGetInto(ctx context.Context, keys []string, bufs [][]byte) (ns []int, errs []error) {
	ns = make([]int, len(keys))
	if len(bufs) != len(keys) {
		errs = make([]error, len(keys))
		for i := range errs {
			errs[i] = errcode.Errorf(errcode.InvalidParams, "client: batch get: %d keys, %d buffers", len(keys), len(bufs))
		}
		return ns, errs
	}
	errs = c.batchRead(ctx, keys, func(i int, info masterapi.ObjectInfo) ([][]byte, error) {
		if err := fits(info, int64(len(bufs[i]))); err != nil {
			return nil, err
		}
		ns[i] = int(info.Size)
		return [][]byte{bufs[i][:info.Size]}, nil
	})
	for i, err := range errs {
		if err != nil {
			ns[i] = 0
		}
	}
	return ns, errs
}

// BatchGet reads keys with one BatchGetReplicaList; values[i] is nil when
// errs[i] is not.
func (c *Client) BatchGet(ctx context.Context, keys []string) ([][]byte, []error) {
	vals := make([][]byte, len(keys))
	errs := c.batchRead(ctx, keys, func(i int, info masterapi.ObjectInfo) ([][]byte, error) {
		vals[i] = make([]byte, info.Size)
		return [][]byte{vals[i]}, nil
	})
	for i, err := range errs {
		if err != nil {
			vals[i] = nil
		}
	}
	return vals, errs
}

// batchRead looks keys up with one call and reads each into the buffer
// bufFor gives it, up to batchParallelism at once.
func (c *Client) batchRead(ctx context.Context, keys []string, bufFor func(i int, info masterapi.ObjectInfo) ([][]byte, error)) []error {
	start := time.Now()
	errs := make([]error, len(keys))
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	var ask []string
	var idx []int
	for i, k := range keys {
		if err := c.check(k); err != nil {
			errs[i] = err
			continue
		}
		ask = append(ask, k)
		idx = append(idx, i)
	}
	if len(ask) == 0 {
		return errs
	}
	// Keys in the replica-location cache are read from their cached
	// answers (cached[j]); the others are looked up with one call.
	res := make([]masterapi.ReplicaListResult, len(idx))
	cached := make([]bool, len(idx))
	var miss []string
	var missJ []int
	for j, k := range ask {
		if info, ok := c.cache.get(k); ok {
			if _, ok := c.cachedReplica(info); ok {
				res[j].Info, cached[j] = info, true
				continue
			}
			c.cache.drop(k)
		}
		miss = append(miss, k)
		missJ = append(missJ, j)
	}
	if len(miss) > 0 {
		gen, sent := c.cache.generation(), time.Now()
		got, err := c.m.BatchGetReplicaList(ctx, miss)
		if err == nil && len(got) != len(miss) {
			err = errcode.Errorf(errcode.InternalError, "client: batch get: %d results for %d keys", len(got), len(miss))
		}
		if err != nil {
			for _, j := range missJ {
				errs[idx[j]] = fmt.Errorf("client: get %s: %w", keyspec.Show(ask[j]), err)
			}
			if len(miss) == len(ask) {
				return errs
			}
		} else {
			for m, j := range missJ {
				res[j] = got[m]
				if got[m].Err == nil {
					c.remember(ask[j], got[m].Info, sent, gen)
				}
			}
		}
	}
	bufs := make([][][]byte, len(idx))
	todo := make([]bool, len(idx)) // still to be read (readBest)
	for j, i := range idx {
		if errs[i] != nil {
			continue // the lookup failed
		}
		if res[j].Err != nil {
			errs[i] = fmt.Errorf("client: get %s: %w", keyspec.Show(keys[i]), res[j].Err)
			continue
		}
		if bufs[j], errs[i] = bufFor(i, res[j].Info); errs[i] == nil {
			todo[j] = true
		} else if cached[j] {
			errs[i] = nil // the object may have changed: looked up below
			todo[j] = true
		}
	}
	c.readPipelined(ctx, res, bufs, todo, cached, start)
	parallel(len(idx), func(j int) {
		if !todo[j] {
			return
		}
		i := idx[j]
		again := func(again masterapi.ObjectInfo) ([][]byte, error) { return bufFor(i, again) }
		if cached[j] {
			// Not read by readPipelined: as a single get of a cached key.
			if done, err := c.readCachedInfo(ctx, keys[i], res[j].Info, start, again); done {
				errs[i] = err
			} else {
				errs[i] = c.lookupAndRead(ctx, keys[i], start, again)
			}
			return
		}
		info := res[j].Info
		errs[i] = c.readAgain(ctx, info, c.readBest(ctx, info, bufs[j], start), start, again)
		if errs[i] != nil {
			c.cache.drop(keys[i])
		}
	})
	return errs
}

// readPipelined reads the items of a batch whose best replica is in a
// remote node's DRAM with ReadRanges: per node, the requests are split
// over its data connections and written back to back, so the node streams
// the values without waiting for this client between them (no goroutine
// and no request write per item). Each item read and checked is marked
// done in todo; any other outcome leaves it to readBest (which tries
// again, falls back and reports as for a single Get).
// The items of cached answers (cached[j]) name their put tokens, so that
// a node refuses a range that holds another put's object.
func (c *Client) readPipelined(ctx context.Context, res []masterapi.ReplicaListResult, bufs [][][]byte, todo, cached []bool, start time.Time) {
	type item struct {
		j int
		r masterapi.Replica
	}
	byNode := map[string][]item{}
	for j, ok := range todo {
		if !ok {
			continue
		}
		if r, ok := c.bestRemoteDRAM(res[j].Info); ok {
			byNode[r.Endpoint] = append(byNode[r.Endpoint], item{j, r})
		}
	}
	var wg sync.WaitGroup
	for ep, items := range byNode {
		conns := max(1, min(c.data.Conns(), len(items)/2))
		per := (len(items) + conns - 1) / conns
		for len(items) > 0 {
			part := items[:min(per, len(items))]
			items = items[len(part):]
			wg.Go(func() {
				rs := make([]wire.RangeRead, len(part))
				for k, it := range part {
					rs[k] = wire.RangeRead{Segment: it.r.Segment, Offset: it.r.Offset, Grant: grantOf(it.r.Grant), Parts: bufs[it.j], CRC: res[it.j].Info.CRC}
					if cached[it.j] {
						rs[k].Token = it.r.PutToken
					}
				}
				// Each item's share of the replica timeout, as when
				// batchParallelism of them are in flight at once.
				rctx, cancel := context.WithTimeout(ctx, c.cfg.ReplicaTimeout*time.Duration(max(1, len(part)/batchParallelism)))
				defer cancel()
				dc, err := c.data.Acquire(rctx, ep)
				if err != nil {
					return
				}
				dc.ReadRanges(rctx, rs)
				dc.Release()
				for k, it := range part {
					if rs[k].Err == nil {
						todo[it.j] = false
						if cached[it.j] {
							c.cache.hits.Add(1)
							c.touched(res[it.j].Info.Key)
						}
						c.countRead(it.r)
						if c.cfg.Observer != nil {
							c.cfg.Observer.ObserveGet(TierRemoteDRAM, time.Since(start))
						}
					}
				}
			})
		}
	}
	wg.Wait()
}

// bestRemoteDRAM returns info's best complete replica when it is in a
// remote node's DRAM, reachable over the data plane; of several remote
// DRAM replicas (a put of several replicas), the next in turn (see
// spreadRemoteDRAM).
func (c *Client) bestRemoteDRAM(info masterapi.ObjectInfo) (masterapi.Replica, bool) {
	best, rank, same := masterapi.Replica{}, -1, 0
	for _, r := range info.Replicas {
		switch k := c.rank(r); {
		case r.Status != masterapi.Complete:
		case rank < 0 || k < rank:
			best, rank, same = r, k, 1
		case k == rank:
			same++
		}
	}
	if rank == 1 && same > 1 {
		turn := int(c.spread.Add(1) % uint32(same))
		for _, r := range info.Replicas {
			if r.Status == masterapi.Complete && c.rank(r) == 1 {
				if turn == 0 {
					best = r
					break
				}
				turn--
			}
		}
	}
	ok := rank == 1 && !strings.HasPrefix(best.Endpoint, "inproc:")
	return best, ok
}

// spreadRemoteDRAM rotates the run of remote DRAM replicas in reps (sorted
// by rank) one step further at each read of this client, from a random
// start: the readers of an object put with several replicas (a hot
// prefix every worker reads) share its nodes' bandwidth instead of all
// reading the first. Among remote nodes none is nearer; local DRAM stays
// first, and the others remain the fallbacks.
func (c *Client) spreadRemoteDRAM(reps []masterapi.Replica) {
	i := 0
	for i < len(reps) && c.rank(reps[i]) < 1 {
		i++
	}
	j := i
	for j < len(reps) && c.rank(reps[j]) == 1 {
		j++
	}
	run := reps[i:j]
	if len(run) < 2 {
		return
	}
	k := int(c.spread.Add(1) % uint32(len(run)))
	slices.Reverse(run[:k])
	slices.Reverse(run[k:])
	slices.Reverse(run)
}

// readBest reads the object into buf (exactly its size) from the best
// replica whose bytes match the object's size and CRC32C; on any failure
// it falls back to the next replica. Each transfer is checked once, by
// this side, against the CRC32C from the lookup. When every failure was a
// replica the master no longer lists as the object's (removed, evicted or
// put again under the read: issue 21 item 5), the error wraps
// errGoneUnderRead instead of counting as a checksum failure; readAgain
// then looks the key up once more.
func (c *Client) readBest(ctx context.Context, info masterapi.ObjectInfo, buf [][]byte, start time.Time) error {
	return c.readBestOf(ctx, info, buf, start, false)
}

// readBestOf is readBest; cached says that info is a cached answer
// (readCachedReplica: every read names the put it expects).
func (c *Client) readBestOf(ctx context.Context, info masterapi.ObjectInfo, buf [][]byte, start time.Time, cached bool) error {
	gone, err := c.readFrom(ctx, info, buf, start, cached)
	if gone {
		return fmt.Errorf("%w: %w", errGoneUnderRead, err)
	}
	return err
}

// errGoneUnderRead marks a read whose every replica went away while it
// was read (the master said so when it was reported).
var errGoneUnderRead = errors.New("client: the replicas read were removed while they were read")

// readFrom is readBest's pass over info's replicas; gone reports that
// every failure was a replica removed under the read.
func (c *Client) readFrom(ctx context.Context, info masterapi.ObjectInfo, buf [][]byte, start time.Time, cached bool) (gone bool, err error) {
	var small [4]masterapi.Replica // most objects have one to three replicas
	reps := small[:0]
	for _, r := range info.Replicas {
		if r.Status == masterapi.Complete {
			reps = append(reps, r)
		}
	}
	// Stable: keeps the master's order within a rank.
	slices.SortStableFunc(reps, func(a, b masterapi.Replica) int { return c.rank(a) - c.rank(b) })
	c.spreadRemoteDRAM(reps)
	var last error
	sawChecksum, removed, other := false, 0, 0
	for _, r := range reps {
		var err error
		if cached {
			err = c.readCachedReplica(ctx, info, r, buf)
		} else {
			err = c.readReplica(ctx, info, r, buf)
		}
		if err == nil {
			c.countRead(r)
			if c.cfg.Observer != nil {
				c.cfg.Observer.ObserveGet(Tier(c.rank(r)), time.Since(start))
			}
			return false, nil
		}
		switch {
		case errors.Is(err, errcode.ErrChecksumMismatch):
			// Only bytes this side checked can belong to a replica that
			// went away under the read; a node that found its own SSD copy
			// corrupt (no wire.ErrBadChecksum) dropped it itself.
			received := errors.Is(err, wire.ErrBadChecksum)
			if c.reportBad(ctx, info, r, false) && received {
				removed++
				c.removedUnderRead.Add(1)
				break
			}
			sawChecksum = true
			other++
			if received {
				c.checksumFailures.Add(1)
			}
		case r.Kind == masterapi.DRAM && errors.Is(err, errcode.ErrReplicaGone),
			r.Kind == masterapi.SSD && errors.Is(err, errcode.ErrObjectNotFound):
			// A DRAM range the node holds no such object at (removed,
			// evicted or put again since the lookup, and applied by the
			// node: a forced removal of a leased object waits for that).
			// The node answered for its own SSD: it does not hold the
			// object. The master must stop offering that replica. (A
			// transport error says nothing about the SSD: not reported.)
			if c.reportBad(ctx, info, r, true) {
				removed++
				c.removedUnderRead.Add(1)
			} else {
				other++
			}
		default:
			other++
		}
		c.log.Debug("replica read failed; trying the next", "key", info.Key, "node", r.Node, "kind", r.Kind, "err", err)
		c.fallbacks.Add(1)
		last = err
		if ctx.Err() != nil {
			break
		}
	}
	return removed > 0 && other == 0, c.allFailed(ctx, info, len(reps), last, sawChecksum)
}

// allFailed is readBest's error when no replica could be read.
func (c *Client) allFailed(ctx context.Context, info masterapi.ObjectInfo, n int, last error, sawChecksum bool) error {
	if last == nil {
		return errcode.Errorf(errcode.ReplicaNotReady, "client: get %s: no complete replica", keyspec.Show(info.Key))
	}
	code := errcode.TransferFail
	if sawChecksum {
		code = errcode.ChecksumMismatch
	}
	if ctx.Err() != nil {
		code = errcode.ContextCanceled
	}
	if code == errcode.TransferFail && errors.Is(last, errcode.ErrPermissionDenied) {
		// A node refused the read (its read grant, docs/security.md):
		// PERMISSION_DENIED, with the grant's sentinel (grant.ErrMissing,
		// ErrForged, ErrExpired) still in the chain.
		return errcode.Wrap(errcode.PermissionDenied, fmt.Errorf("client: get %s: all %d replicas failed, last: %w", keyspec.Show(info.Key), n, last))
	}
	// The sentinel's text ends the returned error once, not twice.
	lastMsg := strings.TrimSuffix(last.Error(), ": "+errcode.Err(errcode.Of(last)).Error())
	return errcode.Errorf(code, "client: get %s: all %d replicas failed, last: %s", keyspec.Show(info.Key), n, lastMsg)
}

// readReplica reads replica r of info into buf, checked against the
// object's size and CRC32C.
func (c *Client) readReplica(ctx context.Context, info masterapi.ObjectInfo, r masterapi.Replica, buf [][]byte) error {
	return c.readReplicaToken(ctx, info, r, buf, 0)
}

// readReplicaToken is readReplica whose remote DRAM read names the put
// token (a cached answer's: the node refuses a range that holds another
// put's object), or none (0): a lookup's fresh answer is checked by its
// CRC32C alone, and a range written again under it is a checksum failure
// that readAgain resolves.
func (c *Client) readReplicaToken(ctx context.Context, info masterapi.ObjectInfo, r masterapi.Replica, buf [][]byte, token uint64) error {
	if r.Kind == masterapi.DRAM && c.local != nil && r.Node == c.local.Name() {
		// A copy out of this process's segment cannot stall: no replica
		// timeout (its context and timer would cost more than the copy
		// of a small object).
		return localPeer{c.local}.readRange(ctx, r.Segment, r.Offset, 0, buf, info.CRC, nil)
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ReplicaTimeout)
	defer cancel()
	// One object from one replica: this goroutine reads the reply itself,
	// on a connection of its own (wire.WithCallerReads), rather than being
	// handed it by a shared connection's reader goroutine.
	p, err := c.peerFor(wire.WithCallerReads(ctx), r)
	if err != nil {
		return err
	}
	defer p.release()
	if r.Kind == masterapi.DRAM {
		// The object's size, not r.Length: a replica of another length
		// fails the CRC check like any other wrong bytes.
		err = p.readRange(ctx, r.Segment, r.Offset, token, buf, info.CRC, grantOf(r.Grant))
	} else {
		err = p.readSSD(ctx, []byte(info.Key), buf, info.CRC, grantOf(r.Grant))
	}
	return grantRefusal(err)
}

// grantRefusal is err, and for a node's refusal of a read or write grant
// (PERMISSION_DENIED naming grant.ErrMissing, ErrForged or ErrExpired: the
// data plane carries a code and a text) also that sentinel, so that
// callers tell them apart with errors.Is.
func grantRefusal(err error) error {
	if err != nil && errors.Is(err, errcode.ErrPermissionDenied) {
		if g := grant.Restore(err.Error()); g != nil {
			return errcode.Wrap(errcode.PermissionDenied, g)
		}
	}
	return err
}

// observePut reports a put written to replica r that started at start.
func (c *Client) observePut(r masterapi.Replica, start time.Time) {
	if c.cfg.Observer != nil {
		c.cfg.Observer.ObservePut(Tier(c.rank(r)), time.Since(start))
	}
}
