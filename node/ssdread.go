package node

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/wire"
	"github.com/tierstore/tierstore/tier"
)

// SSD reads are streamed: the value is read in ssdChunk pieces, up to
// ssdWindow of them in flight through the tier's read path (one shared
// io_uring reactor with the uring backend), and each piece goes on (to the
// socket, or into the in-process caller's buffer) as soon as it and the
// ones before it are in. The pieces live in page-aligned buffers from
// chunkPool, so the device reads straight into them (O_DIRECT) and a read
// allocates no value-sized memory in steady state (docs/format/dataplane.md).
const (
	ssdChunk  = 256 << 10
	ssdWindow = 4
)

// chunkPool holds tier.NewBuffer(ssdChunk) buffers shared by every stream
// of the process; a stream holds at most ssdWindow of them.
var chunkPool = chunkFreeList{max: maxFreeChunks}

// maxFreeChunks bounds the idle buffers kept (16 MiB): enough for 16
// streams at once; beyond, buffers are made and dropped.
const maxFreeChunks = 64

// chunkFreeList is a bounded free list of piece buffers. Unlike a
// sync.Pool it keeps its buffers across garbage collections, so a node
// that serves SSD reads allocates none in steady state.
type chunkFreeList struct {
	max  int
	mu   sync.Mutex // protects free
	free []*[]byte
	made atomic.Int64 // buffers made so far (tests: reuse)
}

// Get returns a buffer of ssdChunk bytes, page aligned.
func (l *chunkFreeList) Get() *[]byte {
	l.mu.Lock()
	if n := len(l.free); n > 0 {
		b := l.free[n-1]
		l.free[n-1] = nil
		l.free = l.free[:n-1]
		l.mu.Unlock()
		return b
	}
	l.mu.Unlock()
	l.made.Add(1)
	b := tier.NewBuffer(ssdChunk)
	return &b
}

// Put gives a buffer from Get back.
func (l *chunkFreeList) Put(b *[]byte) {
	l.mu.Lock()
	if len(l.free) < l.max {
		l.free = append(l.free, b)
	}
	l.mu.Unlock()
}

// StreamTier is the streamed-read capability of an SSDTier (*tier.Engine
// has it): OpenReader pins one object and reads it in ranges, so the data
// plane sends an SSD value piece by piece while later pieces are still
// being read, and the receiver checks the CRC32C once. A tier without it
// loses that: every remote SSD read is read whole through Load (and
// checked by the tier) before its first byte leaves, so the whole value
// sits in the node's memory and the first byte waits for the last one.
type StreamTier interface {
	OpenReader(ctx context.Context, key []byte) (*tier.Reader, error)
}

// ssdValue is one SSD read on its way (wire.SSDValue): a stream of pieces,
// or a whole value the tier already checked.
type ssdValue interface {
	wire.SSDValue
	// corrupt reports that the bytes read failed the value's CRC32C: the
	// tier drops the entry and the master is told (invariant 5).
	corrupt(ctx context.Context)
}

// openSSD opens key's value on the node's SSD for reading. Unless verify
// is set, the value is streamed unchecked: its CRC32C (from the tier's
// index, ssdValue.CRC) is checked once by whoever receives the bytes
// (docs/design.md, one check per transfer). With verify, or for a value
// that cannot be read in ranges (stored compressed, or a tier without
// OpenReader), the tier reads it whole and checks it itself, dropping a
// corrupt entry.
func (n *Node) openSSD(ctx context.Context, key []byte, verify bool) (ssdValue, error) {
	if n.tier == nil {
		return nil, errcode.Errorf(errcode.UnableOffload, "node: node %s has no SSD tier", n.name)
	}
	if seq := n.removedOnSSDPending(key); seq > 0 {
		return nil, errcode.Errorf(errcode.ObjectNotFound, "node: %q was removed (removal log entry %d, applied to the DRAM records, not yet to the SSD)", key, seq)
	}
	if v, ok := n.joinPromotion(ctx, key); ok {
		return &wholeValue{v: v}, nil // loaded once for the promotion and this read
	}
	if rt, ok := n.tier.(StreamTier); ok && !verify {
		r, err := rt.OpenReader(ctx, key)
		if err == nil {
			return newSSDStream(ctx, n, r), nil
		}
		if !errors.Is(err, tier.ErrCompressed) {
			return nil, toCode(err)
		}
	}
	v, err := n.readSSD(ctx, key)
	if err != nil {
		return nil, err
	}
	return &wholeValue{v: v}, nil
}

// wholeValue is a value the tier read whole and checked against its index.
type wholeValue struct {
	v    []byte
	done bool
}

func (w *wholeValue) Size() int64 { return int64(len(w.v)) }

// CRC: none announced; the tier checked the bytes, the receiver checks
// them against the object's CRC32C as usual.
func (w *wholeValue) CRC() (uint32, bool) { return 0, false }

func (w *wholeValue) Next() ([]byte, error) {
	if w.done || len(w.v) == 0 {
		return nil, io.EOF
	}
	w.done = true
	return w.v, nil
}

func (w *wholeValue) Close()                  {}
func (w *wholeValue) corrupt(context.Context) {} // the tier checked (and dropped) already

// chunk is one piece read (or failed).
type chunk struct {
	bp   *[]byte
	data []byte
	err  error
}

// ssdStream reads a value in ssdChunk pieces through a tier.Reader, with
// up to ssdWindow pieces in flight. Not safe for concurrent use: one
// goroutine calls Next until io.EOF or an error, then Close.
type ssdStream struct {
	ctx context.Context
	n   *Node
	r   *tier.Reader

	nchunks        int
	issued, handed int                   // pieces started / returned by Next
	slots          [ssdWindow]chan chunk // piece i completes into slots[i%ssdWindow]
	prev           *[]byte               // buffer of the piece Next returned last
	err            error
}

func newSSDStream(ctx context.Context, n *Node, r *tier.Reader) *ssdStream {
	s := &ssdStream{ctx: ctx, n: n, r: r, nchunks: int((r.Size() + ssdChunk - 1) / ssdChunk)}
	for i := range s.slots {
		s.slots[i] = make(chan chunk, 1)
	}
	for range min(ssdWindow, s.nchunks) {
		s.issue(chunkPool.Get())
	}
	return s
}

// issue starts the next piece into bp, or gives bp back when every piece
// has been started.
func (s *ssdStream) issue(bp *[]byte) {
	if s.issued >= s.nchunks {
		chunkPool.Put(bp)
		return
	}
	off := int64(s.issued) * ssdChunk
	ln := int(min(ssdChunk, s.r.Size()-off))
	slot := s.slots[s.issued%ssdWindow]
	s.issued++
	s.r.ReadAt(s.ctx, *bp, off, ln, func(data []byte, err error) {
		slot <- chunk{bp: bp, data: data, err: err}
	})
}

func (s *ssdStream) Size() int64 { return s.r.Size() }

// CRC is the value's CRC32C from the tier's index, not checked on the
// node: the receiver's check is the transfer's one check.
func (s *ssdStream) CRC() (uint32, bool) { return s.r.CRC(), true }

// Next returns the value's next piece, valid until the next call of Next
// or Close; io.EOF after the last one. A piece that fails ends the stream
// with its error.
func (s *ssdStream) Next() ([]byte, error) {
	if s.err != nil {
		return nil, s.err
	}
	if s.prev != nil {
		s.issue(s.prev) // the caller is done with it: it carries the next piece
		s.prev = nil
	}
	if s.handed >= s.nchunks {
		return nil, io.EOF
	}
	c := <-s.slots[s.handed%ssdWindow]
	s.handed++
	if c.err != nil {
		chunkPool.Put(c.bp)
		s.err = toCode(c.err)
		return nil, s.err
	}
	s.prev = c.bp
	return c.data, nil
}

// corrupt drops the entry read (the tier, once) and the master's replica.
func (s *ssdStream) corrupt(ctx context.Context) {
	s.r.Corrupt(ctx)
	s.n.dropSSDReplica(ctx, s.r.Key())
}

// Close waits for the pieces still in flight, gives every buffer back and
// unpins the bucket.
func (s *ssdStream) Close() {
	for ; s.handed < s.issued; s.handed++ {
		c := <-s.slots[s.handed%ssdWindow]
		chunkPool.Put(c.bp)
	}
	if s.prev != nil {
		chunkPool.Put(s.prev)
		s.prev = nil
	}
	s.r.Close()
}

// readSSDStream copies key's value from SSD into buf (exactly its size)
// piece by piece, computing the CRC32C as each piece is copied, and
// checks it against the CRC the tier's index records: the one check of an
// in-process SSD read. A mismatch drops the entry (invariant 5).
func (n *Node) readSSDStream(ctx context.Context, key []byte, parts [][]byte) (uint32, error) {
	v, err := n.openSSD(ctx, key, false)
	if err != nil {
		return 0, err
	}
	defer v.Close()
	size := partsLen(parts)
	if v.Size() != size {
		return 0, errcode.Errorf(errcode.ChecksumMismatch, "node: the SSD copy of %q has %d bytes, the reader expects %d", key, v.Size(), size)
	}
	var crc uint32
	var off int64
	dst := partsCursor{parts: parts}
	for {
		p, err := v.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, err
		}
		if off+int64(len(p)) > size {
			return 0, errcode.Errorf(errcode.InternalError, "node: the SSD read of %q gave more than its %d bytes", key, size)
		}
		crc = dst.copyCRC(crc, p)
		off += int64(len(p))
	}
	if off != size {
		return 0, errcode.Errorf(errcode.InternalError, "node: the SSD read of %q gave %d of its %d bytes", key, off, size)
	}
	if want, ok := v.CRC(); ok && crc != want {
		v.corrupt(ctx)
		return 0, errcode.Errorf(errcode.ChecksumMismatch, "node: the SSD copy of %q has CRC32C %08x, its index says %08x; dropped", key, crc, want)
	}
	return crc, nil
}
