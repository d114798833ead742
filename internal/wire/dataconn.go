package wire

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
)

// crcChunk is how much of a payload is read before its CRC32C is updated:
// the bytes are checksummed while still in cache, not in a second pass.
const crcChunk = 128 << 10

// DataConn is one data-plane connection to a node. Several calls may be in
// flight on it at once (pipelined): requests are written back to back and
// one reader goroutine matches the replies by id, reading each payload
// straight into its caller's buffer. Safe for concurrent use, except an
// own connection (DataPool.Acquire with WithCallerThread): no reader
// goroutine, one caller at a time reads its own reply (ownconn.go).
//
// A call that returns has let go of its buffer: a caller whose context
// ends while the reader is filling its buffer breaks the connection and
// waits for the reader to stop before returning. Once broken (a transport
// or protocol error, Close) every pending and later call fails with
// errcode.ErrTransferFail; DataPool replaces broken connections.
type DataConn struct {
	conn     net.Conn
	endpoint string
	br       *bufio.Reader // the reader goroutine's alone
	// raw is conn's socket for the reader's readv (readv.go); nil over TLS.
	raw syscall.RawConn
	// own is set on a connection of one caller at a time (DataPool.Acquire):
	// no reader goroutine, the caller reads its reply (awaitOwn) into
	// hb and meta, waiting on its own thread through own (ownconn.go).
	own      *ownRaw
	hb, meta []byte
	pool     *DataPool // an own connection's pool, which Release gives it back to

	// wmu serialises frame writes; it protects wbuf and wv.
	wmu  sync.Mutex
	wbuf []byte
	wv   net.Buffers

	// mu protects calls, nextID and err.
	mu     sync.Mutex
	calls  map[uint32]*call
	nextID uint32
	err    error // why the connection broke; nil while usable

	readerDone chan struct{}

	// users counts the calls holding this connection from DataPool.Acquire
	// until their Release; retiring is set once the pool replaced it
	// (its keys spent): the last Release, or the retirement when there is
	// none, closes it.
	users    atomic.Int64
	retiring atomic.Bool
}

// call is one request in flight. The reader owns its result fields until
// it signals done.
type call struct {
	op  Op
	buf [][]byte // reads: where the payload goes, in order; exactly their total length expected
	// reading is set (under DataConn.mu) while the reader fills buf.
	reading bool
	// results, written by the reader before done is signalled
	crc    uint32 // CRC32C of the payload as received (reads)
	hasCRC bool   // the reply announced a CRC, in sent
	sent   uint32
	err    error
	done   chan struct{} // capacity 1: one signal per completed call
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// DialData opens a data connection to the node at endpoint (host:port)
// and exchanges hellos; timeout and ctx bound both.
func DialData(ctx context.Context, endpoint string, timeout time.Duration) (*DataConn, error) {
	return DialDataTLS(ctx, endpoint, timeout, nil)
}

// DialDataTLS is DialData over TLS with cfg (nil: plaintext): the TLS
// handshake first, then the hello inside (the node's Mux, NewMuxTLS).
func DialDataTLS(ctx context.Context, endpoint string, timeout time.Duration, cfg *tls.Config) (*DataConn, error) {
	return dialData(ctx, endpoint, timeout, cfg, false)
}

// dialData is DialDataTLS; own makes the connection one caller's at a time
// (DataPool.Acquire) when it is plaintext: see ownconn.go.
func dialData(ctx context.Context, endpoint string, timeout time.Duration, cfg *tls.Config, own bool) (*DataConn, error) {
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "tcp", endpoint)
	if err != nil {
		return nil, errcode.Errorf(errcode.RPCFail, "wire: dial data plane of %s: %v", endpoint, err)
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	if cfg != nil {
		tc := tlsDataClient(c, cfg)
		hctx, cancel := context.WithTimeout(ctx, timeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			c.Close()
			return nil, errcode.Errorf(errcode.RPCFail, "wire: TLS handshake with the data plane of %s: %v", endpoint, err)
		}
		c = tc
	}
	// The hello is bounded by the caller's deadline too: a node that
	// accepts but never answers (a stopped process) must not hold a read
	// with a short deadline for the whole dial timeout.
	dl := time.Now().Add(timeout)
	if cd, ok := ctx.Deadline(); ok && cd.Before(dl) {
		dl = cd
	}
	_ = c.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	h := hello()
	if _, err := c.Write(h[:]); err != nil {
		c.Close()
		return nil, errcode.Errorf(errcode.RPCFail, "wire: hello to %s: %v", endpoint, err)
	}
	var got [HelloLen]byte
	if _, err := io.ReadFull(c, got[:]); err != nil {
		c.Close()
		if cfg != nil {
			// TLS 1.3: the node checks the client's certificate after the
			// client's handshake is done; its refusal arrives here.
			return nil, errcode.Errorf(errcode.RPCFail, "wire: no data-plane hello from %s over TLS (refused by the node, or not a store node's data port): %v", endpoint, err)
		}
		return nil, errcode.Errorf(errcode.RPCFail, "wire: no data-plane hello from %s (not a store node's data port?): %v", endpoint, err)
	}
	if err := checkHello(got[:]); err != nil {
		c.Close()
		return nil, fmt.Errorf("wire: %s: %w", endpoint, err)
	}
	_ = c.SetDeadline(time.Time{})
	if tc, ok := c.(*tlsConn); ok {
		// From here on, the record layer of data plane 5 (record.go).
		rc, err := newRecordConn(tc, true)
		if err != nil {
			c.Close()
			return nil, errcode.Errorf(errcode.RPCFail, "wire: data-plane records with %s: %v", endpoint, err)
		}
		c = rc
	}
	dc := &DataConn{
		conn: c, endpoint: endpoint, br: bufio.NewReaderSize(c, 16<<10), raw: rawConnOf(c),
		wbuf: make([]byte, 0, HeaderLen+MaxMeta), calls: map[uint32]*call{},
		readerDone: make(chan struct{}),
	}
	if own && cfg == nil && ownSupported && dc.raw != nil { // plaintext only: records need their reader
		dc.makeOwn()
		return dc, nil
	}
	go dc.readLoop()
	return dc, nil
}

// spent reports whether a TLS connection's record keys carried
// RetireBytes in either direction (plaintext connections never are).
func (dc *DataConn) spent() bool {
	rc, ok := dc.conn.(*recordConn)
	return ok && rc.spent()
}

// retire closes the connection once no call holds it (users): the pool has
// replaced it. Calls in flight finish on it.
func (dc *DataConn) retire() {
	dc.retiring.Store(true)
	if dc.users.Load() == 0 {
		dc.Close()
	}
}

// Release gives back a connection DataPool.Acquire returned, once the
// call made on it returned: an own connection to its pool's idle ones (or
// closed), a shared one's hold ended (the last hold on a retired one
// closes it).
func (dc *DataConn) Release() {
	if dc.own != nil {
		dc.pool.giveBack(dc)
		return
	}
	if dc.users.Add(-1) == 0 && dc.retiring.Load() {
		dc.Close()
	}
}

// Endpoint is the node address this connection reaches.
func (dc *DataConn) Endpoint() string { return dc.endpoint }

// Broken reports whether the connection can no longer carry calls.
func (dc *DataConn) Broken() bool {
	dc.mu.Lock()
	defer dc.mu.Unlock()
	return dc.err != nil
}

// Close breaks the connection: pending calls fail. It waits for the reader
// goroutine to stop.
func (dc *DataConn) Close() error {
	dc.fail(errcode.Errorf(errcode.TransferFail, "wire: data connection to %s closed", dc.endpoint))
	<-dc.readerDone
	return nil
}

// fail marks the connection broken with err (the first reason wins) and
// closes the socket, which stops the reader and any writer.
func (dc *DataConn) fail(err error) {
	dc.mu.Lock()
	if dc.err == nil {
		dc.err = err
		dc.conn.Close()
	}
	dc.mu.Unlock()
}

// Write stores value at off of segment on the node for the put token; crc
// is value's CRC32C, which the node checks once as the bytes land in the
// range the put claimed: a mismatch fails the write, and the node records
// nothing of it. The write carries no grant: a node with a grant secret
// refuses it (WriteParts passes one).
func (dc *DataConn) Write(ctx context.Context, segment string, off int64, value []byte, crc uint32, token uint64) error {
	return dc.WriteParts(ctx, segment, off, [][]byte{value}, crc, token, nil)
}

// WriteParts is Write of the concatenation of parts (crc is its CRC32C),
// sent straight from the parts with one writev (gather): no copy into one
// buffer. grant is the range's write grant (masterapi.Replica.Grant of
// PutStart's answer; nil without one), made for the key ctx carries
// (WithObject).
func (dc *DataConn) WriteParts(ctx context.Context, segment string, off int64, parts [][]byte, crc uint32, token uint64, grant []byte) error {
	req := Request{Op: OpWrite, Segment: segment, Offset: uint64(off), Token: token, Grant: grant}
	if o, ok := ObjectOf(ctx); ok {
		// The object the bytes are, for the node's record of its DRAM
		// objects (re-registration at a new master, docs/ha.md).
		req.Key = []byte(o.Key)
		if o.SoftPin {
			req.Pins |= PinSoft
		}
		if o.HardPin {
			req.Pins |= PinHard
		}
	}
	c := callPool.Get().(*call)
	c.op = OpWrite
	err := dc.roundTrip(ctx, &req, parts, crc, c)
	callPool.Put(c)
	return err
}

// ReadRange reads len(buf) bytes at off of segment into buf and checks
// them against crc, the object's CRC32C from its lookup: the one check of
// this transfer. Nothing is written beyond len(buf); on error buf's
// contents are undefined.
// The read carries no grant: a node with a grant secret refuses it
// (ReadRangeParts passes one).
func (dc *DataConn) ReadRange(ctx context.Context, segment string, off int64, buf []byte, crc uint32) error {
	return dc.ReadRangeParts(ctx, segment, off, [][]byte{buf}, crc, nil)
}

// ReadRangeParts is ReadRange into parts in order (scatter): the range is
// their total length, read from the socket straight into each part, one
// CRC32C over the whole. grant is the replica's read grant
// (masterapi.Replica.Grant; nil without one).
func (dc *DataConn) ReadRangeParts(ctx context.Context, segment string, off int64, parts [][]byte, crc uint32, grant []byte) error {
	return dc.ReadObjectParts(ctx, segment, off, 0, parts, crc, grant)
}

// ReadObjectParts is ReadRangeParts of the object written by the put
// token (masterapi.Replica.PutToken): the node refuses the read
// (REPLICA_IS_GONE) when the range no longer holds that put's object,
// even if another object of the same length now starts there. token 0
// names no put (ReadRangeParts).
func (dc *DataConn) ReadObjectParts(ctx context.Context, segment string, off int64, token uint64, parts [][]byte, crc uint32, grant []byte) error {
	req := Request{Op: OpReadRange, Segment: segment, Offset: uint64(off), Length: uint64(partsLen(parts)), Token: token, Grant: grant}
	_, err := dc.readOnce(ctx, &req, parts, crc)
	return err
}

// ReadSSD reads key's value from the node's SSD tier into buf, which must
// be exactly the object's size, and checks it against crc (the object's
// CRC32C from its lookup): the one check of the transfer, the node sends
// its SSD bytes unchecked. A node whose copy has another size answers
// errcode.ErrChecksumMismatch. When the bytes fail the check although the
// node's index records the object's CRC (its copy is the right version:
// the bytes were damaged on its disk or on the way), the read is asked
// once more with FlagVerify: the node then checks its copy before sending
// it, and drops a corrupt one (invariant 5), answering CHECKSUM_MISMATCH.
// The read carries no grant (ReadSSDParts passes one).
func (dc *DataConn) ReadSSD(ctx context.Context, key []byte, buf []byte, crc uint32) error {
	return dc.ReadSSDParts(ctx, key, [][]byte{buf}, crc, nil)
}

// ReadSSDParts is ReadSSD into parts in order (scatter); their total
// length must be the object's size. grant is the replica's read grant
// (nil without one).
func (dc *DataConn) ReadSSDParts(ctx context.Context, key []byte, parts [][]byte, crc uint32, grant []byte) error {
	req := Request{Op: OpReadSSD, Key: key, Length: uint64(partsLen(parts)), Grant: grant}
	again, err := dc.readOnce(ctx, &req, parts, crc)
	if again {
		req.Verify = true
		_, err = dc.readOnce(ctx, &req, parts, crc)
	}
	return err
}

// readOnce is one read call; again reports a read-ssd whose bytes failed
// the check while the node announced the object's CRC (worth asking again
// with FlagVerify).
func (dc *DataConn) readOnce(ctx context.Context, req *Request, buf [][]byte, crc uint32) (again bool, err error) {
	c := callPool.Get().(*call)
	c.op, c.buf = req.Op, buf
	err = dc.roundTrip(ctx, req, nil, 0, c)
	if err == nil {
		err = dc.checkRead(c, crc)
		// A read-ssd whose bytes failed the check although the node
		// announced the object's CRC: worth asking again with FlagVerify.
		again = err != nil && req.Op == OpReadSSD && !req.Verify && c.hasCRC && c.sent == crc
	}
	c.buf = nil
	callPool.Put(c)
	return again, err
}

// RangeRead is one read of a ReadRanges call: Buf is filled with
// len(Buf) bytes at Offset of Segment and checked against CRC; Err is its
// result. When Parts is set, the range is scattered over Parts in order
// instead (their total length), and Buf is ignored.
type RangeRead struct {
	Segment string
	Offset  int64
	Token   uint64 // the put token of the object read (ReadObjectParts); 0: not named
	Grant   []byte // the replica's read grant (masterapi.Replica.Grant), if any
	Buf     []byte
	Parts   [][]byte
	CRC     uint32
	Err     error
}

// parts is where r's bytes go.
func (r *RangeRead) parts() [][]byte {
	if r.Parts != nil {
		return r.Parts
	}
	return [][]byte{r.Buf}
}

// ReadRanges is ReadRange for many ranges at once: every request is
// written before the first reply is awaited (one write for all of them),
// so the node streams the replies back to back, each straight into its
// buffer and checked against its CRC32C. It returns when every read has
// ended, each with its own Err; the guarantees of ReadRange hold for each
// buffer.
func (dc *DataConn) ReadRanges(ctx context.Context, rs []RangeRead) {
	if err := ctx.Err(); err != nil {
		for i := range rs {
			rs[i].Err = errcode.Errorf(errcode.ContextCanceled, "wire: %v to %s: %v", OpReadRange, dc.endpoint, err)
		}
		return
	}
	calls := make([]*call, len(rs))
	first, err := dc.register(calls, func(i int) [][]byte { return rs[i].parts() })
	if err != nil {
		for i := range rs {
			rs[i].Err = err
		}
		return
	}
	if err := dc.sendReads(ctx, first, rs); err != nil {
		dc.fail(err)
	}
	for i, c := range calls {
		err := dc.await(ctx, first+uint32(i), c)
		if err == nil {
			err = dc.checkRead(c, rs[i].CRC)
		}
		rs[i].Err = err
		c.buf = nil
		callPool.Put(c)
	}
}

// register enters len(calls) read calls under consecutive ids from the
// returned first, their buffers given by buf.
func (dc *DataConn) register(calls []*call, buf func(i int) [][]byte) (uint32, error) {
	dc.mu.Lock()
	defer dc.mu.Unlock()
	if dc.err != nil {
		return 0, dc.err
	}
	first := dc.nextID + 1
	for i := range calls {
		c := callPool.Get().(*call)
		c.err, c.crc, c.hasCRC, c.sent, c.reading = nil, 0, false, 0, false
		c.op, c.buf = OpReadRange, buf(i)
		dc.nextID++
		dc.calls[dc.nextID] = c
		calls[i] = c
	}
	return first, nil
}

// sendReads writes the read requests of rs, ids from first, in one write.
func (dc *DataConn) sendReads(ctx context.Context, first uint32, rs []RangeRead) error {
	dc.wmu.Lock()
	defer dc.wmu.Unlock()
	var zero [HeaderLen]byte
	b := dc.wbuf[:0]
	for i, r := range rs {
		req := Request{Op: OpReadRange, Segment: r.Segment, Offset: uint64(r.Offset), Length: uint64(len(r.Buf)), Token: r.Token, Grant: r.Grant}
		if r.Parts != nil {
			req.Length = uint64(partsLen(r.Parts))
		}
		at := len(b)
		b = req.AppendMeta(append(b, zero[:]...))
		h := Header{Op: OpReadRange, ID: first + uint32(i), MetaLen: uint32(len(b) - at - HeaderLen)}
		h.Encode(b[at:])
	}
	dc.wbuf = b[:0]
	dl, _ := ctx.Deadline()
	_ = dc.conn.SetWriteDeadline(dl)
	if _, err := dc.conn.Write(b); err != nil {
		return errcode.Errorf(errcode.TransferFail, "wire: sending %d %v requests to %s: %v", len(rs), OpReadRange, dc.endpoint, err)
	}
	return nil
}

// checkRead compares the read c received with crc, the object's CRC32C:
// the CRC the reply announced, if any, and the one computed as it arrived.
func (dc *DataConn) checkRead(c *call, crc uint32) error {
	switch {
	case c.hasCRC && c.sent != crc:
		return BadChecksum("wire: %v from %s: the node's copy has CRC32C %08x, the object %08x", c.op, dc.endpoint, c.sent, crc)
	case c.crc != crc:
		return BadChecksum("wire: %v from %s: %d bytes with CRC32C %08x, the object has %08x", c.op, dc.endpoint, partsLen(c.buf), c.crc, crc)
	}
	return nil
}

// roundTrip sends one request and waits for its reply. c is registered
// under a fresh id before the request is written; on return the reader no
// longer touches c (it is either completed or was never answered and is
// forgotten).
func (dc *DataConn) roundTrip(ctx context.Context, req *Request, payload [][]byte, crc uint32, c *call) error {
	c.err, c.crc, c.hasCRC, c.sent, c.reading = nil, 0, false, 0, false
	if err := ctx.Err(); err != nil {
		// Before anything is written: a deadline already past would break
		// the connection for every other call on it.
		return errcode.Errorf(errcode.ContextCanceled, "wire: %v to %s: %v", req.Op, dc.endpoint, err)
	}
	dc.mu.Lock()
	if dc.err != nil {
		err := dc.err
		dc.mu.Unlock()
		return err
	}
	dc.nextID++
	id := dc.nextID
	dc.calls[id] = c
	dc.mu.Unlock()

	if err := dc.send(ctx, id, req, payload, crc); err != nil {
		dc.fail(err)
	}
	return dc.await(ctx, id, c)
}

// await waits for the reply to call c (id), or for ctx to end: then an
// unanswered call is forgotten, and a call whose payload is arriving
// breaks the connection and is waited for (its buffer must not be written
// once this returns).
func (dc *DataConn) await(ctx context.Context, id uint32, c *call) error {
	if dc.own != nil {
		return dc.awaitOwn(ctx, c)
	}
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
	}
	dc.mu.Lock()
	if dc.calls[id] == c && !c.reading {
		// Not answered yet: forget it; the reader discards a late reply.
		delete(dc.calls, id)
		dc.mu.Unlock()
		return errcode.Errorf(errcode.ContextCanceled, "wire: %v to %s: %v", c.op, dc.endpoint, ctx.Err())
	}
	reading := dc.calls[id] == c
	dc.mu.Unlock()
	if reading {
		// The reader is filling the caller's buffer: stop it, so that
		// nothing is written there once this call returns.
		dc.fail(errcode.Errorf(errcode.ContextCanceled, "wire: %v to %s abandoned mid-payload: %v", c.op, dc.endpoint, ctx.Err()))
	}
	<-c.done
	return c.err
}

// send writes one request frame: header and metadata from wbuf, then the
// payload straight from the caller's memory, its parts in order (one
// writev).
func (dc *DataConn) send(ctx context.Context, id uint32, req *Request, payload [][]byte, crc uint32) error {
	dc.wmu.Lock()
	defer dc.wmu.Unlock()
	b := req.AppendMeta(dc.wbuf[:HeaderLen])
	h := Header{Op: req.Op, ID: id, MetaLen: uint32(len(b) - HeaderLen), PayloadLen: uint64(partsLen(payload))}
	if req.Op == OpWrite {
		h.Flags, h.CRC = FlagCRC, crc
	}
	if req.Verify && req.Op == OpReadSSD {
		h.Flags |= FlagVerify
	}
	h.Encode(b)
	dc.wbuf = b[:0]
	// A context without a deadline clears any earlier one; callers that
	// need a bound on a stalled peer give their context a deadline.
	dl, _ := ctx.Deadline()
	_ = dc.conn.SetWriteDeadline(dl)
	dc.wv = append(append(dc.wv[:0], b), payload...) // empty parts are skipped by writev
	_, err := writeFrame(dc.conn, dc.wv)
	clear(dc.wv[:cap(dc.wv)]) // keep no reference to the caller's memory
	if err != nil {
		return errcode.Errorf(errcode.TransferFail, "wire: sending %v to %s: %v", req.Op, dc.endpoint, err)
	}
	return nil
}

// readLoop reads replies until the connection breaks, placing each
// payload in its call's buffer.
func (dc *DataConn) readLoop() {
	defer close(dc.readerDone)
	hb := make([]byte, HeaderLen)
	meta := make([]byte, 0, MaxMeta)
	for {
		h, m, err := ReadFrameHead(dc.br, hb, meta)
		meta = m
		if err == nil { // (a request frame fails reply's op check)
			err = dc.reply(h, meta)
		}
		if err != nil {
			dc.broken(err)
			return
		}
	}
}

// reply handles one reply frame whose header and metadata were read.
func (dc *DataConn) reply(h Header, meta []byte) error {
	dc.mu.Lock()
	c := dc.calls[h.ID]
	if c == nil {
		dc.mu.Unlock()
		// The caller gave up on it (context ended): drop the payload.
		if _, err := io.CopyN(io.Discard, dc.br, int64(h.PayloadLen)); err != nil {
			return frameErr(ErrShortFrame, "wire: %s: connection ended inside an abandoned %v payload: %v", dc.endpoint, h.Op, err)
		}
		return nil
	}
	if h.Op != c.op|ReplyBit {
		dc.mu.Unlock()
		return frameErr(ErrFrame, "wire: %s answered a %v with a %v", dc.endpoint, c.op, h.Op)
	}
	if h.Status != errcode.OK {
		dc.mu.Unlock()
		if h.PayloadLen != 0 {
			return frameErr(ErrFrame, "wire: %s: an error reply with a %d-byte payload", dc.endpoint, h.PayloadLen)
		}
		dc.complete(h.ID, c, errcode.WithMessage(h.Status, string(meta)))
		return nil
	}
	if want := partsLen(c.buf); h.PayloadLen != uint64(want) {
		dc.mu.Unlock()
		err := frameErr(ErrFrame, "wire: %s announced a %v of %d bytes, %d were asked for", dc.endpoint, c.op, h.PayloadLen, want)
		dc.fail(err) // broken before its caller wakes: it must not be handed out again
		dc.complete(h.ID, c, err)
		return err
	}
	c.reading = true
	dc.mu.Unlock()
	c.hasCRC, c.sent = h.Flags&FlagCRC != 0, h.CRC
	crc, err := readPartsCRC(dc.br, dc.raw, c.buf)
	if err != nil {
		why := ""
		if c.op == OpReadSSD {
			why = " (the node broke off its SSD read, a disk read failed there, or the connection dropped)"
		}
		err = frameErr(ErrShortFrame, "wire: %s: %v reply: %v%s", dc.endpoint, c.op, err, why)
		dc.fail(err) // broken before its caller wakes: it must not be handed out again
		dc.complete(h.ID, c, err)
		return err
	}
	c.crc = crc
	dc.complete(h.ID, c, nil)
	return nil
}

// partsLen is the total length of parts.
func partsLen(parts [][]byte) int64 {
	var n int64
	for _, p := range parts {
		n += int64(len(p))
	}
	return n
}

// complete ends call c with err and wakes its caller, unless the caller
// gave up on it meanwhile (then c may already serve another request).
func (dc *DataConn) complete(id uint32, c *call, err error) {
	dc.mu.Lock()
	mine := dc.calls[id] == c
	if mine {
		delete(dc.calls, id)
		c.reading = false
	}
	dc.mu.Unlock()
	if mine {
		c.err = err
		c.done <- struct{}{}
	}
}

// broken fails the connection and every call still waiting on it.
func (dc *DataConn) broken(err error) {
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		err = errcode.Errorf(errcode.TransferFail, "wire: data connection to %s closed: %v", dc.endpoint, err)
	}
	dc.fail(err)
	dc.mu.Lock()
	err = dc.err
	pending := dc.calls
	dc.calls = map[uint32]*call{}
	dc.mu.Unlock()
	for _, c := range pending {
		c.err = err
		c.done <- struct{}{}
	}
}
