package client

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tierstore/tierstore/internal/codes"
	"github.com/tierstore/tierstore/internal/wire"
	"github.com/tierstore/tierstore/masterapi"
)

// batchParallelism bounds the data transfers of one batch call in flight.
const batchParallelism = 8

// parallel runs f(i) for i in [0, n) on at most batchParallelism goroutines.
func parallel(n int, f func(i int)) {
	sem := make(chan struct{}, batchParallelism)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			f(i)
		}()
	}
	wg.Wait()
}

// BatchPut stores values[i] under keys[i] with one BatchPutStart and one
// BatchPutEnd; it returns one error per key (nil: stored).
func (c *Client) BatchPut(ctx context.Context, keys []string, values [][]byte) []error {
	return c.BatchPutWith(ctx, keys, values, PutOptions{})
}

// BatchPutWith is BatchPut with the options of every put (PutOptions:
// replicas).
func (c *Client) BatchPutWith(ctx context.Context, keys []string, values [][]byte, opts PutOptions) []error {
	errs := make([]error, len(keys))
	if len(values) != len(keys) {
		for i := range errs {
			errs[i] = codes.Errorf(codes.InvalidParams, "client: batch put: %d keys, %d values", len(keys), len(values))
		}
		return errs
	}
	start := time.Now()
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	reqs := make([]masterapi.PutStartRequest, 0, len(keys))
	idx := make([]int, 0, len(keys))
	crcs := make([]uint32, len(keys))
	for i, k := range keys {
		if err := c.check(k); err != nil {
			errs[i] = err
			continue
		}
		if len(values[i]) == 0 {
			errs[i] = codes.Errorf(codes.InvalidParams, "client: empty value for key %s", masterapi.ShortKey(k))
			continue
		}
		crcs[i] = CRC32C(values[i])
		reqs = append(reqs, c.putRequest(k, int64(len(values[i])), crcs[i], opts))
		idx = append(idx, i)
	}
	if len(reqs) == 0 {
		return errs
	}
	starts, err := c.m.BatchPutStart(ctx, reqs)
	if err == nil && len(starts) != len(reqs) {
		err = codes.Errorf(codes.InternalError, "client: batch put start: %d results for %d keys", len(starts), len(reqs))
	}
	if err != nil {
		for _, i := range idx {
			errs[i] = fmt.Errorf("client: batch put %s: %w", masterapi.ShortKey(keys[i]), err)
		}
		return errs
	}
	parallel(len(idx), func(j int) {
		i := idx[j]
		if starts[j].Err != nil {
			errs[i] = fmt.Errorf("client: put %s: %w", masterapi.ShortKey(keys[i]), starts[j].Err)
			return
		}
		wctx := wire.WithObject(ctx, wire.Object{Key: keys[i], SoftPin: c.cfg.SoftPin, HardPin: c.cfg.HardPin})
		if err := c.writeReplicas(wctx, starts[j].PutStartReply, values[i], crcs[i]); err != nil {
			errs[i] = fmt.Errorf("client: put %s: %w", masterapi.ShortKey(keys[i]), err)
		}
	})
	var ends, revokes []masterapi.PutRef
	var endIdx []int
	var endReps []masterapi.Replica
	for j, i := range idx {
		p := masterapi.PutRef{Key: keys[i], Token: starts[j].Replica.PutToken}
		switch {
		case starts[j].Err != nil:
		case errs[i] != nil:
			revokes = append(revokes, p)
		default:
			ends = append(ends, p)
			endIdx = append(endIdx, i)
			endReps = append(endReps, starts[j].Replica)
		}
	}
	if len(revokes) > 0 {
		if _, err := c.m.BatchPutRevoke(ctx, revokes); err != nil {
			c.log.Debug("batch put revoke failed", "err", err)
		}
	}
	if len(ends) > 0 {
		res, err := c.m.BatchPutEnd(ctx, ends)
		for j, i := range endIdx {
			switch {
			case err != nil:
				errs[i] = fmt.Errorf("client: put %s: %w", masterapi.ShortKey(keys[i]), err)
			case j < len(res) && res[j] != nil:
				errs[i] = fmt.Errorf("client: put %s: %w", masterapi.ShortKey(keys[i]), res[j])
			default:
				// Each completed item, from the batch's start (the
				// Observer's contract), like Put.
				c.observePut(endReps[j], start)
			}
		}
	}
	return errs
}

// BatchExists answers Exists for every key with one call.
func (c *Client) BatchExists(ctx context.Context, keys []string) ([]bool, []error) {
	out := make([]bool, len(keys))
	errs := make([]error, len(keys))
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	res, err := c.m.BatchExistKey(ctx, keys)
	if err == nil && len(res) != len(keys) {
		err = codes.Errorf(codes.InternalError, "client: batch exists: %d results for %d keys", len(res), len(keys))
	}
	for i := range keys {
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("client: exists %s: %w", masterapi.ShortKey(keys[i]), err)
		case res[i].Err != nil:
			errs[i] = fmt.Errorf("client: exists %s: %w", masterapi.ShortKey(keys[i]), res[i].Err)
		default:
			out[i] = res[i].Exists
		}
	}
	return out, errs
}

// BatchRemove removes every key; one error per key.
func (c *Client) BatchRemove(ctx context.Context, keys []string, force bool) []error {
	errs := make([]error, len(keys))
	for i, k := range keys {
		errs[i] = c.Remove(ctx, k, force)
	}
	return errs
}
