package tier

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/bucket"
	"github.com/tierstore/tierstore/index"
	"github.com/tierstore/tierstore/internal/crc32c"
)

func fail(err error, retryable bool) Outcome {
	return Outcome{Status: Failed, Err: err, Retryable: retryable}
}

// Offload writes tasks to SSD and returns one outcome per task, in order
// (invariant 3). Every bucket, including the partial last one, is written
// before Offload returns. notify is called once per bucket with exactly the
// keys that bucket committed (invariant 1); a nil notify accepts everything.
func (e *Engine) Offload(ctx context.Context, tasks []Task, notify NotifyFunc) []Outcome {
	out := make([]Outcome, len(tasks))
	if err := e.begin(); err != nil {
		for i := range out {
			out[i] = fail(err, true)
		}
		return fillKeys(out, tasks)
	}
	defer e.ops.Done()

	// Validate. Keys already on SSD are answered by the commit phase, under
	// the commit's serialisation (invariant 2).
	cand := make([]int, 0, len(tasks))
	for i, t := range tasks {
		if err := validKey(t.Key); err != nil {
			out[i] = fail(err, false)
			continue
		}
		cand = append(cand, i)
	}
	items := make([]bucket.Item, len(cand))
	for j, i := range cand {
		items[j] = bucket.Item{Key: tasks[i].Key, Size: int64(len(tasks[i].Value))}
	}
	g, err := bucket.Group(items, e.lim)
	if err != nil { // limits were validated at Open
		for _, i := range cand {
			out[i] = fail(err, false)
		}
		return fillKeys(out, tasks)
	}
	for _, j := range g.TooLarge {
		out[cand[j]] = fail(fmt.Errorf("%w: %d bytes, bucket size limit %d", ErrTooLarge, len(tasks[cand[j]].Value), e.lim.MaxBytes), false)
	}
	// Buckets are pipelined: while one is being committed and announced (or
	// checksummed), the next one is being written. Each goroutine writes
	// only the outcomes of its own tasks.
	sem := make(chan struct{}, offloadPipeline)
	var wg sync.WaitGroup
	for _, b := range g.Buckets {
		idx := make([]int, len(b))
		for k, j := range b {
			idx[k] = cand[j]
		}
		sem <- struct{}{}
		if err := ctx.Err(); err != nil {
			<-sem
			for _, i := range idx {
				out[i] = fail(err, true)
			}
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			e.offloadBucket(ctx, tasks, idx, notify, out)
		})
	}
	wg.Wait()
	for dup, first := range g.Folded {
		o := out[cand[first]]
		if o.Status == Persisted {
			o.Status = AlreadyPresent
		}
		out[cand[dup]] = o
	}
	return fillKeys(out, tasks)
}

func fillKeys(out []Outcome, tasks []Task) []Outcome {
	for i := range out {
		out[i].Key = tasks[i].Key
	}
	return out
}

// bucketJob is one bucket of an Offload call on its way through the phases
// of offloadBucket. Each phase records the outcomes of the job's tasks that
// it ends; idx are the job's positions in tasks and out.
type bucketJob struct {
	tasks   []Task
	idx     []int
	out     []Outcome
	notify  NotifyFunc
	id      uint64
	created int64
	enc     *bucket.Encoded
	commit  []int // positions in idx whose entries were committed
	// vals, when not nil, holds the engine's copies of the unstable values
	// (stabilize), by position in idx; nil entries: the task's own Value.
	vals [][]byte
	pb   *pendingBucket
}

func (j *bucketJob) failAll(err error, retryable bool) {
	for _, i := range j.idx {
		j.out[i] = fail(err, retryable)
	}
}

// offloadBucket writes tasks[idx] as one bucket and records their outcomes,
// in three phases: write-and-reserve (encode, make room, write durably),
// commit (duplicate check and index commit under commitMu), notify-and-settle
// (announce, then make the bucket evictable or roll it back).
func (e *Engine) offloadBucket(ctx context.Context, tasks []Task, idx []int, notify NotifyFunc, out []Outcome) {
	j := &bucketJob{tasks: tasks, idx: idx, out: out, notify: notify}
	if !e.writeAndReserve(ctx, j) {
		return
	}
	if !e.commitBucket(ctx, j) {
		return
	}
	e.notifyAndSettle(ctx, j)
}

// writeAndReserve encodes the job's objects as bucket j.id, reserves its
// bytes (evicting if needed, invariant 7) and writes it durably. It reports
// false, with every outcome recorded, when the bucket was not written.
//
// Unstable values (Task.Unstable) are written by a checked write when the
// backend has one (backend.CheckedWriter, values stored uncompressed, every
// CRC given): the backend computes each one's CRC32C while it copies it
// into its staging buffers. When it cannot, or a value changed (the write
// fails with backend.ErrSourceChanged and nothing is durable), the values
// are copied here first (stabilize) and the bucket written plainly, under a
// new id.
func (e *Engine) writeAndReserve(ctx context.Context, j *bucketJob) bool {
	cw, checked := e.be.(backend.CheckedWriter)
	checked = checked && e.codec == bucket.CodecNone
	unstable := false
	for _, i := range j.idx {
		if t := &j.tasks[i]; t.Unstable {
			unstable = true
			checked = checked && t.CRCKnown
		}
	}
	if unstable && !checked {
		if !e.stabilize(j) {
			return false
		}
		unstable = false
	}
	for {
		e.mu.Lock()
		j.id = e.nextID
		e.nextID++
		e.mu.Unlock()

		objs := make([]bucket.Object, len(j.idx))
		for k, i := range j.idx {
			t := &j.tasks[i]
			objs[k] = bucket.Object{Key: t.Key, Value: t.Value, CRC: t.CRC, CRCKnown: t.CRCKnown}
			if j.vals != nil && j.vals[k] != nil {
				objs[k].Value = j.vals[k]
			}
		}
		j.created = time.Now().UnixNano()
		enc, err := bucket.Encode(objs, bucket.EncodeOptions{ID: j.id, Created: j.created, Compression: e.codec})
		if err != nil {
			j.failAll(err, false)
			return false
		}
		j.enc = enc
		if err := e.reserve(ctx, enc.Size); err != nil {
			j.failAll(err, !errors.Is(err, ErrTooLarge))
			return false
		}
		if unstable {
			var checks []backend.PieceCRC
			for k, i := range j.idx {
				if t := &j.tasks[i]; t.Unstable && enc.Pieces[k] >= 0 {
					checks = append(checks, backend.PieceCRC{Piece: enc.Pieces[k], CRC: t.CRC})
				}
			}
			err = cw.WriteBucketChecked(ctx, j.id, enc.Data, checks)
		} else {
			err = e.be.WriteBucket(ctx, j.id, enc.Data)
		}
		if err != nil {
			e.unreserve(enc.Size)
			if unstable && (errors.Is(err, backend.ErrSourceChanged) || errors.Is(err, backend.ErrUnchecked)) {
				if !e.stabilize(j) {
					return false
				}
				unstable = false
				continue
			}
			if errors.Is(err, backend.ErrNoSpace) {
				err = mark(ErrNoSpace, err) // backend's error says "no space" already
			}
			j.failAll(fmt.Errorf("tier: write bucket %d: %w", j.id, err), true)
			return false
		}
		e.st.bucketsWritten.Add(1)
		e.st.bytesWritten.Add(enc.Size)
		return true
	}
}

// stabilize copies the job's unstable values (j.vals), each checked against
// its task's CRC in the same pass when one is given, and fails the tasks
// whose copy does not match (ErrSourceChanged, retryable), dropping them
// from the job. It reports false when no task is left.
func (e *Engine) stabilize(j *bucketJob) bool {
	vals := make([][]byte, 0, len(j.idx))
	idx := j.idx[:0:0]
	for k, i := range j.idx {
		t := &j.tasks[i]
		var v []byte
		if j.vals != nil {
			v = j.vals[k]
		}
		if t.Unstable && v == nil {
			v = make([]byte, len(t.Value))
			crc := copyCRC(v, t.Value)
			if t.CRCKnown && crc != t.CRC {
				j.out[i] = fail(fmt.Errorf("%w: %q: CRC32C %08x, the task says %08x", ErrSourceChanged, t.Key, crc, t.CRC), true)
				continue
			}
		}
		idx = append(idx, i)
		vals = append(vals, v)
	}
	j.idx, j.vals = idx, vals
	return len(idx) > 0
}

// copyCRC copies src to dst (as long) and returns the CRC32C of the copy,
// computed piece by piece while each is in cache.
func copyCRC(dst, src []byte) uint32 {
	var crc uint32
	for i := 0; i < len(dst); i += copyCRCChunk {
		end := min(i+copyCRCChunk, len(dst))
		copy(dst[i:end], src[i:end])
		crc = crc32c.Update(crc, dst[i:end])
	}
	return crc
}

const copyCRCChunk = 64 << 10

// commitBucket is the commit phase: under commitMu, the duplicate check of
// the written bucket's keys and its index commit (invariant 2). Keys already
// present with the same bytes are answered AlreadyPresent; keys whose commit
// by another call awaits its notify are waited for, then checked again. It
// reports false, with every outcome recorded and the file discarded, when
// nothing was committed.
func (e *Engine) commitBucket(ctx context.Context, j *bucketJob) bool {
	j.pb = &pendingBucket{done: make(chan struct{})}
	for {
		e.commitMu.Lock()
		wait, err := e.checkDuplicates(j)
		if err != nil {
			e.commitMu.Unlock()
			e.discardWritten(j.id, j.enc.Size)
			j.failAll(fmt.Errorf("tier: index lookup: %w", err), true)
			return false
		}
		if len(wait) > 0 {
			// Another call committed some of these keys and has not heard
			// from its notify yet: wait for its outcome, then decide again.
			e.commitMu.Unlock()
			if e.testHookPendingWait != nil {
				e.testHookPendingWait()
			}
			for _, w := range wait {
				select {
				case <-w:
				case <-ctx.Done():
					e.discardWritten(j.id, j.enc.Size)
					j.failAll(ctx.Err(), true)
					return false
				}
			}
			continue
		}
		if len(j.commit) == 0 {
			e.commitMu.Unlock()
			e.st.discardedBuckets.Add(1)
			e.st.discardedBytes.Add(j.enc.Size)
			e.discardWritten(j.id, j.enc.Size)
			return false
		}
		emptied, err := e.commitIndex(j)
		e.commitMu.Unlock()
		if err != nil {
			j.failAll(err, true)
			return false
		}
		// Stale versions replaced by this bucket may have left their
		// buckets empty.
		e.buryEmptied(emptied)
		return true
	}
}

// checkDuplicates sorts the job's keys into j.commit (to be committed), keys
// already present with the same bytes (answered here), and keys pending
// another call's notify (returned in wait). A key on SSD with other bytes
// (removed and put again) is committed: the new version replaces the stale
// one in the same index batch. Called with commitMu held.
func (e *Engine) checkDuplicates(j *bucketJob) (wait []chan struct{}, err error) {
	j.commit = j.commit[:0]
	// One batched lookup (bloom filters on every level) for all the keys;
	// pending ones are decided from the pending table.
	keys := make([][]byte, len(j.idx))
	for k, i := range j.idx {
		keys[k] = j.tasks[i].Key
	}
	locs, found, err := e.ix.GetMany(keys)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for k, i := range j.idx {
		if p, ok := e.pending[string(keys[k])]; ok {
			wait = append(wait, p.done)
			continue
		}
		if en := j.enc.Entries[k]; found[k] && locs[k].CRC == en.CRC && locs[k].ValueLen == en.ValueLen {
			j.out[i] = Outcome{Status: AlreadyPresent}
			continue
		}
		j.commit = append(j.commit, k)
	}
	return wait, nil
}

// commitIndex records the bucket and its keys as pending, then commits
// j.commit to the index in one synced batch (stale versions replaced in the
// same batch), without the engine lock. It returns the buckets the commit
// emptied. On failure the bucket is forgotten and its file deleted. Called
// with commitMu held.
func (e *Engine) commitIndex(j *bucketJob) (emptied []uint64, err error) {
	entries := make([]index.KeyLoc, len(j.commit))
	for n, k := range j.commit {
		en := j.enc.Entries[k]
		entries[n] = index.KeyLoc{Key: en.Key, Loc: index.Location{
			Bucket: j.id, Offset: en.Offset, StoredLen: en.StoredLen,
			ValueLen: en.ValueLen, Codec: uint8(en.Codec), CRC: en.CRC,
		}}
	}
	b := &bucketState{id: j.id, size: j.enc.Size}
	b.written, b.live = encodedStored(j.enc), storedBytes(entries)
	e.mu.Lock()
	e.reserved -= j.enc.Size
	e.used += j.enc.Size
	// Registered before the commit: a Load that finds the new entries
	// finds their bucket, and a key found in the index that is not
	// pending has its notify settled.
	e.buckets[j.id] = b
	e.track(b)
	for _, en := range entries {
		e.pending[string(en.Key)] = j.pb
	}
	e.mu.Unlock()

	meta := index.BucketMeta{ID: j.id, Size: j.enc.Size, Keys: len(j.enc.Entries), Created: j.created,
		TrailerOff: j.enc.Footer.TrailerOff, TrailerLen: j.enc.Footer.TrailerLen, TrailerCRC: j.enc.Footer.TrailerCRC,
		Written: encodedStored(j.enc)}
	var res index.CommitResult
	if e.testHookCommit != nil {
		err = e.testHookCommit(j.id)
	}
	if err == nil {
		res, err = e.ix.Commit(index.Commit{Meta: meta, Entries: entries})
	}
	if err != nil {
		e.mu.Lock()
		for _, en := range entries {
			delete(e.pending, string(en.Key))
		}
		close(j.pb.done)
		del := e.markDead(b)
		e.mu.Unlock()
		e.deleteFile(del)
		return nil, fmt.Errorf("tier: index commit of bucket %d: %w", j.id, err)
	}
	e.left(res.Replaced)
	return res.Emptied, nil
}

// notifyAndSettle announces the committed keys and settles the bucket: on
// success it becomes evictable; on failure the keys are rolled back (a
// synced index batch, without the engine lock) and the file is deleted once
// its readers leave (invariant 1). The keys stay pending until the outcome
// is final.
func (e *Engine) notifyAndSettle(ctx context.Context, j *bucketJob) {
	committed := make([]Committed, len(j.commit))
	for n, k := range j.commit {
		en := j.enc.Entries[k]
		committed[n] = Committed{Key: en.Key, Size: int64(en.ValueLen), CRC: en.CRC, Bucket: j.id}
	}
	var nerr, rerr error
	if j.notify != nil {
		nerr = j.notify(ctx, committed)
	}
	if nerr != nil {
		e.st.notifyFailures.Add(1)
		// Roll back: the master never heard of these keys, so the node
		// must not keep them (invariant 1).
		_, rerr = e.ix.DeleteBucket(j.id)
		if rerr != nil {
			// The entries stay and the bucket stays servable; the keys
			// are on disk, so a retry answers "already present", which
			// is true.
			e.log.Error("tier: rollback after notify failure failed; keeping bucket", "bucket", j.id, "err", rerr)
		}
	}

	e.mu.Lock()
	for _, c := range committed {
		delete(e.pending, string(c.Key))
	}
	var toDelete *bucketState
	// b is nil when its keys were all removed meanwhile and its file is
	// gone already.
	switch b := e.buckets[j.id]; {
	case b == nil || b.dead.Load():
	case nerr == nil || rerr != nil:
		b.notified = true
		e.policy.Add(j.id, b.size)
	default:
		toDelete = e.markDead(b)
	}
	close(j.pb.done)
	e.mu.Unlock()
	e.deleteFile(toDelete)

	for _, k := range j.commit {
		if nerr == nil {
			j.out[j.idx[k]] = Outcome{Status: Persisted}
		} else {
			j.out[j.idx[k]] = fail(fmt.Errorf("%w: %w", ErrNotifyFailed, nerr), true)
		}
	}
}

// discardWritten deletes a bucket file that was written but not committed
// and releases its reservation. A file that cannot be deleted is an orphan
// that the next Open removes.
func (e *Engine) discardWritten(id uint64, size int64) {
	if err := e.be.Delete(id); err != nil {
		e.log.Warn("tier: could not delete uncommitted bucket; the next Open removes it", "bucket", id, "err", err)
	}
	e.unreserve(size)
}
