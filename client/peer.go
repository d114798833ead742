package client

import (
	"context"

	"github.com/tierstore/tierstore/internal/crc32c"
	"github.com/tierstore/tierstore/internal/wire"
)

// LocalNode is a store node in this process, as the client needs it: puts
// prefer its segment, and its replicas are read without a socket, into the
// caller's buffer. A *node.Node is one (pass it as Config.LocalNode); the
// interface is defined here so that this package does not depend on the
// node's implementation.
type LocalNode interface {
	// Name is the node's id, as the master knows it.
	Name() string
	// WriteRange writes value into segment at off for the put identified
	// by token (masterapi.Replica.PutToken); crc is value's CRC32C.
	WriteRange(ctx context.Context, segment string, off int64, value []byte, crc uint32, token uint64) error
	// WriteRangeParts is WriteRange of the concatenation of parts, copied
	// from each part straight into the segment (gather).
	WriteRangeParts(ctx context.Context, segment string, off int64, parts [][]byte, crc uint32, token uint64) error
	// ReadRangeInto copies len(buf) bytes of segment at off into buf and
	// returns the CRC32C of what it copied (computed as it copies; the
	// client compares it with the object's: the read's one check).
	ReadRangeInto(ctx context.Context, segment string, off int64, buf []byte) (uint32, error)
	// ReadRangeIntoParts is ReadRangeInto scattering the range (the parts'
	// total length) over parts in order; the CRC32C is the whole's.
	ReadRangeIntoParts(ctx context.Context, segment string, off int64, parts [][]byte) (uint32, error)
	// ReadSSDInto reads key from the node's SSD tier into buf, exactly the
	// object's size (a copy of another size is an error, with nothing
	// written), and returns the CRC32C of what it copied.
	ReadSSDInto(ctx context.Context, key []byte, buf []byte) (uint32, error)
	// ReadSSDIntoParts is ReadSSDInto scattering the value over parts in
	// order (their total length is the object's size).
	ReadSSDIntoParts(ctx context.Context, key []byte, parts [][]byte) (uint32, error)
}

// CRC32C is the Castagnoli CRC of b, the checksum every object carries.
func CRC32C(b []byte) uint32 { return crc32c.Checksum(b) }

// crcParts is the CRC32C of the concatenation of parts, computed part by
// part (no copy).
func crcParts(parts [][]byte) uint32 {
	var crc uint32
	for _, p := range parts {
		crc = crc32c.Update(crc, p)
	}
	return crc
}

// peer is the data plane to one node: the local node directly, or a remote
// node through the data protocol (package wire). Values are the caller's
// memory in parts, sent or filled in order (one part in the common case).
// Reads fill buf, exactly the object's size, and check it against crc (the
// object's CRC32C) once; grant is the replica's read grant, or for a
// write the range's write grant from PutStart (masterapi.Replica.Grant,
// nil without one), which a remote node with a grant secret checks and the
// node of this process does not need.
type peer interface {
	writeRange(ctx context.Context, segment string, off int64, value [][]byte, crc uint32, token uint64, grant []byte) error
	// readRange's token is the put the reader expects at the range (0:
	// any complete object); the local node's read ignores it.
	readRange(ctx context.Context, segment string, off int64, token uint64, buf [][]byte, crc uint32, grant []byte) error
	readSSD(ctx context.Context, key []byte, buf [][]byte, crc uint32, grant []byte) error
	// release ends the peer's use by one call (peerFor): a remote
	// connection goes back to its pool.
	release()
}

// grantOf is a replica's grant as the data plane sends it.
func grantOf(g string) []byte {
	if g == "" {
		return nil
	}
	return []byte(g)
}

// localPeer reaches the node of this process without a socket.
type localPeer struct{ n LocalNode }

func (localPeer) release() {}

func (p localPeer) writeRange(ctx context.Context, segment string, off int64, value [][]byte, crc uint32, token uint64, _ []byte) error {
	if len(value) == 1 {
		return p.n.WriteRange(ctx, segment, off, value[0], crc, token)
	}
	return p.n.WriteRangeParts(ctx, segment, off, value, crc, token)
}

func (p localPeer) readRange(ctx context.Context, segment string, off int64, _ uint64, buf [][]byte, crc uint32, _ []byte) error {
	var got uint32
	var err error
	if len(buf) == 1 {
		got, err = p.n.ReadRangeInto(ctx, segment, off, buf[0])
	} else {
		got, err = p.n.ReadRangeIntoParts(ctx, segment, off, buf)
	}
	if err != nil {
		return err
	}
	return checkLocal(got, crc, partsLen(buf), "DRAM")
}

func (p localPeer) readSSD(ctx context.Context, key []byte, buf [][]byte, crc uint32, _ []byte) error {
	var got uint32
	var err error
	if len(buf) == 1 {
		got, err = p.n.ReadSSDInto(ctx, key, buf[0])
	} else {
		got, err = p.n.ReadSSDIntoParts(ctx, key, buf)
	}
	if err != nil {
		return err
	}
	return checkLocal(got, crc, partsLen(buf), "SSD")
}

// checkLocal compares the CRC32C of n bytes read from the local node with
// the object's crc. The node of this process hands over its bytes
// unchecked (DRAM) or checked against its own index (SSD, which may hold
// another version of the key).
func checkLocal(got, crc uint32, n int64, what string) error {
	if got != crc {
		return wire.BadChecksum("client: local %s replica: %d bytes with CRC32C %08x, the object has %08x", what, n, got, crc)
	}
	return nil
}

// remotePeer reaches a node through its data connections.
type remotePeer struct{ c *wire.DataConn }

func (p remotePeer) writeRange(ctx context.Context, segment string, off int64, value [][]byte, crc uint32, token uint64, grant []byte) error {
	return p.c.WriteParts(ctx, segment, off, value, crc, token, grant)
}

func (p remotePeer) readRange(ctx context.Context, segment string, off int64, token uint64, buf [][]byte, crc uint32, grant []byte) error {
	return p.c.ReadObjectParts(ctx, segment, off, token, buf, crc, grant)
}

func (p remotePeer) readSSD(ctx context.Context, key []byte, buf [][]byte, crc uint32, grant []byte) error {
	return p.c.ReadSSDParts(ctx, key, buf, crc, grant)
}

func (p remotePeer) release() { p.c.Release() }
