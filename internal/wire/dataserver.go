package wire

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/keyspec"
)

// DataHandler is what a node gives the data plane (package node implements
// it). Every method is called concurrently from many connections.
type DataHandler interface {
	// WriteLimit bounds a write's payload (the segment's size).
	WriteLimit() int64
	// BeginWrite starts a write of n bytes at off of segment for the put
	// identified by token: it checks the range and claims it for that put
	// (docs/design.md invariant 8) before a byte of the payload is read,
	// and returns where the payload goes. ctx carries the write's object
	// (ObjectOf). grant is the request's write grant (empty without one),
	// valid only during the call. An error refuses the write: its payload
	// is read and dropped, nothing is stored.
	BeginWrite(ctx context.Context, segment string, off, n int64, token uint64, grant []byte) (RangeWriter, error)
	// ViewRange returns n bytes at off of segment without copying them,
	// valid until release is called. The bytes go to the socket as they
	// are; the reader checks them against the object's CRC32C. token is
	// the put token of the object the reader expects there (0: not
	// named); the handler refuses a range that holds another put's
	// object. grant is the request's read grant (empty without one),
	// valid only during the call.
	ViewRange(segment string, off, n int64, token uint64, grant []byte) (view []byte, release func(), err error)
	// OpenSSD opens key's value on the SSD tier to be sent in pieces.
	// With verify (the client's previous copy failed its CRC32C) the
	// handler checks the whole value against its index before the first
	// piece, and answers a corrupt copy with an error (CHECKSUM_MISMATCH),
	// having dropped it. grant is the request's read grant (empty without
	// one); want is the length the reader expects.
	OpenSSD(ctx context.Context, key []byte, want uint64, grant []byte, verify bool) (SSDValue, error)
	// Served is told each request's op, service time (from its header to
	// the end of its reply) and outcome.
	Served(op Op, d time.Duration, err error)
}

// SSDValue is one SSD value being sent (DataHandler.OpenSSD). The server
// calls Next until io.EOF or an error, writing each piece to the socket
// before asking for the next, then Close, from one goroutine.
type SSDValue interface {
	// Size is the value's length: the reply's payload length.
	Size() int64
	// CRC is the CRC32C the value should have, when the handler knows it
	// (the reply then carries it, FlagCRC); the handler need not have
	// checked the bytes against it.
	CRC() (crc uint32, ok bool)
	// Next returns the value's next piece, valid until the next call of
	// Next or Close; io.EOF after the last. The pieces add up to Size.
	Next() ([]byte, error)
	// Close releases the value (its buffers, its pinned bucket).
	Close()
}

// DefaultFrameTimeout is DataServerOptions.FrameTimeout's default.
const DefaultFrameTimeout = 30 * time.Second

// MinPayloadRate is the slowest a request's payload may arrive (bytes a
// second) before its frame runs out of time (DataServerOptions.FrameTimeout).
const MinPayloadRate = 1 << 20

// DataServerOptions tune a DataServer; zero values take the defaults.
type DataServerOptions struct {
	// WriteTimeout bounds writing one reply (a stalled reader must not
	// pin a segment range forever). Default 30s.
	WriteTimeout time.Duration
	// SSDReadsPerConn bounds the SSD reads of one connection in flight
	// (they run concurrently; memory reads are answered in order). Default 8.
	SSDReadsPerConn int
	// Logger; default slog.Default().
	Logger *slog.Logger
	// FrameTimeout bounds how long one request frame may take to arrive
	// once its first byte is in: its header and metadata within
	// FrameTimeout, a payload within FrameTimeout plus its length at
	// MinPayloadRate. A connection may idle between frames for ever. A
	// frame that takes longer ends its connection (ErrSlowFrame, the
	// request answered with it when its header was read) and is passed to
	// Limited. Default DefaultFrameTimeout.
	FrameTimeout time.Duration
	// Hold, when not nil, reserves n bytes of the peer's budget for an SSD
	// read before it is opened (the bytes it may hold on the node: the
	// whole value when verified, else at most StreamHold) and returns the
	// release; its error refuses the read.
	Hold func(c net.Conn, n int64) (release func(), err error)
	// StreamHold is what Hold is asked for an SSD read streamed in pieces
	// (at most its length); default 1 MiB.
	StreamHold int64
	// Limited, when not nil, is told each frame that did not arrive in
	// time (ErrSlowFrame).
	Limited func(from net.Addr, err error)
	// Authorize, when not nil, is asked after the hello whether the
	// connection's peer may use the data plane (its TLS certificate's
	// role); its error answers every request of the connection, whose
	// payload is dropped, and is logged once.
	Authorize func(net.Conn) error
}

// DataServer serves data connections for one DataHandler. Safe for
// concurrent use.
type DataServer struct {
	h    DataHandler
	opts DataServerOptions
	log  *slog.Logger

	ctx    context.Context // passed to the handler; cancelled by Close
	cancel context.CancelFunc
	busy   atomic.Int64 // requests being served
	// closing is set by Close before it sets the read deadlines that stop
	// the connections' loops (a loop that sets a frame's deadline after
	// that puts it back to now).
	closing atomic.Bool

	// mu protects conns and closed.
	mu     sync.Mutex
	conns  map[*serverConn]struct{}
	closed bool
	wg     sync.WaitGroup // ServeConn calls in progress
}

// NewDataServer returns a server for h.
func NewDataServer(h DataHandler, opts DataServerOptions) *DataServer {
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 30 * time.Second
	}
	if opts.SSDReadsPerConn <= 0 {
		opts.SSDReadsPerConn = 8
	}
	if opts.FrameTimeout <= 0 {
		opts.FrameTimeout = DefaultFrameTimeout
	}
	if opts.StreamHold <= 0 {
		opts.StreamHold = 1 << 20
	}
	s := &DataServer{h: h, opts: opts, log: opts.Logger, conns: map[*serverConn]struct{}{}}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s
}

// serverConn is one data connection being served.
type serverConn struct {
	s   *DataServer
	c   net.Conn
	br  *bufio.Reader
	raw syscall.RawConn // c's descriptor, for reads in place; nil: c has none

	// wmu serialises replies (SSD reads answer from their own
	// goroutines); it protects wbuf and wv.
	wmu  sync.Mutex
	wbuf []byte
	wv   net.Buffers

	ssd chan struct{}
	wg  sync.WaitGroup // SSD reads in flight

	denied error // DataServerOptions.Authorize's refusal, set before loop

	deadline time.Time // the read deadline of the frame being read; zero between frames (loop's goroutine only)
}

// ServeConn serves one data connection until it ends or the server
// closes; prefix holds bytes of the connection already read (the start of
// the hello, consumed by Mux to recognise it). It closes c.
func (s *DataServer) ServeConn(c net.Conn, prefix []byte) {
	sc := &serverConn{s: s, c: c, br: bufio.NewReaderSize(c, 16<<10),
		wbuf: make([]byte, 0, HeaderLen+MaxMeta), ssd: make(chan struct{}, s.opts.SSDReadsPerConn)}
	sc.raw = rawConnOf(c)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.Close()
		return
	}
	s.conns[sc] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	defer func() {
		sc.wg.Wait()
		sc.c.Close() // the socket itself once the records took over
		s.mu.Lock()
		delete(s.conns, sc)
		s.mu.Unlock()
		s.wg.Done()
	}()
	if err := sc.handshake(prefix); err != nil {
		s.log.Debug("data connection refused", "remote", c.RemoteAddr(), "err", err)
		return
	}
	if a := s.opts.Authorize; a != nil {
		if sc.denied = a(c); sc.denied != nil {
			s.log.Warn("data connection refused", "remote", c.RemoteAddr(), "err", sc.denied)
		}
	}
	if tc, ok := c.(*tlsConn); ok {
		if err := sc.records(tc); err != nil {
			s.log.Warn("data connection refused", "remote", c.RemoteAddr(), "err", err)
			return
		}
	}
	err := sc.loop()
	switch {
	case errors.Is(err, ErrRecordAuth):
		s.log.Warn("data connection closed", "remote", c.RemoteAddr(), "err", err)
	case !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed):
		s.log.Debug("data connection ended", "remote", c.RemoteAddr(), "err", err)
	}
}

// records switches a connection over TLS, its hellos exchanged, to the
// data plane's record layer (record.go). The client sends its first
// record only once it has this side's hello, so nothing beyond its hello
// may have arrived through TLS.
func (sc *serverConn) records(tc *tlsConn) error {
	if n := sc.br.Buffered(); n > 0 {
		return frameErr(ErrFrame, "wire: %d bytes over TLS after the client's hello, before it could have read this side's", n)
	}
	rc, err := newRecordConn(tc, false)
	if err != nil {
		return err
	}
	sc.s.mu.Lock() // Close reads sc.c
	sc.c = rc
	sc.s.mu.Unlock()
	sc.br = bufio.NewReaderSize(rc, 16<<10)
	return nil
}

// inflight is the number of requests being served.
func (s *DataServer) inflight() int64 { return s.busy.Load() }

// Close stops the server: idle connections are closed, a request in
// progress finishes its reply, and Close waits for them all.
func (s *DataServer) Close() {
	s.mu.Lock()
	s.closed = true
	s.closing.Store(true)
	for sc := range s.conns {
		// Stop reading requests; a reply being written still goes out.
		if cr, ok := sc.c.(interface{ CloseRead() error }); ok {
			_ = cr.CloseRead()
		} else {
			_ = sc.c.SetReadDeadline(time.Now())
		}
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.cancel()
}

func (sc *serverConn) handshake(prefix []byte) error {
	var got [HelloLen]byte
	n := copy(got[:], prefix)
	_ = sc.c.SetReadDeadline(time.Now().Add(sc.s.opts.WriteTimeout))
	if _, err := io.ReadFull(sc.br, got[n:]); err != nil {
		return fmt.Errorf("wire: reading the hello: %w", err)
	}
	_ = sc.c.SetReadDeadline(time.Time{})
	herr := checkHello(got[:])
	if herr != nil && !errors.Is(herr, errcode.ErrVersionMismatch) {
		return herr
	}
	// A client of another version gets this side's hello before the
	// connection closes, so that its refusal names both versions too.
	h := hello()
	_ = sc.c.SetWriteDeadline(time.Now().Add(sc.s.opts.WriteTimeout))
	if _, err := sc.c.Write(h[:]); err != nil {
		return err
	}
	return herr
}

// loop reads requests until the connection ends or breaks the protocol; it
// returns why (never nil).
//
// Between frames the connection may idle for ever; once a frame's first
// byte is in, the frame must arrive within its deadline (FrameTimeout,
// plus its payload at MinPayloadRate), or the connection ends
// (ErrSlowFrame).
func (sc *serverConn) loop() error {
	hb := make([]byte, HeaderLen)
	meta := make([]byte, 0, MaxMeta)
	ft := sc.s.opts.FrameTimeout
	for {
		if _, err := sc.br.Peek(1); err != nil {
			return err
		}
		sc.readDeadline(time.Now().Add(ft))
		h, m, err := ReadFrameHead(sc.br, hb, meta)
		meta = m
		if err != nil {
			return sc.slow(err, nil)
		}
		if h.PayloadLen > 0 {
			sc.readDeadline(time.Now().Add(ft + time.Duration(min(h.PayloadLen, MaxPayload)/MinPayloadRate)*time.Second))
		}
		if err := sc.serve(h, meta); err != nil {
			return sc.slow(err, &h)
		}
		sc.readDeadline(time.Time{})
	}
}

// readDeadline sets the connection's read deadline to t, unless the
// server is closing (its deadline, now, stays).
func (sc *serverConn) readDeadline(t time.Time) {
	sc.deadline = t
	_ = sc.c.SetReadDeadline(t)
	if sc.s.closing.Load() {
		_ = sc.c.SetReadDeadline(time.Now())
	}
}

// slow turns err, which ends the connection, into ErrSlowFrame when a
// frame's deadline caused it (not the server's Close): the peer is told
// (h: the request whose header was read) and Limited called.
func (sc *serverConn) slow(err error, h *Header) error {
	if sc.deadline.IsZero() || time.Now().Before(sc.deadline) || sc.s.closing.Load() {
		return err // not the frame's deadline (errors of short reads do not all wrap their cause)
	}
	what := "a frame's header"
	if h != nil {
		what = fmt.Sprintf("a %v frame of %d payload bytes", h.Op, h.PayloadLen)
	}
	serr := fmt.Errorf("wire: %s from %s did not arrive within its deadline (%v, plus the payload at %d MiB/s): %w: %w: %v",
		what, sc.c.RemoteAddr(), sc.s.opts.FrameTimeout, MinPayloadRate>>20, ErrSlowFrame, errcode.ErrPeerLimit, err)
	if h != nil {
		_ = sc.reply(h.ID, h.Op&^ReplyBit, serr, nil)
	}
	if l := sc.s.opts.Limited; l != nil {
		l(sc.c.RemoteAddr(), serr)
	}
	return serr
}

// serve answers one request whose header and metadata were read; only an
// error that ends the connection is returned.
func (sc *serverConn) serve(h Header, meta []byte) error {
	start := time.Now()
	if sc.denied != nil {
		return sc.refuse(h, sc.denied)
	}
	req, err := sc.request(h, meta)
	if err != nil {
		return sc.refuse(h, err)
	}
	if req.Op == OpReadSSD {
		verify := h.Flags&FlagVerify != 0
		release := func() {}
		if hold := sc.s.opts.Hold; hold != nil {
			n := int64(min(req.Length, uint64(sc.s.opts.StreamHold)))
			if verify {
				n = int64(min(req.Length, MaxPayload))
			}
			if release, err = hold(sc.c, n); err != nil {
				sc.s.h.Served(OpReadSSD, time.Since(start), err)
				return sc.reply(h.ID, OpReadSSD, err, nil)
			}
		}
		// meta is reused by the next frame
		kg := append(append(make([]byte, 0, len(req.Key)+len(req.Grant)), req.Key...), req.Grant...)
		key, grant := kg[:len(req.Key):len(req.Key)], kg[len(req.Key):]
		sc.s.busy.Add(1)
		sc.ssd <- struct{}{}
		sc.wg.Add(1)
		go sc.readSSD(h.ID, key, grant, req.Length, verify, start, release)
		return nil
	}
	sc.s.busy.Add(1)
	defer sc.s.busy.Add(-1)
	if req.Op == OpWrite {
		return sc.write(h, req, start)
	}
	view, release, verr := sc.s.h.ViewRange(req.Segment, int64(req.Offset), int64(req.Length), req.Token, req.Grant)
	err = sc.reply(h.ID, req.Op, verr, view)
	if release != nil {
		release()
	}
	sc.s.h.Served(req.Op, time.Since(start), verr)
	return err
}

// discardMax is the largest payload of a refused request that is read and
// dropped to keep the connection; a larger one ends it.
const discardMax = 64 << 20

// refuse answers a request that cannot be served with err. A malformed
// frame (ErrFrame) ends the connection after the answer, so that the
// client reads why rather than a reset; a well-formed request that is
// refused keeps it, its payload read and dropped.
func (sc *serverConn) refuse(h Header, err error) error {
	if errors.Is(err, ErrFrame) || h.PayloadLen > discardMax {
		_ = sc.reply(h.ID, h.Op&^ReplyBit, err, nil)
		return err
	}
	if _, derr := io.CopyN(io.Discard, sc.br, int64(h.PayloadLen)); derr != nil {
		return frameErr(ErrShortFrame, "wire: payload of a refused %v: %v", h.Op, derr)
	}
	return sc.reply(h.ID, h.Op&^ReplyBit, err, nil)
}

// request validates a request frame and decodes its metadata.
func (sc *serverConn) request(h Header, meta []byte) (Request, error) {
	if h.Op&ReplyBit != 0 {
		return Request{}, frameErr(ErrFrame, "wire: a client sent a %v", h.Op)
	}
	req, err := ParseRequest(h.Op, meta)
	if err != nil {
		return Request{}, err
	}
	switch {
	case req.Op != OpWrite && h.PayloadLen != 0:
		return Request{}, frameErr(ErrFrame, "wire: a %v request with a %d-byte payload", req.Op, h.PayloadLen)
	case req.Op == OpWrite && h.Flags&FlagCRC == 0:
		return Request{}, frameErr(ErrFrame, "wire: a write without a CRC32C")
	case req.Op == OpWrite && h.PayloadLen > uint64(sc.s.h.WriteLimit()):
		return Request{}, errcode.Errorf(errcode.InvalidParams, "wire: a write of %d bytes into a segment of %d", h.PayloadLen, sc.s.h.WriteLimit())
	}
	return req, nil
}

// write receives a write's payload straight into the range the handler
// claimed for it (no staging buffer), computing its CRC32C chunk by chunk
// as it lands, and checks it against the sender's: the one check of this
// transfer. A write that fails (wrong CRC32C, refused mid-payload) is
// aborted: the handler records nothing, and the bytes that arrived stay in
// the put's own range, where nobody reads them (the put is never
// completed). Only a transport error returns an error (the connection is
// then dropped, its write aborted).
func (sc *serverConn) write(h Header, req Request, start time.Time) error {
	n := int64(h.PayloadLen)
	ctx := sc.s.ctx
	if len(req.Key) > 0 {
		ctx = WithObject(ctx, Object{Key: string(req.Key), SoftPin: req.Pins&PinSoft != 0, HardPin: req.Pins&PinHard != 0})
	}
	w, err := sc.s.h.BeginWrite(ctx, req.Segment, int64(req.Offset), n, req.Token, req.Grant)
	if err != nil {
		sc.s.h.Served(OpWrite, time.Since(start), err)
		return sc.refuse(h, err)
	}
	got, crc, err, cerr := sc.receive(w, n)
	switch {
	case cerr != nil:
		w.Abort()
		sc.s.h.Served(OpWrite, time.Since(start), cerr)
		return frameErr(ErrShortFrame, "wire: write payload: %d of %d bytes, then %v", got, n, cerr)
	case err == nil && crc != h.CRC:
		err = BadChecksum("wire: write of %d bytes at %d: received CRC32C %08x, the sender's %08x; nothing recorded", n, req.Offset, crc, h.CRC)
	}
	if err != nil {
		w.Abort()
		if got < n { // refused mid-payload: drop the rest, keep the connection
			if n-got > discardMax {
				_ = sc.reply(h.ID, OpWrite, err, nil)
				return err
			}
			if _, derr := io.CopyN(io.Discard, sc.br, n-got); derr != nil {
				return frameErr(ErrShortFrame, "wire: payload of a refused %v: %v", h.Op, derr)
			}
		}
	} else {
		w.Commit(crc)
	}
	rerr := sc.reply(h.ID, OpWrite, err, nil)
	sc.s.h.Served(OpWrite, time.Since(start), err)
	return rerr
}

// readSSD answers one SSD read from its own goroutine: the reply's header
// goes out once the value's first piece is in, then each piece as it
// arrives, in order (the disk reads the next pieces while the socket
// sends this one). A failure before the first byte is an error reply; a
// piece that fails mid-stream cannot be announced any more, so the
// connection is closed there: the client's read ends short
// (ErrShortFrame) with nothing beyond its buffer written, and its other
// calls on the connection fail over to a new one.
func (sc *serverConn) readSSD(id uint32, key, grant []byte, want uint64, verify bool, start time.Time, release func()) {
	defer func() { release(); sc.s.busy.Add(-1); <-sc.ssd; sc.wg.Done() }()
	v, err := sc.s.h.OpenSSD(sc.s.ctx, key, want, grant, verify)
	var first []byte
	if err == nil {
		defer v.Close()
		switch {
		case v.Size() < 0 || uint64(v.Size()) != want:
			err = errcode.Errorf(errcode.ChecksumMismatch, "wire: the SSD copy of %q has %d bytes, the reader expects %d", keyspec.Show(key), v.Size(), want)
		default:
			if first, err = v.Next(); errors.Is(err, io.EOF) {
				first, err = nil, nil
			}
		}
	}
	if err != nil {
		if rerr := sc.reply(id, OpReadSSD, err, nil); rerr != nil {
			sc.c.Close() // the loop sees it and ends
		}
		sc.s.h.Served(OpReadSSD, time.Since(start), err)
		return
	}
	err = sc.stream(id, v, first)
	if err != nil {
		sc.s.log.Warn("wire: SSD read broken off mid-stream; connection closed", "key", keyspec.Show(key), "remote", sc.c.RemoteAddr(), "err", err)
		sc.c.Close() // the loop sees it and ends
	}
	sc.s.h.Served(OpReadSSD, time.Since(start), err)
}

// stream writes a read-ssd reply: the header (with the value's CRC32C when
// known) and first, then every further piece of v, each as one write. It
// holds the connection's write lock throughout (a reply's payload cannot be
// interleaved with another frame).
func (sc *serverConn) stream(id uint32, v SSDValue, first []byte) error {
	h := Header{Op: OpReadSSD | ReplyBit, ID: id, PayloadLen: uint64(v.Size())}
	if crc, ok := v.CRC(); ok {
		h.Flags, h.CRC = FlagCRC, crc
	}
	if uint64(len(first)) > h.PayloadLen {
		return fmt.Errorf("wire: the SSD value's first piece has %d bytes, the value %d", len(first), h.PayloadLen)
	}
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	b := sc.wbuf[:HeaderLen]
	h.Encode(b)
	sent := uint64(len(first))
	_ = sc.c.SetWriteDeadline(time.Now().Add(sc.s.opts.WriteTimeout))
	sc.wv = append(sc.wv[:0], b, first)
	_, err := writeFrame(sc.c, sc.wv)
	clear(sc.wv[:cap(sc.wv)])
	for err == nil && sent < h.PayloadLen {
		var p []byte
		if p, err = v.Next(); err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("wire: the SSD value ended after %d of %d bytes", sent, h.PayloadLen)
			}
			break
		}
		if sent+uint64(len(p)) > h.PayloadLen {
			err = fmt.Errorf("wire: the SSD value gave more than its %d bytes", h.PayloadLen)
			break
		}
		sent += uint64(len(p))
		_ = sc.c.SetWriteDeadline(time.Now().Add(sc.s.opts.WriteTimeout))
		_, err = sc.c.Write(p)
	}
	if err == nil && sent != h.PayloadLen {
		err = fmt.Errorf("wire: the SSD value gave %d bytes, it announced %d", sent, h.PayloadLen)
	}
	return err
}

// reply writes one reply frame: header, metadata (an error's message) and
// the payload straight from view (one writev).
func (sc *serverConn) reply(id uint32, op Op, err error, payload []byte) error {
	h := Header{Op: op | ReplyBit, ID: id}
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	b := sc.wbuf[:HeaderLen]
	if err != nil {
		h.Status = errcode.Of(err)
		msg := err.Error()
		b = append(b, msg[:min(len(msg), MaxMeta)]...)
		payload = nil
	}
	h.MetaLen = uint32(len(b) - HeaderLen)
	h.PayloadLen = uint64(len(payload))
	h.Encode(b)
	_ = sc.c.SetWriteDeadline(time.Now().Add(sc.s.opts.WriteTimeout))
	sc.wv = append(sc.wv[:0], b, payload)
	_, werr := writeFrame(sc.c, sc.wv)
	clear(sc.wv[:cap(sc.wv)])
	return werr
}
