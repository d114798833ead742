package client

import (
	"context"
	"fmt"

	"github.com/tierstore/tierstore/internal/codes"
	"github.com/tierstore/tierstore/masterapi"
)

// partsLen is the total length of parts.
func partsLen(parts [][]byte) int64 {
	n := int64(0)
	for _, p := range parts {
		n += int64(len(p))
	}
	return n
}

// PutParts stores the concatenation of parts under key (one object, one
// CRC32C over the whole), as PutWith.
func (c *Client) PutParts(ctx context.Context, key string, parts [][]byte, opts PutOptions) error {
	if len(parts) == 1 {
		return c.PutWith(ctx, key, parts[0], opts)
	}
	v := make([]byte, 0, partsLen(parts))
	for _, p := range parts {
		v = append(v, p...)
	}
	return c.PutWith(ctx, key, v, opts)
}

// BatchPutParts is BatchPutWith where values[i] is the parts of item i.
func (c *Client) BatchPutParts(ctx context.Context, keys []string, values [][][]byte, opts PutOptions) []error {
	if len(values) != len(keys) {
		errs := make([]error, len(keys))
		for i := range errs {
			errs[i] = codes.Errorf(codes.InvalidParams, "client: batch put: %d keys, %d values", len(keys), len(values))
		}
		return errs
	}
	flat := make([][]byte, len(values))
	for i, ps := range values {
		if len(ps) == 1 {
			flat[i] = ps[0]
			continue
		}
		for _, p := range ps {
			flat[i] = append(flat[i], p...)
		}
	}
	return c.BatchPutWith(ctx, keys, flat, opts)
}

// GetIntoParts reads key's value into parts in order and returns its
// length; the parts together must hold the object.
func (c *Client) GetIntoParts(ctx context.Context, key string, parts [][]byte) (int, error) {
	if len(parts) == 1 {
		return c.GetInto(ctx, key, parts[0])
	}
	buf := make([]byte, partsLen(parts))
	n, err := c.GetInto(ctx, key, buf)
	if err != nil {
		return 0, err
	}
	scatter(buf[:n], parts)
	return n, nil
}

func scatter(b []byte, parts [][]byte) {
	for _, p := range parts {
		b = b[copy(p, b):]
	}
}

// BatchGetIntoParts is BatchGetInto where bufs[i] is the parts of item i.
func (c *Client) BatchGetIntoParts(ctx context.Context, keys []string, bufs [][][]byte) ([]int, []error) {
	if len(bufs) != len(keys) {
		errs := make([]error, len(keys))
		for i := range errs {
			errs[i] = codes.Errorf(codes.InvalidParams, "client: batch get: %d keys, %d buffers", len(keys), len(bufs))
		}
		return make([]int, len(keys)), errs
	}
	flat := make([][]byte, len(bufs))
	for i, ps := range bufs {
		if len(ps) == 1 {
			flat[i] = ps[0]
		} else {
			flat[i] = make([]byte, partsLen(ps))
		}
	}
	ns, errs := c.BatchGetInto(ctx, keys, flat)
	for i, ps := range bufs {
		if errs[i] == nil && len(ps) != 1 {
			scatter(flat[i][:ns[i]], ps)
		}
	}
	return ns, errs
}

// GetAlloc reads key into the buffer alloc returns for its size (called
// again if the object changed under the read) and returns its length.
func (c *Client) GetAlloc(ctx context.Context, key string, alloc func(size int64) ([]byte, error)) (int, error) {
	v, err := c.Get(ctx, key)
	if err != nil {
		return 0, err
	}
	b, err := alloc(int64(len(v)))
	if err != nil {
		return 0, err
	}
	return copy(b, v), nil
}

// Lookup answers key's size, CRC32C and replicas (it grants a read lease,
// as Get's lookup).
func (c *Client) Lookup(ctx context.Context, key string) (masterapi.ObjectInfo, error) {
	if err := c.check(key); err != nil {
		return masterapi.ObjectInfo{}, err
	}
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	info, err := c.m.GetReplicaList(ctx, key)
	if err != nil {
		return info, fmt.Errorf("client: lookup %s: %w", masterapi.ShortKey(key), err)
	}
	return info, nil
}
