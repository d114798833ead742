package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tierstore/tierstore/internal/codes"
	"github.com/tierstore/tierstore/master"
	"github.com/tierstore/tierstore/tier"
)

// offloadRoundTimeout bounds one offload round (tier writes + notifies).
const offloadRoundTimeout = 5 * time.Minute

// offloadRound fetches up to OffloadBatch tasks, offloads them and answers
// every one of them through NotifyOffloadSuccess: persisted keys (in the
// per-bucket notify that publishes them, invariant 1, or, for keys already
// on SSD, in the final answer) and explicit failures for all others
// (invariant 3: each task ends exactly once). Caller holds roundMu. It
// returns how many tasks the master handed out.
//
// The round runs on its own context, not the node's: Close waits for a
// round in progress to finish (SIGTERM drains).
func (n *Node) offloadRound() int {
	ctx, cancel := context.WithTimeout(context.Background(), offloadRoundTimeout)
	defer cancel()
	tasks, err := n.m.OffloadHeartbeat(ctx, n.name, n.cfg.OffloadBatch)
	if errors.Is(err, codes.ErrNeedRemount) || errors.Is(err, codes.ErrClientNotFound) {
		// The master does not know this node (it restarted or expired us):
		// remount and re-register now rather than at the next ping.
		if err := n.mount(ctx); err != nil {
			n.log.Warn("remount failed; will retry", "err", err)
			return 0
		}
		n.metrics.remounts.Add(1)
		n.reregister.Store(false)
		n.reRegister(ctx)
		return 0
	}
	if err != nil {
		n.log.Debug("offload heartbeat failed", "err", err)
		return 0
	}
	if len(tasks) == 0 {
		return 0
	}
	n.metrics.offloadRounds.Add(1)

	var failed []master.OffloadFailure
	fail := func(key string, retryable bool, reason string) {
		failed = append(failed, master.OffloadFailure{Key: key, Retryable: retryable, Reason: reason})
	}
	view, release := n.seg.pin()
	defer release()
	tt := make([]tier.Task, 0, len(tasks))
	byKey := make(map[string]master.OffloadTask, len(tasks))
	for _, t := range tasks {
		if _, dup := byKey[t.Key]; dup {
			// The master hands a key out once; a duplicate is answered by
			// the first task's outcome.
			continue
		}
		if t.Segment != n.segName {
			fail(t.Key, false, fmt.Sprintf("segment %q is not mounted on this node", t.Segment))
			continue
		}
		if t.Length != t.Size {
			fail(t.Key, false, fmt.Sprintf("task range length %d differs from object size %d", t.Length, t.Size))
			continue
		}
		val, err := view(t.Offset, int(t.Length))
		if err != nil {
			fail(t.Key, false, err.Error())
			continue
		}
		if CRC32C(val) != t.CRC {
			fail(t.Key, false, "DRAM replica fails its CRC32C")
			continue
		}
		byKey[t.Key] = t
		tt = append(tt, tier.Task{Key: []byte(t.Key), Value: val})
	}

	// refused: keys the master answered with an error in a bucket notify;
	// they are on SSD but unannounced, so they are removed again below.
	refused := map[string]error{}
	notify := func(ctx context.Context, committed []tier.Committed) error {
		objs := make([]master.DiskObject, len(committed))
		for i, c := range committed {
			objs[i] = master.DiskObject{Key: string(c.Key), Size: c.Size, CRC: c.CRC}
		}
		errs, err := n.m.NotifyOffloadSuccess(ctx, master.NotifyRequest{Node: n.name, Persisted: objs})
		if err != nil {
			return err
		}
		for i, e := range errs {
			if e != nil && i < len(objs) {
				refused[objs[i].Key] = e
			}
		}
		return nil
	}
	var outs []tier.Outcome
	if len(tt) > 0 {
		outs = n.tier.Offload(ctx, tt, notify)
	}
	if len(outs) != len(tt) {
		n.log.Error("tier answered the wrong number of outcomes", "tasks", len(tt), "outcomes", len(outs))
	}

	var persisted []master.DiskObject
	var nPersisted int64
	for i := range tt {
		key := string(tt[i].Key)
		if i >= len(outs) {
			fail(key, true, "no outcome from the tier")
			continue
		}
		o := outs[i]
		t := byKey[key]
		switch o.Status {
		case tier.Persisted:
			if e, ok := refused[key]; ok {
				n.removeFromSSD(key)
				fail(key, false, "master refused the replica: "+e.Error())
				continue
			}
			nPersisted++ // answered by the bucket's notify
		case tier.AlreadyPresent:
			// Reference 002: not an error. The bytes on SSD must still be
			// this object's (the key may have been removed and put again
			// with other bytes since they were written).
			if n.ssdMatches(ctx, tt[i].Key, t.CRC, t.Size) {
				persisted = append(persisted, master.DiskObject{Key: key, Size: t.Size, CRC: t.CRC})
			} else {
				n.removeFromSSD(key)
				fail(key, true, "a stale copy with other bytes was on SSD; removed")
			}
		default:
			reason := "failed"
			if o.Err != nil {
				reason = o.Err.Error()
			}
			fail(key, o.Retryable, reason)
		}
	}
	if len(persisted) > 0 || len(failed) > 0 {
		errs, err := n.m.NotifyOffloadSuccess(ctx, master.NotifyRequest{Node: n.name, Persisted: persisted, Failed: failed})
		if err != nil {
			// The master re-queues unanswered tasks after its task timeout;
			// already-present keys are re-registered at the next remount.
			n.log.Warn("answering offload tasks failed", "persisted", len(persisted), "failed", len(failed), "err", err)
		} else {
			n.dropConflicts(persisted, errs)
		}
	}
	n.metrics.offloadPersisted.Add(nPersisted + int64(len(persisted)))
	n.metrics.offloadFailed.Add(int64(len(failed)))
	return len(tasks)
}

// ssdMatches reports whether the SSD copy of key has the given CRC and size.
func (n *Node) ssdMatches(ctx context.Context, key []byte, crc uint32, size int64) bool {
	r := n.tier.Load(ctx, [][]byte{key})
	return len(r) == 1 && r[0].Err == nil && int64(len(r[0].Value)) == size && CRC32C(r[0].Value) == crc
}

func (n *Node) removeFromSSD(key string) {
	if err := n.tier.Remove([]byte(key)); err != nil && !errors.Is(err, tier.ErrNotFound) {
		n.log.Warn("removing unannounced SSD object", "key", key, "err", err)
	}
}

// Close drains and stops the node: the loops stop after the offload round
// in progress (which finishes and answers its tasks), the segment is
// unmounted at the master, the peer service stops after its in-flight calls
// (bounded), then the tier and the segment are closed.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		n.cancel()
		n.wg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := n.m.UnmountSegment(ctx, n.name, n.segName); err != nil {
			n.log.Warn("unmount at close failed", "err", err)
		}
		cancel()
		if n.srv != nil {
			done := make(chan struct{})
			go func() { n.srv.GracefulStop(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				n.srv.Stop()
			}
			n.srv = nil
		}
		n.closeErr = n.release()
		n.log.Info("node stopped")
	})
	return n.closeErr
}

// release frees the tier, the listener and the segment.
func (n *Node) release() error {
	var errs []error
	if n.srv != nil {
		n.srv.Stop()
	} else if n.lis != nil {
		n.lis.Close()
	}
	if n.tier != nil {
		if err := n.tier.Close(); err != nil {
			errs = append(errs, fmt.Errorf("client: closing the SSD tier: %w", err))
		}
	}
	if n.seg != nil {
		if err := n.seg.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
