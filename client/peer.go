package client

import (
	"context"

	"github.com/tierstore/tierstore/internal/wire"
)

// LocalNode is a store node in this process, as the client needs it: puts
// prefer its segment, and its replicas are read without a socket. A
// *node.Node is one (pass it as Config.LocalNode); the interface is defined
// here so that this package does not depend on the node's implementation.
type LocalNode interface {
	// Name is the node's id, as the master knows it.
	Name() string
	// WriteRange writes value into segment at off for the put identified
	// by token (masterapi.Replica.PutToken); crc is value's CRC32C.
	WriteRange(ctx context.Context, segment string, off int64, value []byte, crc uint32, token uint64) error
	// ReadRange returns n bytes of segment at off.
	ReadRange(ctx context.Context, segment string, off, n int64) ([]byte, error)
	// ReadSSD returns key's value from the node's SSD tier, CRC32C-checked.
	ReadSSD(ctx context.Context, key []byte) ([]byte, error)
}

// CRC32C is the Castagnoli CRC of b, the checksum every object carries.
func CRC32C(b []byte) uint32 { return wire.CRC32C(b) }

// peer is the data plane to one node: the local node directly, or a remote
// node through its peer service. size bounds what an SSD read may return
// (the object's size from the master).
type peer interface {
	writeRange(ctx context.Context, segment string, off int64, value []byte, crc uint32, token uint64) error
	readRange(ctx context.Context, segment string, off int64, n int64) ([]byte, error)
	readSSD(ctx context.Context, key []byte, size int64) ([]byte, error)
}

// localPeer reaches the node of this process without a socket.
type localPeer struct{ n LocalNode }

func (p localPeer) writeRange(ctx context.Context, segment string, off int64, value []byte, crc uint32, token uint64) error {
	return p.n.WriteRange(ctx, segment, off, value, crc, token)
}

func (p localPeer) readRange(ctx context.Context, segment string, off, n int64) ([]byte, error) {
	return p.n.ReadRange(ctx, segment, off, n)
}

func (p localPeer) readSSD(ctx context.Context, key []byte, _ int64) ([]byte, error) {
	return p.n.ReadSSD(ctx, key)
}

// remotePeer reaches a node through its peer service.
type remotePeer struct{ p wire.Peer }

func (p remotePeer) writeRange(ctx context.Context, segment string, off int64, value []byte, crc uint32, token uint64) error {
	return p.p.WriteRange(ctx, segment, off, value, crc, token)
}

func (p remotePeer) readRange(ctx context.Context, segment string, off, n int64) ([]byte, error) {
	return p.p.ReadRange(ctx, segment, off, n)
}

func (p remotePeer) readSSD(ctx context.Context, key []byte, size int64) ([]byte, error) {
	return p.p.ReadSSD(ctx, key, size)
}
