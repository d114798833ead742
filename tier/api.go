package tier

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tierstore/tierstore/backend"
)

// Errors of the tier engine. Check with errors.Is.
var (
	// ErrInvalidKey: a key is empty or longer than keyspec.MaxLen (Mooncake
	// INVALID_KEY, -400).
	ErrInvalidKey = errors.New("tier: invalid key")
	// ErrNotFound: the key is not on this node's SSD (OBJECT_NOT_FOUND, -704).
	ErrNotFound = errors.New("tier: object not found")
	// ErrChecksum: the stored bytes fail their CRC32C or do not decode
	// (CHECKSUM_MISMATCH, -801). The entry has been dropped from the index.
	ErrChecksum = errors.New("tier: checksum mismatch")
	// ErrTooLarge: the object is larger than a bucket may be.
	ErrTooLarge = errors.New("tier: object larger than the bucket size limit")
	// ErrNoSpace: the object cannot fit even after evicting every evictable
	// bucket, or the device is full.
	ErrNoSpace = errors.New("tier: no space")
	// ErrNotifyFailed: the notify callback refused the bucket; the keys were
	// rolled back and may be offloaded again.
	ErrNotifyFailed = errors.New("tier: notify failed")
	// ErrClosed: the engine was closed.
	ErrClosed = errors.New("tier: closed")
	// ErrBadOptions: Options are invalid; the message names the field.
	ErrBadOptions = errors.New("tier: invalid options")
	// ErrSourceChanged: an Unstable task's value no longer had the CRC32C
	// the task gave when the engine copied it; nothing of it was written.
	ErrSourceChanged = errors.New("tier: source bytes changed during the offload")
	// ErrBufferTooSmall: a LoadInto buffer is shorter than its value (the
	// message names the key and both sizes); nothing was written to it.
	ErrBufferTooSmall = errors.New("tier: buffer too small")
)

// Task is one object to move to SSD.
type Task struct {
	Key   []byte
	Value []byte
	// CRC, when CRCKnown, is the CRC32C of Value, computed by the caller
	// (the node computes it while copying the value out of DRAM, and checks
	// it against the object's): the bucket records it without a pass over
	// Value. The engine does not check it; a CRC that is not Value's makes
	// every Load of the key fail with ErrChecksum (and drop the entry).
	CRC      uint32
	CRCKnown bool
	// Unstable says that Value may change while Offload runs (a view of
	// memory another writer may reuse): the engine then writes only bytes
	// it copied and whose CRC32C is CRC (CRCKnown required to avoid a copy
	// of the engine's own: a backend.CheckedWriter checks while staging the
	// O_DIRECT writes), and fails a task whose bytes differ with
	// ErrSourceChanged (retryable).
	Unstable bool
}

// TakesUnstableValues reports that Offload takes Task.Unstable values
// (always: it checks them while staging its writes, or copies them first).
func (e *Engine) TakesUnstableValues() bool { return true }

// Status is how an offload task ended.
type Status int

const (
	// Persisted: the object was written by this call, committed to the index
	// and announced through notify.
	Persisted Status = iota + 1
	// AlreadyPresent: the key was already on this node's SSD with the same
	// bytes (same length and CRC32C), committed by an earlier or concurrent
	// call; nothing new was committed. Not an error (Mooncake #2827). A key on
	// SSD with other bytes is replaced by the new value (Persisted).
	AlreadyPresent
	// Failed: the object is not on SSD. Err says why; Retryable says whether
	// the same task may succeed later.
	Failed
)

func (s Status) String() string {
	switch s {
	case Persisted:
		return "persisted"
	case AlreadyPresent:
		return "already-present"
	case Failed:
		return "failed"
	}
	return "unknown"
}

// Outcome answers one Task. Offload returns exactly one per task, in order.
type Outcome struct {
	Key       []byte
	Status    Status
	Err       error
	Retryable bool
}

// Committed describes one object of a bucket that was made durable and
// committed to the index, as passed to NotifyFunc.
type Committed struct {
	Key    []byte
	Size   int64  // value length in bytes
	CRC    uint32 // CRC32C (Castagnoli) of the value
	Bucket uint64
}

// NotifyFunc announces committed objects to their owner (the master). It is
// called once per bucket with exactly the keys that bucket committed, after
// they are durable and readable through Load. If it returns an error the
// engine rolls those keys back and deletes the bucket. One Offload call may
// run it concurrently for different buckets (buckets are pipelined), so it
// must be safe for concurrent use.
type NotifyFunc func(ctx context.Context, committed []Committed) error

// EvictFunc asks the owner (the master) about the keys of a victim bucket
// before its bytes are deleted (invariant 7). It is called once per victim
// with that bucket's keys and returns the keys that must be KEPT, for
// example because a reader holds a lease on them and this SSD has their only
// readable copy (invariant 4). The engine re-inserts the kept objects into a
// new bucket (read from the victim and CRC-checked, committed under the same
// key, size and CRC, so the owner needs no announcement), then deletes the
// victim; the other keys are evicted. Keys in keep that are not in keys are
// ignored. The re-insertion is bounded (see Options.OnEvict).
//
// An error means "not now" (the owner cannot be reached): the bucket and its
// keys stay, and eviction tries the next candidate. EvictFunc is also called,
// after the fact, for objects dropped because they failed their checksum;
// keep and the error are then only logged.
type EvictFunc func(ctx context.Context, keys [][]byte) (keep [][]byte, err error)

// Options configure an Engine. The zero value of each field takes the
// documented default.
type Options struct {
	// Backend stores bucket files. Default: a pwrite backend on Dir/buckets.
	Backend backend.Backend
	// Capacity is the byte capacity of the tier (bucket file bytes). 0 means
	// no limit.
	Capacity int64
	// HighWatermark and LowWatermark are fractions of Capacity: a commit that
	// would cross High evicts whole buckets down to Low. Defaults 0.90, 0.80.
	HighWatermark, LowWatermark float64
	// EvictToFit makes a commit that would cross High evict whole buckets
	// only until it fits under High, not down to Low: each eviction takes
	// the policy's next victims for the bytes being written and no more.
	// With an admission that compares a candidate with the buckets its
	// bytes would displace (the master's tinylfu, against the "worth"
	// policy's victims in the SSD report), evicting down to Low pushes out
	// further buckets the candidate was never compared with, and leaves
	// the room between the watermarks to be refilled only by candidates
	// that win (docs/benchmarks.md, churn stop 40). The node sets it with
	// --bucket_eviction=worth.
	EvictToFit bool
	// Eviction is the bucket eviction policy: "lru" (by last read, the
	// default) or "fifo".
	Eviction string
	// Compression is "none" (default) or "lz4"; lz4 is kept for an object
	// only when it saves at least 10%.
	Compression string
	// BucketKeysLimit and BucketBytesLimit bound one bucket. Defaults 500 and
	// 256 MiB (or a tenth of Capacity when that is smaller). BucketBytesLimit
	// may not exceed Capacity.
	BucketKeysLimit  int
	BucketBytesLimit int64
	// OnEvict is called before evicted buckets are deleted. May be nil
	// (every victim is evicted whole). Re-insertion of the objects it keeps
	// is bounded: a victim is re-inserted only when its kept objects take
	// at most half of its bytes (re-writing most of a bucket frees little;
	// such a victim is passed over like a refusal), and the bytes
	// re-inserted to make room for one offloaded bucket are at most that
	// bucket's size, so re-insertion at most doubles the bytes written.
	OnEvict EvictFunc
	// IndexFS is the filesystem of the pebble index (tests inject errorfs or
	// a crashable memory FS). Default: the OS filesystem.
	IndexFS vfs.FS
	// IndexCacheSize is pebble's block cache in bytes. Default 8 MiB.
	IndexCacheSize int64
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// LoadResult answers one key of Load.
type LoadResult struct {
	Value []byte
	Err   error
}

// KeyInfo is what Keys yields for each object on SSD.
type KeyInfo struct {
	Size   int64
	CRC    uint32
	Bucket uint64
}

// Stats is a snapshot of the engine's counters.
type Stats struct {
	Objects   int64
	Buckets   int64
	BytesUsed int64 // bucket file bytes
	// LiveBytes is the stored bytes of the objects the tier holds;
	// DeadBytes those of objects removed, superseded by a newer offload or
	// moved away whose bucket file is still on disk (the rest of
	// BytesUsed is the bucket format: headers, trailers, alignment). An
	// object leaves LiveBytes in the synced batch that removes it.
	LiveBytes, DeadBytes int64
	// MostlyDeadBuckets counts the buckets whose dead bytes are at least
	// half their object bytes: eviction takes them first, most dead first.
	MostlyDeadBuckets int64
	Capacity          int64
	BucketsWritten    int64
	BytesWritten      int64
	ObjectsLoaded     int64
	BytesRead         int64
	Evictions         int64 // buckets evicted
	EvictedKeys       int64
	ChecksumErrors    int64
	NotifyFailures    int64
	// Repaired at the last Open: orphan bucket files removed and index
	// entries dropped because their bucket was missing or invalid.
	OrphanFilesRemoved int64
	EntriesDropped     int64
	// ReinsertedObjects and ReinsertedBytes count objects rewritten into
	// new buckets because the owner kept them when their bucket was
	// evicted, and the bucket bytes written for them: write amplification
	// beyond BytesWritten's first copies.
	ReinsertedObjects int64
	ReinsertedBytes   int64
	// DiscardedBuckets and DiscardedBytes count buckets written and then
	// deleted uncommitted because every key in them was already on SSD
	// (a re-offload, Mooncake #2827: the check is at commit time).
	DiscardedBuckets int64
	DiscardedBytes   int64
	// EvictedLiveBytes and EvictedDeadBytes split the object bytes of the
	// evicted buckets: live objects lost with their bucket (not counting
	// those re-inserted) and dead ones reclaimed.
	EvictedLiveBytes, EvictedDeadBytes int64
	// OpenTime is how long Open took, IndexOpenTime the part spent opening
	// the index (pebble, its WAL replay, the bucket records); the rest is
	// the reconciliation of index and files.
	OpenTime, IndexOpenTime time.Duration
	// OpenBucketReads is how many buckets Open read to prove them against
	// their index records (the buckets the session record does not cover:
	// none after a clean close, those a crashed session wrote after a
	// crash), and OpenAfterCleanClose whether the last session closed
	// cleanly.
	OpenBucketReads     int64
	OpenAfterCleanClose bool
}
