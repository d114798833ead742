package tier

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/bucket"
	"github.com/tierstore/tierstore/index"
)

// ErrCompressed: OpenReader found the object stored compressed; its bytes
// can only be read whole (Load, LoadInto), not in ranges.
var ErrCompressed = errors.New("tier: object stored compressed (read it whole)")

// Reader reads one object's value in ranges, straight from its bucket
// file, for a caller that streams it (a node sending an SSD hit to a
// remote client in pieces, docs/format/dataplane.md). The object's bucket
// stays pinned from OpenReader until Close: it is neither deleted nor its
// file removed under the reader (invariant 7), whatever eviction, Remove
// or a re-offload do meanwhile.
//
// A Reader does NOT verify the value's CRC32C: the caller takes that over
// (it computes the CRC of what it read, or its receiver does, and compares
// it with CRC, the one check of the transfer). A caller that finds a
// mismatch calls Corrupt, which drops the entry as Load does on a mismatch
// (invariant 5). Use Load or LoadInto to have the tier check.
//
// ReadAt may be called concurrently (several ranges in flight); Close
// must be called once, after every ReadAt has called back.
type Reader struct {
	e   *Engine
	key []byte
	loc index.Location
	b   *bucketState

	read    atomic.Int64 // bytes read successfully
	dropped atomic.Bool  // Corrupt or a vanished file dropped the entry
	closed  atomic.Bool
}

// OpenReader looks key up and pins its bucket. It fails with ErrNotFound,
// ErrInvalidKey, ErrClosed, ErrCompressed (the object must be read whole),
// or an index error. The caller must Close the Reader.
func (e *Engine) OpenReader(ctx context.Context, key []byte) (*Reader, error) {
	j := e.startLoad(ctx, [][]byte{key}, nil)
	if j == nil {
		return nil, ErrClosed
	}
	if j.res[0].Err != nil {
		e.ops.Done()
		return nil, j.res[0].Err
	}
	r := j.reqs[0]
	if bucket.Codec(r.loc.Codec) != bucket.CodecNone {
		e.release(r.b)
		e.ops.Done()
		return nil, fmt.Errorf("%w: %q", ErrCompressed, key)
	}
	return &Reader{e: e, key: key, loc: r.loc, b: r.b}, nil
}

// Key is the key read (the caller's slice).
func (r *Reader) Key() []byte { return r.key }

// Size is the value's length in bytes.
func (r *Reader) Size() int64 { return int64(r.loc.ValueLen) }

// CRC is the value's CRC32C as the index records it: what the bytes read
// must hash to.
func (r *Reader) CRC() uint32 { return r.loc.CRC }

// ReadAt starts reading n bytes of the value at off into buf (at least n
// bytes; a buffer from NewBuffer(n) with off a multiple of 4096 receives
// them straight from the device) and returns at once; done runs exactly
// once, on another goroutine, with buf[:n] or an error. buf belongs to the
// engine until done runs. Reads of one Reader share the device queue with
// every other read of the engine (with the io_uring backend, one reactor
// keeps them in flight).
func (r *Reader) ReadAt(ctx context.Context, buf []byte, off int64, n int, done func([]byte, error)) {
	switch {
	case r.closed.Load():
		go done(nil, fmt.Errorf("%w: reader of %q used after Close", ErrClosed, r.key))
		return
	case off < 0 || n < 0 || off+int64(n) > r.Size():
		go done(nil, fmt.Errorf("tier: read of %d bytes at %d of the %d-byte value of %q: %w", n, off, r.Size(), r.key, backend.ErrBadRange))
		return
	case len(buf) < n:
		go done(nil, fmt.Errorf("%w: %d bytes for a read of %d of %q", ErrBufferTooSmall, len(buf), n, r.key))
		return
	}
	ops := []backend.ReadOp{{ID: r.loc.Bucket, Off: r.loc.Offset + off, Len: n, Buf: buf}}
	backend.StartRead(ctx, r.e.be, ops, func(err error) {
		op := &ops[0]
		if err == nil {
			err = op.Err
		}
		if err != nil {
			if errors.Is(err, backend.ErrNotFound) {
				// The bucket file vanished under the engine: as in Load,
				// the entry goes (invariant 1).
				r.drop(ctx, "lost their bucket file")
				err = mark(ErrNotFound, fmt.Errorf("tier: read bucket %d: %w", r.loc.Bucket, err))
			} else {
				err = fmt.Errorf("tier: read bucket %d: %w", r.loc.Bucket, err)
			}
			done(nil, err)
			return
		}
		r.read.Add(int64(n))
		done(op.Data, nil)
	})
}

// Corrupt tells the engine that the value read failed its CRC32C: the
// entry is dropped from the index (if it still names the location read)
// and the owner told through OnEvict, as Load does on a mismatch
// (invariant 5). Only the first call of a Reader counts (one checksum
// error in Stats, one index batch); the index drops an entry once
// whatever the Readers that report it. Call it before Close.
func (r *Reader) Corrupt(ctx context.Context) {
	if r.closed.Load() {
		r.e.log.Error("tier: Reader.Corrupt after Close; the entry is left to the next check", "key", fmt.Sprintf("%q", r.key))
		return
	}
	if r.dropped.Swap(true) {
		return
	}
	r.e.st.checksumErrors.Add(1)
	r.drop(ctx, "failed their checksum")
}

// drop removes the entry if it still names the location read.
func (r *Reader) drop(ctx context.Context, why string) {
	r.dropped.Store(true)
	r.e.dropEntries(ctx, []readReq{{i: 0, loc: r.loc, b: r.b}}, [][]byte{r.key}, why)
}

// Close unpins the bucket. Every ReadAt must have called back. A value
// read whole counts as one object loaded (Stats.ObjectsLoaded). Calls
// after the first do nothing.
func (r *Reader) Close() {
	if r.closed.Swap(true) {
		return
	}
	n := r.read.Load()
	if n >= r.Size() && !r.dropped.Load() {
		r.e.st.objectsLoaded.Add(1)
	}
	r.e.st.bytesRead.Add(n)
	r.e.release(r.b)
	r.e.ops.Done()
}
