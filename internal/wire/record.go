package wire

import (
	"crypto/cipher"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"sync/atomic"

	"github.com/tierstore/tierstore/internal/aesgcm"
	"github.com/tierstore/tierstore/internal/errcode"
)

// The data plane's record layer (data plane version 5,
// docs/format/dataplane.md, "Records"). Over TLS, only the handshake and
// the two hellos travel as TLS records; then each side derives two AES-GCM
// keys and IVs from the session (tls.ConnectionState.ExportKeyingMaterial,
// label recordLabel), one per direction, and every further byte travels on
// the socket itself as records of its own:
//
//	length u32 (little-endian, 1..maxRecord) | ciphertext (length bytes) | tag (16 bytes)
//
// sealed with the direction's key, the 4-byte length as additional data,
// and the nonce IV XOR the record's sequence number (a 64-bit counter per
// direction, from 0, big-endian in the nonce's last 8 bytes, as TLS 1.3
// does). A record that fails to open (tampered, replayed, reordered,
// dropped, or sealed with another key) or announces a length out of range
// ends the connection: ErrRecordAuth.
//
// Why: crypto/tls decrypts into its own buffer and copies out, and copies
// plaintext into a record before sealing it; here a reader opens a record
// from its scratch buffer straight into the caller's buffer (a payload's
// range, a write's range in the node's memory), and a writer seals from
// the caller's memory (the node's segment) straight into a staging buffer
// written to the socket, several records a write (docs/benchmarks.md,
// "Mutual TLS", the record layer).
const (
	// maxRecord bounds a record's plaintext. Writers cut payloads in
	// records of this size from the payload's start, which crcChunk is a
	// multiple of: a reader of crcChunk bytes at a time opens whole
	// records into its buffer.
	maxRecord = 64 << 10
	recHdrLen = 4
	tagLen    = 16
	// recStage is the staging buffer of a writer: records are sealed into
	// it and written to the socket when it is full (or the frame ends).
	// The frame's head (header and metadata, a record of its own) fits
	// with four full records.
	recStage = 4*(recHdrLen+maxRecord+tagLen) + recHdrLen + HeaderLen + MaxMeta + tagLen
	// recordLabel is the exporter label the record keys come from.
	recordLabel = "EXPORTER-tierstore data plane 5 records"
)

// recSize and recFlushAt are the writers' record size and the staging
// bytes that make a socket write; variables only for BenchmarkRecordLayer.
var (
	recSize    = maxRecord
	recFlushAt = recStage
)

// ErrRecordAuth: a data-plane record over TLS failed to open (tampered,
// replayed, reordered or dropped on the way, or sealed with another key)
// or was malformed; the connection is closed. It also wraps
// errcode.ErrTransferFail.
var ErrRecordAuth = errors.New("wire: a data-plane record failed authentication")

// recordKeys derives the four secrets of a session's records from its TLS
// 1.3 exporter: the client-to-node key and IV, then node-to-client's.
func recordKeys(cs tls.ConnectionState) (c2n, n2c cipher.AEAD, c2nIV, n2cIV [12]byte, err error) {
	if cs.Version != tls.VersionTLS13 {
		err = fmt.Errorf("wire: data-plane records need TLS 1.3, the session is %s", tls.VersionName(cs.Version))
		return
	}
	km, err := cs.ExportKeyingMaterial(recordLabel, nil, 2*(16+12))
	if err != nil {
		return
	}
	if c2n, err = newGCM(km[0:16]); err != nil {
		return
	}
	copy(c2nIV[:], km[16:28])
	if n2c, err = newGCM(km[28:44]); err != nil {
		return
	}
	copy(n2cIV[:], km[44:56])
	clear(km)
	return
}

// newGCM is a direction's AES-128-GCM: internal/aesgcm's, with VAES and
// VPCLMULQDQ on AVX-512 where the CPU has them (about twice the standard
// library's speed on a record), crypto/cipher's GCM elsewhere; the bytes
// on the wire are the same.
func newGCM(key []byte) (cipher.AEAD, error) {
	return aesgcm.New(key)
}

// recordConn is a data connection over TLS after the hellos: reads and
// writes go through the record layer on the socket under the tls.Conn;
// ConnectionState is the TLS session's (the role checks read it); Close
// closes the socket (a TLS close_notify would reach the peer as a stray
// record).
type recordConn struct {
	net.Conn // the socket
	tc       *tls.Conn

	// The read side: one reader at a time (the connection's reader
	// goroutine); rmu only guards against misuse.
	rmu   sync.Mutex
	open  cipher.AEAD
	rIV   [12]byte
	rSeq  uint64
	hdr   [recHdrLen]byte // the next record's length, read ahead (hdrN bytes of it)
	hdrN  int
	rbuf  []byte // one record's ciphertext and tag, plus the next header
	pend  []byte // a record's ciphertext read, not yet opened (ready)
	padd  [recHdrLen]byte
	plain []byte // opened plaintext not yet returned (a caller's buffer smaller than the record)
	pbuf  []byte
	rerr  error

	// sealed and opened count the plaintext bytes of the records sealed
	// and opened under this session's keys (spent).
	sealed, opened atomic.Int64

	// The write side, under wmu.
	wmu  sync.Mutex
	seal cipher.AEAD
	wIV  [12]byte
	wSeq uint64
	wbuf []byte
	werr error
}

// newRecordConn switches tc, whose handshake and hellos are done, to the
// record layer. client says which side this is. Nothing may be buffered in
// tc, and nothing is: on the node, the client sends its first record only
// once it has read the node's hello, which the node sends after reading
// the client's (DialDataTLS, serverConn.handshake); on the client, the
// node sends records only in answer to requests, made after the switch.
// So neither crypto/tls has read a byte beyond the hello's TLS record (a
// peer that sends early loses those bytes to its TLS stack, and its first
// record fails to open).
func newRecordConn(tc *tlsConn, client bool) (*recordConn, error) {
	c2n, n2c, c2nIV, n2cIV, err := recordKeys(tc.ConnectionState())
	if err != nil {
		return nil, err
	}
	rc := &recordConn{Conn: tc.g.Conn, tc: tc.Conn,
		rbuf: make([]byte, maxRecord+tagLen+recHdrLen), wbuf: make([]byte, 0, recStage)}
	if client {
		rc.seal, rc.wIV, rc.open, rc.rIV = c2n, c2nIV, n2c, n2cIV
	} else {
		rc.seal, rc.wIV, rc.open, rc.rIV = n2c, n2cIV, c2n, c2nIV
	}
	return rc, nil
}

// RetireBytes is how many plaintext bytes one direction of a connection
// seals (or opens) under its keys before DataPool retires it for a new
// one (a new handshake, new keys): AES-GCM's safety margin shrinks with the
// square of what one key encrypts, and RFC 8446 (5.5) has TLS 1.3 peers
// update a key before 2^24.5 records of 16 KiB, about 2^38.5 bytes. The
// data plane sends no key update; the client's pool retires the
// connection (both directions' keys) at 2^36 bytes, 64 GiB, instead.
// A variable for tests.
var RetireBytes int64 = 1 << 36

// spent reports whether either direction's key has carried RetireBytes.
func (c *recordConn) spent() bool {
	return c.sealed.Load() >= RetireBytes || c.opened.Load() >= RetireBytes
}

// ConnectionState is the TLS session's.
func (c *recordConn) ConnectionState() tls.ConnectionState { return c.tc.ConnectionState() }

func nonce(iv [12]byte, seq uint64) [12]byte {
	var s [8]byte
	binary.BigEndian.PutUint64(s[:], seq)
	for i := range s {
		iv[4+i] ^= s[i]
	}
	return iv
}

// recordErr ends the read side with ErrRecordAuth and closes the socket.
func (c *recordConn) recordErr(format string, args ...any) error {
	c.rerr = fmt.Errorf("wire: record %d from %s: %s; connection closed: %w: %w", c.rSeq, c.Conn.RemoteAddr(), fmt.Sprintf(format, args...), ErrRecordAuth, errcode.ErrTransferFail)
	c.Conn.Close()
	return c.rerr
}

// readRecord reads the next record's ciphertext and tag into pend (and
// its length into padd), plus whatever of the next record's length the
// socket already holds.
func (c *recordConn) readRecord() error {
	if c.hdrN < recHdrLen {
		if k, err := io.ReadFull(c.Conn, c.hdr[c.hdrN:]); err != nil {
			if err == io.EOF && c.hdrN > 0 {
				err = io.ErrUnexpectedEOF
			}
			c.hdrN += k
			return err // io.EOF: the peer closed between records
		}
	}
	c.padd, c.hdrN = c.hdr, 0
	n := int(binary.LittleEndian.Uint32(c.padd[:]))
	if n < 1 || n > maxRecord {
		return c.recordErr("a record of %d bytes (1..%d allowed)", n, maxRecord)
	}
	need := n + tagLen
	got, err := io.ReadAtLeast(c.Conn, c.rbuf[:need+recHdrLen], need)
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		c.rerr = err // a record cut short cannot be resumed
		return err
	}
	c.hdrN = copy(c.hdr[:], c.rbuf[need:got])
	c.pend = c.rbuf[:need]
	return nil
}

// openInto opens the pending record into dst when it fits, else into
// pbuf (plain holds it) and copies what fits; it returns the bytes put in
// dst.
func (c *recordConn) openInto(dst []byte) (int, error) {
	if c.rSeq == math.MaxUint64 {
		return 0, c.recordErr("the sequence numbers are spent")
	}
	nc := nonce(c.rIV, c.rSeq)
	n := len(c.pend) - tagLen
	out := dst[:0]
	if len(dst) < n {
		if c.pbuf == nil {
			c.pbuf = make([]byte, 0, maxRecord)
		}
		out = c.pbuf[:0]
	}
	out, err := c.open.Open(out, nc[:], c.pend, c.padd[:])
	c.pend = nil
	if err != nil {
		return 0, c.recordErr("%d bytes fail to open (tampered, replayed, reordered or another key)", n)
	}
	c.rSeq++
	c.opened.Add(int64(n))
	if len(dst) < n {
		k := copy(dst, out)
		c.plain = out[k:]
		return k, nil
	}
	return n, nil
}

// Read returns the next plaintext bytes: what is left of the last record,
// else the next record, opened straight into p when it fits.
func (c *recordConn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	return c.readLocked(p)
}

func (c *recordConn) readLocked(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if len(c.plain) > 0 {
		n := copy(p, c.plain)
		c.plain = c.plain[n:]
		return n, nil
	}
	if c.rerr != nil {
		return 0, c.rerr
	}
	if c.pend == nil {
		if err := c.readRecord(); err != nil {
			return 0, err
		}
	}
	return c.openInto(p)
}

// ready and fill are Read for a caller whose destination is only
// available under a lock (a write's range in the node, RangeWriter.Fill):
// ready reads the next record from the socket (it blocks); then fill,
// which does not block, opens it into dst.
func (c *recordConn) ready() error {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if len(c.plain) > 0 || c.pend != nil {
		return nil
	}
	if c.rerr != nil {
		return c.rerr
	}
	return c.readRecord()
}

// fill puts in dst what ready made available (Read's steps, without
// reading the socket): the rest of an opened record, or the record read,
// opened straight into dst when it fits; errAgain when there is neither.
func (c *recordConn) fill(dst []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if len(dst) > 0 && len(c.plain) == 0 && c.pend == nil {
		return 0, errAgain
	}
	return c.readLocked(dst)
}

// Write seals p into records and writes them.
func (c *recordConn) Write(p []byte) (int, error) {
	n, err := c.writeBuffers(net.Buffers{p})
	return int(n), err
}

// writeBuffers seals v's parts in order, each part cut in records of at
// most maxRecord bytes from its start (the first part of a frame, its
// header and metadata, is thus a record of its own), into the staging
// buffer, written to the socket whenever it is full and at the end.
func (c *recordConn) writeBuffers(v net.Buffers) (int64, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return 0, c.werr
	}
	var n int64
	for _, p := range v {
		for len(p) > 0 {
			k := min(len(p), recSize)
			if len(c.wbuf)+recHdrLen+k+tagLen > min(cap(c.wbuf), recFlushAt) && len(c.wbuf) > 0 {
				if err := c.flush(); err != nil {
					return n, err
				}
			}
			if c.wSeq == math.MaxUint64 {
				c.werr = fmt.Errorf("wire: the record sequence numbers to %s are spent: %w", c.Conn.RemoteAddr(), errcode.ErrTransferFail)
				c.Conn.Close()
				return n, c.werr
			}
			at := len(c.wbuf)
			c.wbuf = binary.LittleEndian.AppendUint32(c.wbuf, uint32(k))
			nc := nonce(c.wIV, c.wSeq)
			c.wSeq++
			c.wbuf = c.seal.Seal(c.wbuf, nc[:], p[:k], c.wbuf[at:at+recHdrLen])
			c.sealed.Add(int64(k))
			p = p[k:]
			n += int64(k)
		}
	}
	return n, c.flush()
}

// flush writes the staging buffer. A failed write ends the write side: a
// record cut short cannot be resumed.
func (c *recordConn) flush() error {
	b := c.wbuf
	c.wbuf = c.wbuf[:0]
	if len(b) == 0 {
		return nil
	}
	// A net.Conn's Write writes all of b or returns an error.
	if _, err := c.Conn.Write(b); err != nil {
		c.werr = err
		return err
	}
	return nil
}
