package client

import (
	"context"
	"fmt"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/keyspec"
	"github.com/tierstore/tierstore/masterapi"
)

// Gather and scatter: one object in several of the caller's buffers (a
// KV-cache block gathered from one buffer per layer). Puts send the parts
// straight from the caller's memory (writev on the data plane, a copy per
// part into the local node's segment); reads fill the parts in order
// straight from the socket or the local segment. One CRC32C covers the
// whole object, computed part by part: no part is ever copied into an
// intermediate buffer.

// partsLen is the total length of parts.
func partsLen(parts [][]byte) int64 {
	n := int64(0)
	for _, p := range parts {
		n += int64(len(p))
	}
	return n
}

// headParts returns the parts that hold the first n bytes of parts (n <=
// partsLen(parts)): the parts before, and the part where n ends cut there.
// Empty parts are dropped.
func headParts(parts [][]byte, n int64) [][]byte {
	out := make([][]byte, 0, len(parts))
	for _, p := range parts {
		if n == 0 {
			break
		}
		k := min(int64(len(p)), n)
		if k > 0 {
			out = append(out, p[:k])
		}
		n -= k
	}
	return out
}

// PutParts stores the concatenation of parts under key: one object, one
// CRC32C over the whole, each part sent from where it is (no copy into one
// buffer). As PutWith otherwise (an empty total is ErrInvalidParams).
func (c *Client) PutParts(ctx context.Context, key string, parts [][]byte, opts PutOptions) error {
	return c.putParts(ctx, key, parts, opts)
}

// BatchPutParts is BatchPutWith where values[i] is the parts of item i
// (see PutParts); one error per key.
func (c *Client) BatchPutParts(ctx context.Context, keys []string, values [][][]byte, opts PutOptions) []error {
	if len(values) != len(keys) {
		return badBatch("batch put", len(keys), len(values), "part lists")
	}
	return c.batchPut(ctx, keys, values, opts)
}

// GetIntoParts reads key's value into parts in order (scatter) and returns
// its length: the first part is filled, then the next, and so on; the
// parts after the object's end are left as they are. Parts whose total is
// shorter than the object are ErrBufferTooSmall, before anything is read.
// Errors and guarantees as GetInto.
func (c *Client) GetIntoParts(ctx context.Context, key string, parts [][]byte) (int, error) {
	start := time.Now()
	if err := c.check(key); err != nil {
		return 0, err
	}
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	room := partsLen(parts)
	n := 0
	err := c.lookupAndRead(ctx, key, start, func(info masterapi.ObjectInfo) ([][]byte, error) {
		if err := fits(info, room); err != nil {
			return nil, fmt.Errorf("%d parts: %w", len(parts), err)
		}
		n = int(info.Size)
		return headParts(parts, info.Size), nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// BatchGetIntoParts is BatchGetInto where bufs[i] is the parts of item i
// (see GetIntoParts): one BatchGetReplicaList, transfers pipelined.
func (c *Client) BatchGetIntoParts(ctx context.Context, keys []string, bufs [][][]byte) (ns []int, errs []error) {
	ns = make([]int, len(keys))
	if len(bufs) != len(keys) {
		return ns, badBatch("batch get", len(keys), len(bufs), "part lists")
	}
	errs = c.batchRead(ctx, keys, func(i int, info masterapi.ObjectInfo) ([][]byte, error) {
		if err := fits(info, partsLen(bufs[i])); err != nil {
			return nil, fmt.Errorf("%d parts: %w", len(bufs[i]), err)
		}
		ns[i] = int(info.Size)
		return headParts(bufs[i], info.Size), nil
	})
	for i, err := range errs {
		if err != nil {
			ns[i] = 0
		}
	}
	return ns, errs
}

// GetAlloc is Get into memory of the caller's: alloc is called with the
// object's size and returns where to read it (exactly that long); it is
// called again if the object changed under the read (the earlier memory
// is then the caller's to free). It returns the object's length.
func (c *Client) GetAlloc(ctx context.Context, key string, alloc func(size int64) ([]byte, error)) (int, error) {
	start := time.Now()
	if err := c.check(key); err != nil {
		return 0, err
	}
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	n := 0
	err := c.lookupAndRead(ctx, key, start, func(info masterapi.ObjectInfo) ([][]byte, error) {
		b, err := alloc(info.Size)
		if err != nil {
			return nil, err
		}
		if int64(len(b)) != info.Size {
			return nil, errcode.Errorf(errcode.InvalidParams, "client: get %s: alloc gave %d bytes for %d", keyspec.Show(key), len(b), info.Size)
		}
		n = int(info.Size)
		return [][]byte{b}, nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// Lookup answers key's size, CRC32C and replicas (it grants a read lease,
// as Get's lookup does).
func (c *Client) Lookup(ctx context.Context, key string) (masterapi.ObjectInfo, error) {
	if err := c.check(key); err != nil {
		return masterapi.ObjectInfo{}, err
	}
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	info, err := c.m.GetReplicaList(ctx, key)
	if err != nil {
		return info, fmt.Errorf("client: lookup %s: %w", keyspec.Show(key), err)
	}
	return info, nil
}
