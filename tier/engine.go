package tier

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/bucket"
	"github.com/tierstore/tierstore/eviction"
	"github.com/tierstore/tierstore/index"
	"github.com/tierstore/tierstore/internal/keyspec"
)

// offloadPipeline is how many buckets of one Offload call are in flight at
// once (encoding, writing, committing, notifying).
const offloadPipeline = 2

// Engine is the node-local SSD tier. See the package documentation for its
// invariants and concurrency contract.
type Engine struct {
	dir   string
	opts  Options
	be    backend.Backend
	ix    *index.Index
	lim   bucket.Limits
	codec bucket.Codec
	log   *slog.Logger

	// life guards closed and the Add side of ops: calls take it shared to
	// register themselves, Close takes it exclusively to stop new calls.
	life   sync.RWMutex
	closed bool
	// ops counts calls in progress (an asynchronous Load until its
	// callback returns) so that Close can wait for them.
	ops sync.WaitGroup

	// commitMu serialises the index writes that must follow a check of the
	// index: the duplicate check of an offloaded bucket with its commit
	// (invariant 2: of two offloads of one key exactly one commits), the
	// check of a re-inserted object with its move, and Remove. It is held
	// across synced pebble commits; Load never takes it.
	commitMu sync.Mutex

	// mu guards the in-memory state below. It is held only for memory
	// operations: never across I/O on bucket files, a pebble write or a
	// callback, so that a Load never waits for a disk or a WAL sync.
	mu      sync.Mutex
	buckets map[uint64]*bucketState // every bucket file the engine knows
	// dying holds the buckets that are at least half dead and
	// not dead yet: the first eviction candidates (space.go).
	dying    map[uint64]*bucketState
	policy   eviction.Policy // committed, notified, evictable buckets
	used     int64           // bytes of bucket files present
	reserved int64           // bytes reserved by bucket writes in progress
	nextID   uint64          // next bucket id to hand out
	// worthGen counts SetWorthFreq calls: a bucket's cached worth
	// (bucketState.worth) is of the frequencies of generation worthGen.
	worthGen uint64
	// pending holds keys being committed, or committed and waiting for
	// their notify. They are registered before the commit, so that a key
	// found in the index and not pending has its notify settled. A
	// concurrent offload of such a key waits for the outcome instead of
	// answering "already present" for a key that may be rolled back; Keys
	// skips them.
	pending map[string]*pendingBucket

	st counters
	// openTime and indexOpenTime are how long Open took, and its index
	// part (set by Open, read-only afterwards).
	openTime, indexOpenTime time.Duration
	// lastSession is the session record Open found (read-only afterwards).
	lastSession index.Session

	// Test hooks, set by tests before the engine is used.
	//
	// testHookPendingWait runs each time an Offload starts waiting for
	// another call's pending notify.
	testHookPendingWait func()
	// testHookCommit, when it returns an error, fails the index commit of
	// a bucket before it is attempted.
	testHookCommit func(id uint64) error
	// testHookReinserted runs after a re-insertion's index commit, before
	// the victim's file is deleted.
	testHookReinserted func(id uint64)
	// noDeadFirst turns off the eviction of mostly dead buckets before the
	// policy's order (set by the benchmark that measures what it buys).
	noDeadFirst bool
}

// bucketState is the engine's view of one bucket file. Its plain fields are
// guarded by Engine.mu. readers, dead and deleted are atomic so that a Load
// can drop its reference without the engine lock: readers is only increased
// under Engine.mu after checking dead, dead only becomes true under
// Engine.mu, and whoever sees "dead and no readers" first (CAS on deleted)
// deletes the file.
type bucketState struct {
	id   uint64
	size int64
	// written is the stored bytes of every object written into the file,
	// live the stored bytes of those the index still holds there (objects
	// removed, superseded by a newer offload or moved away left it in
	// the same synced batch). written-live is the bucket's dead bytes.
	written, live int64
	notified      bool // notify succeeded (the bucket is evictable)
	// worth caches the bucket's worth per byte for the "worth" eviction
	// policy (SetWorthFreq): valid while worthGen is Engine.worthGen and
	// worthLive is live.
	worth     float64
	worthGen  uint64
	worthLive int64
	evicting  bool // chosen as an eviction victim
	// drained is closed when the bucket is dead and its file deleted; it
	// is made (under Engine.mu) before dead is set.
	drained chan struct{}

	readers atomic.Int32 // Loads reading the file now
	dead    atomic.Bool  // gone from the index; the file goes when readers reach 0
	deleted atomic.Bool  // the file deletion has been started
}

type pendingBucket struct {
	done chan struct{}
}

type counters struct {
	bucketsWritten, bytesWritten           atomic.Int64
	objectsLoaded, bytesRead               atomic.Int64
	evictions, evictedKeys, checksumErrors atomic.Int64
	notifyFailures, orphans, dropped       atomic.Int64
	openReads                              atomic.Int64
	reinsertedObjects, reinsertedBytes     atomic.Int64
	discardedBuckets, discardedBytes       atomic.Int64
	evictedLiveBytes, evictedDeadBytes     atomic.Int64
}

func (e *Engine) begin() error {
	e.life.RLock()
	defer e.life.RUnlock()
	if e.closed {
		return ErrClosed
	}
	e.ops.Add(1)
	return nil
}

func validKey(k []byte) error {
	if len(k) == 0 {
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	if len(k) > keyspec.MaxLen {
		return fmt.Errorf("%w: key of %d bytes exceeds %d", ErrInvalidKey, len(k), keyspec.MaxLen)
	}
	return nil
}
