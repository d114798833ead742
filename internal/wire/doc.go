// Package wire is the bulk data protocol between clients and store nodes
// (docs/design.md, package map; the format is in docs/format/dataplane.md).
//
// Values travel on a data plane of their own: length-prefixed frames over
// TCP, on the node's gRPC port (Mux routes a connection by its first four
// bytes). A client's DataConn writes a frame's header and then the value
// straight from the caller's memory (one writev), and reads a reply's value
// straight into the caller's buffer (or, for the Parts forms, the
// caller's buffers in order: gather/scatter); several calls are in flight on one
// connection (pipelined, matched by id), and DataPool keeps ConnsPerNode
// connections per node. A node's DataServer serves a DataHandler: writes
// (the handler claims the range first, BeginWrite; the payload is then
// read from the socket straight into the node's memory, RangeWriter.Fill,
// and checked against its CRC32C once, chunk by chunk as it lands),
// memory reads sent
// from a view of the segment without a copy or a checksum, SSD reads
// answered concurrently and streamed: the handler's SSDValue hands the
// value over in pieces, each written to the socket as it comes off the
// disk. Values never travel over gRPC; the node's gRPC service (NodeStats)
// shares the port.
//
// # Invariants
//
//   - One CRC32C check per transfer, by the receiver: a write is checked by
//     the node as it lands in the range its put claimed, and only a write
//     that arrived whole and matches is committed (RangeWriter.Commit);
//     a wrong CRC32C, a short payload or a disconnect aborts it, so
//     nothing is recorded and the client's put fails; a read is checked by
//     the client against the object's CRC32C from its lookup, chunk by
//     chunk as it arrives (ErrBadChecksum, also codes.ErrChecksumMismatch).
//     An SSD read is sent unchecked with the CRC32C of the node's index
//     (FlagCRC); bytes that fail the client's check although that CRC is
//     the object's are asked for once more with FlagVerify, and the node
//     then checks its copy before sending it, dropping a corrupt one
//     (docs/design.md invariant 5).
//   - An SSD read that fails after its first byte went out closes the
//     connection: the client's call ends short (ErrShortFrame), nothing
//     beyond its buffer written.
//   - Nothing is ever written beyond a caller's buffer: a reply that
//     announces another length than asked is refused before a byte is
//     read; a call returns only once the connection's reader no longer
//     touches its buffer (a context that ends mid-payload breaks the
//     connection and waits for the reader).
//   - A malformed or truncated frame (ErrFrame, ErrShortFrame, both also
//     codes.ErrTransferFail) breaks the connection: every call on it fails
//     clearly, none reads stray bytes.
//
// # Grants
//
// Since data plane version 2 a read request carries the replica's read
// grant, and since version 3 the write request the range's write grant
// (Request.Grant, at most MaxGrant bytes, empty without one) in its
// metadata; the node's DataHandler judges it (package node, grants.go).
// ReadRange, ReadSSD and Write send none; ReadRangeParts, ReadSSDParts,
// RangeRead.Grant and WriteParts pass one. Since version 4 a read-range
// request names the put token of the object it expects
// (ReadObjectParts, RangeRead.Token; 0: any complete object): the node
// refuses a range that holds another put's object.
//
// # TLS
//
// With a tls.Config (DialDataTLS, NewMuxTLS) a data connection starts with
// a TLS 1.3 handshake and exchanges its hellos inside TLS; then, since
// data plane version 5, both sides derive per-direction AES-128-GCM keys
// from the session (tls.ConnectionState.ExportKeyingMaterial) and every
// frame travels in records of the data plane's own on the socket
// (record.go, docs/format/dataplane.md "Records"): a reader opens each
// record (up to 64 KiB) from a scratch buffer straight into the caller's
// buffer, or, for a write on the node, into the range the put claimed; a
// writer seals from the caller's memory (the node's segment) into a
// staging buffer written to the socket every four records. Nonces are a
// per-direction 64-bit counter; a record that fails to open (altered,
// replayed, reordered, another key) closes the connection (ErrRecordAuth,
// also errcode.ErrTransferFail). crypto/tls's own records carry only the
// handshake and the hellos. Keys are never updated: DataPool retires a
// connection whose records carried RetireBytes in either direction (a new
// one for later calls; the calls holding it, counted by Acquire, finish on
// it and the last Release closes it).
//
// # Calls on the caller's thread
//
// A call whose context carries WithCallerThread (the Python package's
// calls that run directly on their C thread) gets from DataPool.Acquire a
// plaintext connection of its own: no reader goroutine; the caller reads
// its reply itself, waiting for the socket with poll(2) on its own thread
// (ownconn.go), so that a goroutine locked to a thread is not woken through
// the scheduler. A call whose context carries WithCallerReads (the Go
// client's single gets and single puts) gets one too, while fewer than
// OwnBusy of the pool's own connections are in use (else it shares): its
// goroutine reads its reply, waiting through the runtime's poller with
// the socket's read deadline set from its context, so that no reader
// goroutine hands the reply over (a wake of the caller, and on a machine
// with idle Ps of another thread: stop 46 in docs/benchmarks.md). Idle own
// connections (OwnIdle per node) are checked for a hang-up before reuse.
// The invariants above hold for them; a context that ends during the wait
// breaks the connection.
//
// # Concurrency
//
// DataConn, DataPool, DataServer and Mux are safe for concurrent use,
// except an own connection (Acquire with WithCallerThread or
// WithCallerReads), which serves one caller until its release.
// DataConn.wmu serialises frame writes; DataConn.mu protects its call map
// and error; one reader goroutine per shared connection completes calls.
// DataServer.mu protects its connection set (and a served connection's
// net.Conn, replaced once by its records); each served connection has
// one reading goroutine, a reply lock and one goroutine per SSD read in
// flight. A write's RangeWriter.Fill runs under the node's ownership lock:
// the data server calls it only for a non-blocking read of bytes the
// socket already holds (syscall.RawConn), waiting for the socket outside
// it. DataPool.mu protects its maps (shared and idle own connections);
// DataPool.ownBusy counts the own connections in use (atomic).
package wire
