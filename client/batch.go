package client

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/keyspec"
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

// BatchPut stores values[i] under keys[i]; it returns one error per key
// (nil: stored). The batch goes in waves, each one BatchPutStart and one
// BatchPutEnd, pipelined: the next wave's CRC32Cs and allocation are
// computed and asked for while the current wave's bytes are written, and
// a wave is ended while the next one is written, so the data plane does
// not wait for the master between waves. Waves grow from putWaveFirst to
// putWaveMax bytes (the first is small so that bytes flow early; later
// ones are large so that a batch costs few master calls).
func (c *Client) BatchPut(ctx context.Context, keys []string, values [][]byte) []error {
	return c.BatchPutWith(ctx, keys, values, PutOptions{})
}

// BatchPutWith is BatchPut with the options of every put (PutOptions:
// replicas).
func (c *Client) BatchPutWith(ctx context.Context, keys []string, values [][]byte, opts PutOptions) []error {
	if len(values) != len(keys) {
		return badBatch("batch put", len(keys), len(values), "values")
	}
	parts := make([][][]byte, len(values))
	for i := range values {
		parts[i] = values[i : i+1 : i+1]
	}
	return c.batchPut(ctx, keys, parts, opts)
}

// badBatch is the per-key error of a batch whose lists differ in length.
func badBatch(what string, keys, other int, name string) []error {
	errs := make([]error, keys)
	for i := range errs {
		errs[i] = errcode.Errorf(errcode.InvalidParams, "client: %s: %d keys, %d %s", what, keys, other, name)
	}
	return errs
}

// batchPut is BatchPutWith where values[i] is the parts of item i.
func (c *Client) batchPut(ctx context.Context, keys []string, values [][][]byte, opts PutOptions) []error {
	errs := make([]error, len(keys))
	if len(values) != len(keys) {
		for i := range errs {
			errs[i] = errcode.Errorf(errcode.InvalidParams, "client: batch put: %d keys, %d values", len(keys), len(values))
		}
		return errs
	}
	start := time.Now()
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	idx := make([]int, 0, len(keys))
	for i, k := range keys {
		if err := c.check(k); err != nil {
			errs[i] = err
			continue
		}
		if partsLen(values[i]) == 0 {
			errs[i] = errcode.Errorf(errcode.InvalidParams, "client: empty value for key %s", keyspec.Show(k))
			continue
		}
		idx = append(idx, i)
	}
	waves := putWaves(idx, func(i int) int64 { return partsLen(values[i]) })
	started := make(chan *putWave, 1) // the starter runs at most two waves ahead
	go func() {
		defer close(started)
		for _, w := range waves {
			c.startWave(ctx, keys, values, opts, w)
			started <- w
		}
	}()
	sem := make(chan struct{}, batchParallelism) // writes in flight, across waves
	var ends sync.WaitGroup
	for w := range started {
		writes := c.writeWave(ctx, keys, values, opts, w, errs, sem)
		ends.Go(func() {
			writes.Wait()
			c.endWave(ctx, keys, w, errs, start)
		})
	}
	ends.Wait()
	return errs
}

// Wave bounds of BatchPut: the first wave's bytes, the largest wave's
// bytes and items (a wave has at least one item).
const (
	putWaveFirst = 2 << 20
	putWaveMax   = 32 << 20
	putWaveItems = 64
)

// putWave is one BatchPutStart/BatchPutEnd pair of a BatchPut: items idx
// (indices into its keys), their CRC32Cs and start results, or err when
// the BatchPutStart call failed.
type putWave struct {
	idx    []int
	crcs   []uint32
	starts []masterapi.PutStartResult
	err    error
}

// putWaves splits idx into waves of at most putWaveItems items whose
// bytes stay within a limit that doubles from putWaveFirst to putWaveMax.
func putWaves(idx []int, size func(i int) int64) []*putWave {
	var out []*putWave
	limit := int64(putWaveFirst)
	for len(idx) > 0 {
		n, bytes := 0, int64(0)
		for n < len(idx) && n < putWaveItems && (n == 0 || bytes+size(idx[n]) <= limit) {
			bytes += size(idx[n])
			n++
		}
		out = append(out, &putWave{idx: idx[:n]})
		idx = idx[n:]
		limit = min(2*limit, putWaveMax)
	}
	return out
}

// startWave computes w's CRC32Cs and asks the master for its ranges.
func (c *Client) startWave(ctx context.Context, keys []string, values [][][]byte, opts PutOptions, w *putWave) {
	reqs := make([]masterapi.PutStartRequest, len(w.idx))
	w.crcs = make([]uint32, len(w.idx))
	for j, i := range w.idx {
		w.crcs[j] = crcParts(values[i])
		reqs[j] = c.putRequest(keys[i], partsLen(values[i]), w.crcs[j], opts)
	}
	w.starts, w.err = c.m.BatchPutStart(ctx, reqs)
	if w.err == nil && len(w.starts) != len(reqs) {
		w.err = errcode.Errorf(errcode.InternalError, "client: batch put start: %d results for %d keys", len(w.starts), len(reqs))
	}
}

// writeWave writes w's bytes, each item on a goroutine holding a slot of
// sem, and returns what to wait on for them; errs[i] records a failure.
func (c *Client) writeWave(ctx context.Context, keys []string, values [][][]byte, opts PutOptions, w *putWave, errs []error, sem chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for j, i := range w.idx {
		if w.err != nil {
			errs[i] = fmt.Errorf("client: batch put %s: %w", keyspec.Show(keys[i]), w.err)
			continue
		}
		if w.starts[j].Err != nil {
			errs[i] = fmt.Errorf("client: put %s: %w", keyspec.Show(keys[i]), w.starts[j].Err)
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			wctx := wire.WithObject(ctx, c.object(keys[i], opts))
			if err := c.writeReplicas(wctx, w.starts[j].PutStartReply, values[i], w.crcs[j]); err != nil {
				errs[i] = fmt.Errorf("client: put %s: %w", keyspec.Show(keys[i]), err)
			}
		})
	}
	return &wg
}

// endWave completes the written items of w with one BatchPutEnd and
// revokes the others that got a range.
func (c *Client) endWave(ctx context.Context, keys []string, w *putWave, errs []error, start time.Time) {
	if w.err != nil {
		return
	}
	var ends, revokes []masterapi.PutRef
	var endIdx []int
	var endReps []masterapi.Replica
	for j, i := range w.idx {
		p := masterapi.PutRef{Key: keys[i], Token: w.starts[j].Replica.PutToken}
		switch {
		case w.starts[j].Err != nil:
		case errs[i] != nil:
			revokes = append(revokes, p)
		default:
			ends = append(ends, p)
			endIdx = append(endIdx, i)
			endReps = append(endReps, w.starts[j].Replica)
		}
	}
	c.revokeBatch(ctx, revokes)
	if len(ends) == 0 {
		return
	}
	res, err := c.m.BatchPutEnd(ctx, ends)
	if err != nil {
		c.revokeBatch(ctx, ends) // as Put does after a failed PutEnd
	}
	for j, i := range endIdx {
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("client: put %s: %w", keyspec.Show(keys[i]), err)
		case j < len(res) && res[j] != nil:
			errs[i] = fmt.Errorf("client: put %s: %w", keyspec.Show(keys[i]), res[j])
		default:
			c.cache.drop(keys[i]) // an answer about an earlier object of the key
			// Each completed item, from the batch's start (the
			// Observer's contract), like Put.
			c.observePut(endReps[j], start)
		}
	}
}

// revokeBatch abandons the put tokens of puts (best effort, as revoke:
// within the batch's deadline ctx, then in the background).
func (c *Client) revokeBatch(ctx context.Context, puts []masterapi.PutRef) {
	if len(puts) == 0 {
		return
	}
	c.afterCall(ctx, revokeTimeout, func(ctx context.Context) error {
		_, err := c.m.BatchPutRevoke(ctx, puts)
		if err != nil {
			c.log.Debug("batch put revoke failed", "puts", len(puts), "err", err)
		}
		return err
	})
}

// BatchExists answers Exists for every key with one call.
func (c *Client) BatchExists(ctx context.Context, keys []string) ([]bool, []error) {
	out := make([]bool, len(keys))
	errs := make([]error, len(keys))
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	res, err := c.m.BatchExistKey(ctx, keys)
	if err == nil && len(res) != len(keys) {
		err = errcode.Errorf(errcode.InternalError, "client: batch exists: %d results for %d keys", len(res), len(keys))
	}
	for i := range keys {
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("client: exists %s: %w", keyspec.Show(keys[i]), err)
		case res[i].Err != nil:
			errs[i] = fmt.Errorf("client: exists %s: %w", keyspec.Show(keys[i]), res[i].Err)
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
