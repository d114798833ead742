package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/tierstore/tierstore/internal/crc32c"
	"github.com/tierstore/tierstore/masterapi"
	"github.com/tierstore/tierstore/tier"
)

// An offload round runs in four phases, each a method of round:
//
//  1. fetch (Node.fetchTasks): the heartbeat, or a remount when the
//     master does not know the node;
//  2. validate (round.validate): tasks whose range cannot be this
//     object's are failed without touching the SSD;
//  3. offload (round.offload): the source bytes are copied out of the
//     segment and checked against the task's CRC, then handed to the tier
//     in chunks of about one bucket; every bucket is announced by
//     round.notifyBucket once it is durable and indexed (invariant 1);
//  4. answer (round.answer): every task not answered by a bucket notify is
//     answered in one final NotifyOffloadSuccess (invariant 3).

// offloadRound fetches up to OffloadBatch tasks, offloads them and answers
// every one of them. Caller holds roundMu. It returns how many offload
// tasks and how many promotion tasks the master handed out.
//
// The round runs on its own context, bounded by OffloadTaskTimeout (the
// master's task timeout), not the node's: Close waits for a round in
// progress to finish (SIGTERM drains); only the notify retries stop at
// Close (the buckets they were announcing are kept, invariant 9).
func (n *Node) offloadRound() (int, int) {
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.OffloadTaskTimeout)
	defer cancel()
	gen := n.mountGen.Load()
	tasks, promos := n.fetchTasks(ctx)
	// The promotions load while the offload runs (its victims may make
	// room for the next ones); the round ends once they are answered.
	defer n.startPromotions(ctx, promos)()
	if len(tasks) == 0 {
		return 0, len(promos)
	}
	// Removals first: an SSD copy this round writes is then newer than
	// every entry the node has applied (docs/design.md, invariant 10).
	if err := n.syncRemovals(ctx, true); err != nil {
		n.log.Debug("removal log pull before an offload round failed", "err", err)
	}
	n.metrics.offloadRounds.Add(1)
	r := &round{n: n, gen: gen, refused: map[string]error{}}
	r.validate(tasks)
	r.offload(ctx)
	r.answer(ctx)
	return len(tasks), len(promos)
}

// fetchTasks is phase 1: it asks the master for tasks (the same heartbeat
// exchanges the admission state and takes promotion tasks: admission.go).
// A master that does not know this node (it restarted or expired us) gets
// a remount and a re-registration now rather than at the next ping, and no
// tasks.
func (n *Node) fetchTasks(ctx context.Context) ([]masterapi.OffloadTask, []masterapi.PromoteTask) {
	var (
		tasks  []masterapi.OffloadTask
		promos []masterapi.PromoteTask
	)
	rep, err := n.m.Heartbeat(ctx, n.heartbeatRequest())
	if err == nil {
		n.takeAdmission(rep)
		tasks, promos = rep.Tasks, rep.Promotions
		if n.staleTerm(rep.Term) {
			promos = nil
		}
	} else {
		n.adm.stale = true // the report may not have arrived: send one again
	}
	if unknownNode(err) {
		if err := n.remount(ctx); err != nil {
			n.log.Warn("remount failed; will retry", "err", err)
			return nil, nil
		}
		n.reregister.Store(false)
		n.reRegister(ctx)
		return nil, nil
	}
	if err != nil {
		n.log.Debug("offload heartbeat failed", "err", err)
		return nil, nil
	}
	return n.dropStaleTasks(tasks), promos
}

// errSourceBytes: a task's DRAM source range could not be read or fails
// the task's CRC32C (a forced Remove freed it and a new put reused it).
var errSourceBytes = errors.New("node: offload source")

// job is one task of a round and its outcome.
type job struct {
	t   masterapi.OffloadTask
	out tier.Outcome
}

// round is the state of one offload round.
type round struct {
	n   *Node
	gen uint64 // n.mountGen when the tasks were fetched

	jobs  []job
	byKey map[string]masterapi.OffloadTask // the tasks of jobs, by key

	// failed: the failure answers of the final notify; causes: how many
	// failed for each cause (logged once per cause, counted by cause).
	failed []masterapi.OffloadFailure
	causes [numCauses]*causeTally

	// refusedMu guards refused: the tier may announce buckets from several
	// goroutines. refused holds the keys the master answered with an error
	// in a bucket notify; they are on SSD but unannounced, so answer
	// removes them again.
	refusedMu sync.Mutex
	refused   map[string]error
}

// fail answers key's task as failed for cause; a permanent cause is never
// retryable (issue 9 item 4: the master must not keep re-queueing a task
// that cannot succeed, pinning its DRAM source).
func (r *round) fail(key string, retryable bool, cause failCause, reason string) {
	if cause.permanent() {
		retryable = false
	}
	r.failed = append(r.failed, masterapi.OffloadFailure{Key: key, Retryable: retryable, Reason: reason})
	t := r.causes[cause]
	if t == nil {
		t = &causeTally{key: key, reason: reason, retryable: retryable}
		r.causes[cause] = t
	}
	t.count++
}

// validate is phase 2: it keeps the tasks whose range can hold their object
// on this node's segment and fails the others. The values are copied out of
// the segment later, chunk by chunk (offload).
func (r *round) validate(tasks []masterapi.OffloadTask) {
	r.jobs = make([]job, 0, len(tasks))
	r.byKey = make(map[string]masterapi.OffloadTask, len(tasks))
	for _, t := range tasks {
		if _, dup := r.byKey[t.Key]; dup {
			// The master hands a key out once; a duplicate is answered by
			// the first task's outcome.
			continue
		}
		if t.Segment != r.n.segName {
			r.fail(t.Key, false, causeBadTask, fmt.Sprintf("segment %q is not mounted on this node", t.Segment))
			continue
		}
		if t.Length != t.Size || t.Length <= 0 {
			r.fail(t.Key, false, causeBadTask, fmt.Sprintf("task range length %d differs from object size %d", t.Length, t.Size))
			continue
		}
		if t.Size > r.n.cfg.BucketSizeLimit {
			r.fail(t.Key, false, causeTooLarge, fmt.Sprintf("object of %d bytes is larger than --bucket_size_limit %d: it stays in DRAM only",
				t.Size, r.n.cfg.BucketSizeLimit))
			continue
		}
		r.byKey[t.Key] = t
		r.jobs = append(r.jobs, job{t: t})
	}
}

// notifyBucket is the tier's NotifyFunc: it announces one durable, indexed
// bucket (invariant 1). Keys the master refuses are recorded in r.refused.
func (r *round) notifyBucket(ctx context.Context, committed []tier.Committed) error {
	objs := make([]masterapi.SSDObject, len(committed))
	for i, c := range committed {
		if t, ok := r.byKey[string(c.Key)]; !ok || t.CRC != c.CRC || t.Size != c.Size {
			// Never announce bytes other than the task's: refuse the
			// whole bucket, the tier rolls it back.
			return fmt.Errorf("node: tier committed %q with size %d CRC %08x, the task says %d, %08x",
				c.Key, c.Size, c.CRC, t.Size, t.CRC)
		}
		objs[i] = masterapi.SSDObject{Key: string(c.Key), Size: c.Size, CRC: c.CRC}
	}
	errs, err := r.n.notify(ctx, masterapi.NotifyRequest{Node: r.n.name, Persisted: objs})
	if errors.Is(err, errNotAnswered) {
		// Invariant 9: the bucket is durable and indexed and the master
		// did not refuse it, it was unreachable (or forgot this node):
		// keep it; the re-registration that notify flagged announces it.
		r.n.log.Warn("bucket kept unannounced: the master did not answer its notify; it will be re-registered",
			"keys", len(objs), "err", err)
		return nil
	}
	if err != nil {
		return err // an explicit refusal: the tier rolls the bucket back
	}
	r.refusedMu.Lock()
	defer r.refusedMu.Unlock()
	for i, e := range errs {
		if e != nil && i < len(objs) {
			r.refused[objs[i].Key] = e
		}
	}
	return nil
}

// offload is phase 3. A tier that takes unstable values gets views of the
// segment (offloadViews). For any other, it copies each job's source bytes
// out of the segment, computing their CRC32C in the same pass, checks it
// against the task's CRC and hands the copies to the tier in chunks of
// about one bucket, so the copies stay bounded; each Offload call writes
// all its buckets, the tail included (invariant 3). The values are copied,
// not viewed in place: the master pins a task's source range, but a forced
// Remove may still free it and a new put reuse it, and such a tier must
// only ever see bytes that matched the task's CRC. The tier is handed that
// CRC (tier.Task.CRCKnown), which is the copy's, so the bucket records it
// without a pass of its own; a copy whose CRC differs from the task's never
// reaches the tier. The copies go to one buffer per chunk (Node.offloadBuf,
// kept from round to round) rather than an allocation per value.
func (r *round) offload(ctx context.Context) {
	if ut, ok := r.n.tier.(unstableTier); ok && ut.TakesUnstableValues() {
		r.offloadViews(ctx)
		return
	}
	var tt []tier.Task
	var tj []int // index into r.jobs of each task in tt
	var total int64
	for j := range r.jobs {
		total += max(r.jobs[j].t.Length, 0)
	}
	buf := r.n.offloadBuffer(min(total, r.n.cfg.BucketSizeLimit))
	used := 0 // bytes of buf holding the values of tt
	flush := func() {
		if len(tt) > 0 {
			r.offloadChunk(ctx, tt, tj)
		}
		tt, tj, used = tt[:0], tj[:0], 0
	}
	for j := range r.jobs {
		t := r.jobs[j].t
		n := int(t.Length)
		if err := r.n.seg.check(t.Offset, n); err != nil {
			r.jobs[j].out = tier.Outcome{Status: tier.Failed, Err: fmt.Errorf("%w: %w", errSourceBytes, err)}
			continue
		}
		var val []byte
		if n > len(buf) {
			val = make([]byte, n) // larger than the buffer: a copy of its own
		} else {
			if used+n > len(buf) {
				flush()
			}
			val = buf[used : used+n : used+n]
			used += n
		}
		crc, err := r.n.seg.readCRC(val, t.Offset)
		switch {
		case err != nil:
			r.jobs[j].out = tier.Outcome{Status: tier.Failed, Err: fmt.Errorf("%w: %w", errSourceBytes, err)}
			continue
		case crc != t.CRC:
			r.jobs[j].out = tier.Outcome{Status: tier.Failed, Err: fmt.Errorf("%w: DRAM replica fails its CRC32C", errSourceBytes)}
			continue
		}
		tt = append(tt, tier.Task{Key: []byte(t.Key), Value: val, CRC: crc, CRCKnown: true})
		tj = append(tj, j)
	}
	flush()
}

// offloadBufKeep is the largest offload copy buffer a node keeps between
// rounds; a round that needs more allocates it and lets it go.
const offloadBufKeep = 64 << 20

// offloadBuffer returns a buffer of n bytes for an offload round's copies:
// Node.offloadBuf when it is large enough, else a new one (kept for the
// next rounds when it is at most offloadBufKeep). Caller holds roundMu.
func (n *Node) offloadBuffer(size int64) []byte {
	if size <= int64(cap(n.offloadBuf)) {
		return n.offloadBuf[:size]
	}
	b := make([]byte, size)
	if size <= offloadBufKeep {
		n.offloadBuf = b
	}
	return b
}

// unstableTier is an SSDTier that takes values which may change while it
// writes them (tier.Task.Unstable: it writes only bytes whose CRC32C it
// checked as it copied them). tier.Engine is one.
type unstableTier interface {
	TakesUnstableValues() bool
}

// offloadViews is phase 3 for a tier that takes unstable values: the tier
// gets views of the segment, uncopied, with the task's CRC; it copies each
// into its write buffers, computing the CRC32C as it copies, and writes
// only a copy that matches (one copy and one CRC pass per byte, against
// two copies and two passes). A range freed and reused under the round
// fails its task with tier.ErrSourceChanged. The segment stays mapped
// (pinned) until the tier returns.
func (r *round) offloadViews(ctx context.Context) {
	view, release := r.n.seg.pin()
	defer release()
	var tt []tier.Task
	var tj []int // index into r.jobs of each task in tt
	var chunkBytes int64
	flush := func() {
		if len(tt) > 0 {
			r.offloadChunk(ctx, tt, tj)
		}
		tt, tj, chunkBytes = tt[:0], tj[:0], 0
	}
	for j := range r.jobs {
		t := r.jobs[j].t
		val, err := view(t.Offset, int(t.Length))
		if err != nil {
			r.jobs[j].out = tier.Outcome{Status: tier.Failed, Err: fmt.Errorf("%w: %w", errSourceBytes, err)}
			continue
		}
		tt = append(tt, tier.Task{Key: []byte(t.Key), Value: val, CRC: t.CRC, CRCKnown: true, Unstable: true})
		tj = append(tj, j)
		chunkBytes += t.Length
		if chunkBytes >= r.n.cfg.BucketSizeLimit {
			flush()
		}
	}
	flush()
}

// offloadChunk runs one tier.Offload call and records its outcomes in the
// jobs tj; a missing outcome is a retryable failure.
func (r *round) offloadChunk(ctx context.Context, tt []tier.Task, tj []int) {
	outs := r.n.tier.Offload(ctx, tt, r.notifyBucket)
	for i, j := range tj {
		if i < len(outs) {
			r.jobs[j].out = outs[i]
		} else {
			r.jobs[j].out = tier.Outcome{Status: tier.Failed, Err: errors.New("no outcome from the tier"), Retryable: true}
		}
	}
	if len(outs) != len(tt) {
		r.n.log.Error("tier answered the wrong number of outcomes", "tasks", len(tt), "outcomes", len(outs))
	}
}

// answer is phase 4: every job not already answered by its bucket's notify
// is answered in one final NotifyOffloadSuccess: keys already on SSD (after
// their stored bytes are checked against the task) as persisted, all others
// as failures with a reason; keys the master refused in a bucket notify are
// removed from SSD again.
func (r *round) answer(ctx context.Context) {
	n := r.n
	var persisted []masterapi.SSDObject
	var nPersisted int64
	for _, jb := range r.jobs {
		key, t, o := jb.t.Key, jb.t, jb.out
		switch o.Status {
		case tier.Persisted:
			if e, ok := r.refused[key]; ok {
				// Refused: the object was removed during the task
				// (OBJECT_NOT_FOUND), or its metadata differs. The node
				// keeps no unannounced object, unless it remounted
				// meanwhile and the re-registration will announce it.
				if !n.refusedKeepsCopy(e, r.gen) {
					n.removeFromSSD(key)
				}
				r.fail(key, false, causeMasterRefused, "master refused the replica: "+e.Error())
				continue
			}
			nPersisted++ // answered by the bucket's notify
		case tier.AlreadyPresent:
			// Mooncake #2827: not an error (invariant 2). The bytes on SSD
			// must still be this object's (the key may have been removed
			// and put again with other bytes since they were written).
			if n.ssdMatches(ctx, []byte(key), t.CRC, t.Size) {
				persisted = append(persisted, masterapi.SSDObject{Key: key, Size: t.Size, CRC: t.CRC})
			} else {
				n.removeFromSSD(key)
				r.fail(key, true, causeStaleCopy, "a stale copy with other bytes was on SSD; removed")
			}
		default:
			reason, cause := "failed", causeTier
			if o.Err != nil {
				reason, cause = o.Err.Error(), tierCause(o.Err)
				if errors.Is(o.Err, errSourceBytes) || errors.Is(o.Err, tier.ErrSourceChanged) {
					cause = causeSourceBytes
				}
			}
			r.fail(key, o.Retryable, cause, reason)
		}
	}
	if len(persisted) > 0 || len(r.failed) > 0 {
		errs, err := n.notify(ctx, masterapi.NotifyRequest{Node: n.name, Persisted: persisted, Failed: r.failed})
		if err != nil {
			// The master re-queues unanswered tasks after its task timeout
			// (a bounded number of times); keys on SSD are re-registered
			// (notify flagged it when the master did not answer).
			n.log.Warn("answering offload tasks failed", "persisted", len(persisted), "failed", len(r.failed), "err", err)
		} else if slices.ContainsFunc(errs, func(e error) bool { return e != nil }) {
			cols := masterapi.ColumnsOf(persisted)
			n.dropConflicts(&cols, errs, r.gen)
		}
	}
	n.metrics.offloadPersisted.Add(nPersisted + int64(len(persisted)))
	n.metrics.offloadFailed.Add(int64(len(r.failed)))
	r.logFailures()
}

// ssdMatches reports whether the SSD copy of key has the given CRC and size.
func (n *Node) ssdMatches(ctx context.Context, key []byte, crc uint32, size int64) bool {
	r := n.tier.Load(ctx, [][]byte{key})
	return len(r) == 1 && r[0].Err == nil && int64(len(r[0].Value)) == size && crc32c.Checksum(r[0].Value) == crc
}

func (n *Node) removeFromSSD(key string) {
	if err := n.tier.Remove([]byte(key)); err != nil && !errors.Is(err, tier.ErrNotFound) {
		n.log.Warn("removing unannounced SSD object", "key", key, "err", err)
	}
}
