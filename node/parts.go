package node

import (
	"context"
	"time"
)

// The gather/scatter forms of the in-process data plane (client.LocalNode):
// one object in several of the caller's buffers, copied straight from or
// into them, without an intermediate buffer.

// partsLen is the total length of parts.
func partsLen(parts [][]byte) int64 {
	var n int64
	for _, p := range parts {
		n += int64(len(p))
	}
	return n
}

// partsCursor copies bytes into parts in order, from their start.
type partsCursor struct {
	parts [][]byte
	i     int // current part
	at    int // offset in parts[i]
}

// copyCRC copies src to the next bytes of the parts (the caller ensures
// they have room) and returns crc updated with what it copied.
func (c *partsCursor) copyCRC(crc uint32, src []byte) uint32 {
	for len(src) > 0 && c.i < len(c.parts) {
		dst := c.parts[c.i][c.at:]
		k := min(len(dst), len(src))
		crc = copyCRCUpdate(crc, dst[:k], src[:k])
		src = src[k:]
		c.at += k
		if c.at == len(c.parts[c.i]) {
			c.i, c.at = c.i+1, 0
		}
	}
	return crc
}

// WriteRangeParts is WriteRange of the concatenation of parts (crc is its
// CRC32C): each part is copied straight into the segment.
func (n *Node) WriteRangeParts(ctx context.Context, segment string, off int64, parts [][]byte, crc uint32, token uint64) error {
	start := time.Now()
	w, err := n.beginWrite(ctx, segment, off, partsLen(parts), token)
	if err != nil {
		return err
	}
	var pos int64
	for _, value := range parts {
		for i := 0; i < len(value); {
			k, err := w.Fill(pos, func(dst []byte) (int, error) {
				return copy(dst, value[i:min(i+writeChunk, len(value))]), nil
			})
			if err != nil {
				w.Abort()
				return err
			}
			i += k
			pos += int64(k)
		}
	}
	w.Commit(crc)
	n.observeLocalPut(start)
	return nil
}

// ReadRangeIntoParts is ReadRangeInto scattering the range over parts in
// order (their total length is the range's), returning the CRC32C of the
// whole.
func (n *Node) ReadRangeIntoParts(_ context.Context, segment string, off int64, parts [][]byte) (uint32, error) {
	start := time.Now()
	if err := n.checkSegment(segment); err != nil {
		return 0, err
	}
	var crc uint32
	for _, p := range parts {
		if len(p) == 0 {
			continue
		}
		var err error
		if crc, err = n.seg.readCRCUpdate(crc, p, off); err != nil {
			return 0, toCode(err)
		}
		off += int64(len(p))
	}
	n.dp.metrics().getDRAMLocal.Observe(time.Since(start).Seconds())
	return crc, nil
}

// ReadObjectIntoParts is ReadRangeIntoParts of the object written by put
// token only: the range (the parts' total length) must be exactly that
// object's, as a remote read that names the token must
// (checkReadRange), else REPLICA_IS_GONE. A client in this process reads
// a cached replica location through it (client's localObjectReader): the
// object may have been removed since its lookup.
func (n *Node) ReadObjectIntoParts(ctx context.Context, segment string, off int64, token uint64, parts [][]byte) (uint32, error) {
	if err := n.checkSegment(segment); err != nil {
		return 0, err
	}
	if _, err := n.checkReadRange(off, partsLen(parts), token); err != nil {
		return 0, toCode(err)
	}
	return n.ReadRangeIntoParts(ctx, segment, off, parts)
}

// ReadSSDIntoParts is ReadSSDInto scattering the value over parts in order
// (their total length must be the object's size).
func (n *Node) ReadSSDIntoParts(ctx context.Context, key []byte, parts [][]byte) (uint32, error) {
	start := time.Now()
	crc, err := n.readSSDStream(ctx, key, parts)
	if err != nil {
		return 0, err
	}
	n.dp.metrics().getSSDLocal.Observe(time.Since(start).Seconds())
	return crc, nil
}
