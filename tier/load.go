package tier

import (
	"context"
	"errors"
	"fmt"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/bucket"
	"github.com/tierstore/tierstore/index"
)

// Load reads keys from SSD into new memory. Every value is checked against
// its CRC32C (invariant 5): a mismatch is ErrChecksum for that key, the
// entry is dropped from the index and the owner is told through OnEvict;
// other keys are not affected. It is LoadInto without buffers.
func (e *Engine) Load(ctx context.Context, keys [][]byte) []LoadResult {
	return e.LoadInto(ctx, keys, nil)
}

// LoadInto reads keys from SSD into the caller's buffers: on success
// res[i].Value is bufs[i][:size]. bufs may be nil (every value in new
// memory, as Load), and bufs[i] may be nil (that value in new memory). A
// buffer shorter than its value fails that key alone with ErrBufferTooSmall,
// and nothing is written to it; on any other failure its contents are
// unspecified. Nothing is written past len(bufs[i]), and nothing at all after
// LoadInto returns, also when ctx ends mid-read. A buffer from NewBuffer(n)
// receives a value of up to n bytes straight from the device (no copy); any
// other buffer gets a copy.
//
// All the reads of one call, across buckets, go to the backend as one
// submission. Checksums are verified as in Load.
func (e *Engine) LoadInto(ctx context.Context, keys, bufs [][]byte) []LoadResult {
	j := e.startLoad(ctx, keys, bufs)
	if j == nil {
		return errResults(len(keys), ErrClosed)
	}
	defer e.ops.Done()
	if len(j.ops) > 0 {
		j.readDone(e.be.Read(ctx, j.ops))
	}
	j.finish()
	return j.res
}

// LoadAsync is LoadInto without waiting: it returns at once and calls done
// exactly once, on another goroutine, with one result per key. The reads of
// concurrent LoadAsync (and LoadInto) calls share the device queue, so a
// single goroutine that starts many keeps that many reads in flight. keys
// and bufs belong to the engine until done runs; Close waits for done to
// return.
func (e *Engine) LoadAsync(ctx context.Context, keys, bufs [][]byte, done func([]LoadResult)) {
	j := e.startLoad(ctx, keys, bufs)
	if j == nil {
		res := errResults(len(keys), ErrClosed)
		go done(res)
		return
	}
	if len(j.ops) == 0 {
		go func() {
			defer e.ops.Done()
			j.finish()
			done(j.res)
		}()
		return
	}
	backend.StartRead(ctx, e.be, j.ops, func(err error) {
		defer e.ops.Done()
		j.readDone(err)
		j.finish()
		done(j.res)
	})
}

// loadAt is Load that also returns where each value was read from (the
// location is zero for a key that failed).
func (e *Engine) loadAt(ctx context.Context, keys [][]byte) ([]LoadResult, []index.Location) {
	j := e.startLoad(ctx, keys, nil)
	if j == nil {
		return errResults(len(keys), ErrClosed), make([]index.Location, len(keys))
	}
	defer e.ops.Done()
	if len(j.ops) > 0 {
		j.readDone(e.be.Read(ctx, j.ops))
	}
	j.finish()
	locs := make([]index.Location, len(keys))
	for _, r := range j.reqs {
		if j.res[r.i].Err == nil {
			locs[r.i] = r.loc
		}
	}
	return j.res, locs
}

// NewBuffer returns a buffer for LoadInto that receives a value of up to n
// bytes straight from the device: block aligned, BufferSize(n) bytes long.
func NewBuffer(n int) []byte { return backend.AlignedBuffer(n) }

// BufferSize is the length of NewBuffer(n): n rounded up to the device block
// (4096). A LoadInto buffer of at least the value's size works; one of
// BufferSize(size) from NewBuffer avoids a copy.
func BufferSize(n int) int { return max(backend.DirectLen(n), backend.Alignment) }

func errResults(n int, err error) []LoadResult {
	res := make([]LoadResult, n)
	for i := range res {
		res[i].Err = err
	}
	return res
}

// readReq is one key of a load: its location and pinned bucket.
type readReq struct {
	i   int
	loc index.Location
	b   *bucketState
	op  int // index in loadJob.ops
}

// loadJob is one LoadInto or LoadAsync on its way: lookup and pinning
// (startLoad), the backend read, then verification and unpinning (finish).
type loadJob struct {
	e          *Engine
	ctx        context.Context
	keys, bufs [][]byte
	res        []LoadResult
	reqs       []readReq
	ops        []backend.ReadOp
}

// startLoad validates the keys, looks them up and pins their buckets, and
// builds the read ops. It returns nil when the engine is closed; otherwise
// the caller calls e.ops.Done after finish.
func (e *Engine) startLoad(ctx context.Context, keys, bufs [][]byte) *loadJob {
	if err := e.begin(); err != nil {
		return nil
	}
	j := &loadJob{e: e, ctx: ctx, keys: keys, bufs: bufs, res: make([]LoadResult, len(keys))}
	if bufs != nil && len(bufs) != len(keys) {
		for i := range j.res {
			j.res[i].Err = fmt.Errorf("%w: %d buffers for %d keys", ErrBufferTooSmall, len(bufs), len(keys))
		}
		return j
	}
	var look []int
	for i, k := range keys {
		if err := validKey(k); err != nil {
			j.res[i].Err = err
			continue
		}
		look = append(look, i)
	}
	j.pin(look)
	for n := range j.reqs {
		r := &j.reqs[n]
		op := backend.ReadOp{ID: r.loc.Bucket, Off: r.loc.Offset, Len: int(r.loc.StoredLen)}
		if buf := j.buf(r.i); buf != nil && bucket.Codec(r.loc.Codec) == bucket.CodecNone {
			op.Buf = buf // straight into the caller's buffer
		}
		r.op = len(j.ops)
		j.ops = append(j.ops, op)
	}
	return j
}

func (j *loadJob) buf(i int) []byte {
	if j.bufs == nil {
		return nil
	}
	return j.bufs[i]
}

// pin looks up keys[look] and takes a reader reference on each found key's
// bucket. Index lookups run without the engine lock (pebble is safe for
// concurrent use); the lock only pins the buckets found, in memory. A
// location whose bucket died in between is looked up once more.
func (j *loadJob) pin(look []int) {
	e := j.e
	for round := 0; len(look) > 0; round++ {
		keys := make([][]byte, len(look))
		for n, i := range look {
			keys[n] = j.keys[i]
		}
		locs, found, err := e.ix.GetMany(keys)
		if err != nil {
			for _, i := range look {
				j.res[i].Err = fmt.Errorf("tier: index lookup: %w", err)
			}
			return
		}
		var again []int
		e.mu.Lock()
		for n, i := range look {
			b := e.buckets[locs[n].Bucket]
			switch {
			case !found[n]:
				j.res[i].Err = fmt.Errorf("%w: %q", ErrNotFound, j.keys[i])
			case b == nil || b.dead.Load():
				if round == 0 {
					again = append(again, i) // moved or removed meanwhile
				} else {
					j.res[i].Err = fmt.Errorf("%w: %q", ErrNotFound, j.keys[i])
				}
			case j.buf(i) != nil && len(j.buf(i)) < int(locs[n].ValueLen):
				j.res[i].Err = fmt.Errorf("%w: %d bytes for the %d-byte value of %q", ErrBufferTooSmall, len(j.buf(i)), locs[n].ValueLen, j.keys[i])
			default:
				b.readers.Add(1)
				if b.notified && !b.evicting {
					e.policy.Touch(b.id)
				}
				j.reqs = append(j.reqs, readReq{i: i, loc: locs[n], b: b})
			}
		}
		e.mu.Unlock()
		look = again
	}
}

// readDone records a failure of the backend read as a whole.
func (j *loadJob) readDone(err error) {
	if err == nil {
		return
	}
	for n := range j.ops {
		if j.ops[n].Err == nil && j.ops[n].Data == nil {
			j.ops[n].Err = err
		}
	}
}

// finish verifies every value read (invariant 5), unpins the buckets and
// drops the entries that failed their checksum or whose bucket file is gone.
func (j *loadJob) finish() {
	e := j.e
	var corrupt, vanished []readReq
	for _, r := range j.reqs {
		op := &j.ops[r.op]
		if errors.Is(op.Err, backend.ErrNotFound) {
			// The bucket file vanished under the engine (deleted by hand,
			// lost with its disk): the object is a miss, and its entry
			// goes so that neither Exists nor Keys (re-registration,
			// reconcile) offer a replica this node cannot serve
			// (invariant 1).
			j.res[r.i].Err = mark(ErrNotFound, fmt.Errorf("tier: read bucket %d: %w", r.loc.Bucket, op.Err))
			vanished = append(vanished, r)
			continue
		}
		if op.Err != nil {
			j.res[r.i].Err = fmt.Errorf("tier: read bucket %d: %w", r.loc.Bucket, op.Err)
			continue
		}
		en := bucket.Entry{
			Key: j.keys[r.i], Offset: r.loc.Offset, ValueLen: r.loc.ValueLen,
			StoredLen: r.loc.StoredLen, Codec: bucket.Codec(r.loc.Codec), CRC: r.loc.CRC,
		}
		v, err := bucket.DecodeValueInto(en, op.Data, j.buf(r.i))
		if err != nil {
			j.res[r.i].Err = mark(ErrChecksum, err) // bucket's error says "checksum mismatch" already
			corrupt = append(corrupt, r)
			continue
		}
		j.res[r.i].Value = v
		e.st.objectsLoaded.Add(1)
		e.st.bytesRead.Add(int64(len(v)))
	}
	for _, r := range j.reqs {
		e.release(r.b)
	}
	if len(corrupt) > 0 {
		e.st.checksumErrors.Add(int64(len(corrupt)))
		e.dropEntries(j.ctx, corrupt, j.keys, "failed their checksum")
	}
	if len(vanished) > 0 {
		e.dropEntries(j.ctx, vanished, j.keys, "lost their bucket file")
	}
}

// release ends a Load's read of bucket b, without the engine lock, and
// deletes the file if the bucket died while being read.
func (e *Engine) release(b *bucketState) {
	if b.readers.Add(-1) == 0 && b.dead.Load() && b.deleted.CompareAndSwap(false, true) {
		e.deleteFile(b)
	}
}

// dropEntries removes index entries that cannot be served (their bytes
// failed their checksum, or their bucket file is gone: why), so the replica
// is no longer offered, and tells the owner. Each entry is removed only if
// it still names the location that was read (RemoveIfAt: a key re-committed
// meanwhile stays), in one synced batch without any engine lock; only a
// Load that met such an object waits for it.
func (e *Engine) dropEntries(ctx context.Context, bad []readReq, keys [][]byte, why string) {
	at := make([]index.KeyLoc, len(bad))
	for n, r := range bad {
		at[n] = index.KeyLoc{Key: keys[r.i], Loc: r.loc}
	}
	res, err := e.ix.RemoveIfAt(at)
	if err != nil {
		e.log.Error("tier: could not drop entries that cannot be served", "why", why, "keys", len(bad), "err", err)
		return
	}
	e.left(res.Removed)
	e.buryEmptied(res.Emptied)
	if len(res.Removed) == 0 {
		return
	}
	gone := make([][]byte, len(res.Removed))
	for n, kl := range res.Removed {
		gone[n] = kl.Key
	}
	e.log.Warn("tier: dropped objects that "+why, "keys", len(gone))
	if e.opts.OnEvict != nil {
		// After the fact: the objects are gone, whatever the answer.
		if keep, err := e.opts.OnEvict(ctx, gone); err != nil || len(keep) > 0 {
			e.log.Warn("tier: could not report dropped objects", "err", err, "kept", len(keep))
		}
	}
}
