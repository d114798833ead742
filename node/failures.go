package node

import (
	"errors"
	"log/slog"

	"github.com/tierstore/tierstore/internal/keyspec"
	"github.com/tierstore/tierstore/tier"
)

// failCause classifies why an offload task failed; it is the "reason"
// label of tierstore_node_offload_failures_total.
type failCause int

const (
	causeBadTask       failCause = iota // the task's segment or range cannot be this object's
	causeSourceBytes                    // the DRAM source range fails its CRC32C or cannot be read
	causeTooLarge                       // the object is larger than --bucket_size_limit
	causeNoSpace                        // the SSD is full (nothing evictable, or ENOSPC)
	causeMasterRefused                  // the master refused the replica (object removed, other size/CRC)
	causeNotifyRefused                  // the master refused the bucket's notify; rolled back
	causeStaleCopy                      // a copy with other bytes was on SSD; removed
	causeTier                           // any other tier failure
	numCauses
)

var causeNames = [numCauses]string{"bad_task", "source_bytes", "too_large", "no_space", "master_refused", "notify_refused", "stale_copy", "tier"}

func (c failCause) String() string { return causeNames[c] }

// permanent reports whether a failure of this cause can never succeed by
// retrying the same task: an object larger than a bucket, a full SSD
// (Mooncake's on-evict admission would otherwise keep the DRAM source
// pinned by retries, the on-evict wedge of issue 9 item 4).
func (c failCause) permanent() bool { return c == causeTooLarge || c == causeNoSpace }

// tierCause classifies a tier.Outcome error.
func tierCause(err error) failCause {
	switch {
	case errors.Is(err, tier.ErrTooLarge):
		return causeTooLarge
	case errors.Is(err, tier.ErrNoSpace):
		return causeNoSpace
	case errors.Is(err, tier.ErrNotifyFailed):
		return causeNotifyRefused
	}
	return causeTier
}

// causeTally is one cause's failures in one round: how many, and the first
// one's key and reason (logged once per cause and round).
type causeTally struct {
	count     int
	key       string
	reason    string
	retryable bool
}

// logFailures logs one line per cause of this round's failures, with the
// count, the SSD directory and the first key, and counts them by cause.
func (r *round) logFailures() {
	for c, t := range r.causes {
		if t == nil {
			continue
		}
		r.n.metrics.failedBy[c].Add(int64(t.count))
		level := slog.LevelInfo // the ordinary races of a busy store
		if failCause(c).permanent() || failCause(c) == causeSourceBytes || failCause(c) == causeTier {
			level = slog.LevelWarn
		}
		r.n.log.Log(r.n.ctx, level, "offload tasks failed", "cause", failCause(c).String(), "count", t.count,
			"retryable", t.retryable, "ssd_dir", r.n.cfg.SSDDir, "first_key_hex", keyspec.Show(t.key), "reason", t.reason)
	}
}
