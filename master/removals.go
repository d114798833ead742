package master

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
)

// The removal log (docs/design.md, "Object lifecycle", invariant 10).
//
// Every acknowledged removal is an entry of one ordered log: appended in
// memory under the shard lock that deletes the object (so log order and
// metadata order agree), made durable by the RemovalStore (group commit)
// before the removal is acknowledged, pulled by every node, and checked
// against every re-registration. An entry's sequence number is a put
// token taken under the log's lock, so entries are in sequence order and
// a put after the removal has a larger token.

// RemovalStore keeps the removal log durably: a file (FileRemovalStore,
// a single master's --state_dir), etcd (highly available masters, package
// ha), or memory (MemoryRemovalStore: what a Service without a store
// uses; a restart loses it, so nodes then drop their copies). Calls come
// from one Service at a time, one at a time.
type RemovalStore interface {
	// Load returns the log: its identity and origin ("" and 0 when the
	// store holds no log yet), its floor and the entries at or above it,
	// in sequence order.
	Load(ctx context.Context) (RemovalState, error)
	// Create records the identity and origin of a new log (after a Load
	// that found none). The floor starts at origin.
	Create(ctx context.Context, id string, origin uint64) error
	// Append makes entries durable, in order, before it returns.
	Append(ctx context.Context, entries []masterapi.Removal) error
	// Trim drops the entries below floor and records floor durably.
	Trim(ctx context.Context, floor uint64) error
}

// RemovalState is what a RemovalStore holds.
type RemovalState struct {
	ID      string
	Origin  uint64 // the first sequence number the log could hold
	Floor   uint64 // entries below were trimmed; >= Origin
	Entries []masterapi.Removal
}

// MemoryRemovalStore is a RemovalStore in memory. A Service without a
// store makes one of its own; tests that restart a master in one process
// share one between the two Services, as a file or etcd would be shared.
type MemoryRemovalStore struct {
	mu sync.Mutex // protects st
	st RemovalState
}

// NewMemoryRemovalStore returns an empty store.
func NewMemoryRemovalStore() *MemoryRemovalStore { return &MemoryRemovalStore{} }

// Load implements RemovalStore.
func (m *MemoryRemovalStore) Load(context.Context) (RemovalState, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.st
	st.Entries = append([]masterapi.Removal(nil), st.Entries...)
	return st, nil
}

// Create implements RemovalStore.
func (m *MemoryRemovalStore) Create(_ context.Context, id string, origin uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.st = RemovalState{ID: id, Origin: origin, Floor: origin}
	return nil
}

// Append implements RemovalStore.
func (m *MemoryRemovalStore) Append(_ context.Context, entries []masterapi.Removal) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.st.Entries = append(m.st.Entries, entries...)
	return nil
}

// Trim implements RemovalStore.
func (m *MemoryRemovalStore) Trim(_ context.Context, floor uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := 0
	for i < len(m.st.Entries) && m.st.Entries[i].Seq < floor {
		i++
	}
	m.st.Entries = append([]masterapi.Removal(nil), m.st.Entries[i:]...)
	m.st.Floor = max(m.st.Floor, floor)
	return nil
}

// removalLog is the Service's view of its log: the retained entries (the
// durable ones and those still being written), indexed for the
// re-registration checks.
type removalLog struct {
	store  RemovalStore
	id     string
	origin uint64
	// inherited: the store held a log when it was opened (a predecessor
	// wrote it), so the nodes may hold objects this master must rebuild.
	inherited bool

	mu sync.Mutex // protects the fields below; a leaf (taken under shard locks)
	// entries are the retained entries in sequence order; the first
	// durable of them are durable, the others wait for the store.
	entries []logEntry
	durable int // entries[:durable] are in the store
	floor   uint64
	set     *masterapi.RemovalSet // every retained entry, durable or not
	// flushing: a caller is writing entries to the store; others wait.
	flushing bool
	// changed is closed (and replaced) whenever durable or flushing
	// changes.
	changed chan struct{}
	// failed is the store's last error (nil after a success).
	failed error
}

// logEntry is a retained entry and when it was appended (unix ns).
type logEntry struct {
	masterapi.Removal
	at int64
	// open: a RemoveAll or RemoveByRegex still scanning; its Spared list
	// is not final, and it (with everything after it) is not written yet.
	open bool
}

// openRemovalLog loads store's log, creating one (origin: a fresh token)
// when it holds none.
func openRemovalLog(ctx context.Context, store RemovalStore, tokens *tokenSource, now int64) (*removalLog, error) {
	st, err := store.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: removal log: %w", ErrBadConfig, err)
	}
	l := &removalLog{store: store, set: masterapi.NewRemovalSet(), changed: make(chan struct{}), inherited: st.ID != ""}
	if st.ID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		st = RemovalState{ID: hex.EncodeToString(b[:]), Origin: tokens.next(now)}
		st.Floor = st.Origin
		if err := store.Create(ctx, st.ID, st.Origin); err != nil {
			return nil, fmt.Errorf("%w: removal log: creating it: %w", ErrBadConfig, err)
		}
	}
	l.id, l.origin, l.floor = st.ID, st.Origin, max(st.Floor, st.Origin)
	for _, e := range st.Entries {
		if e.Seq < l.floor {
			continue
		}
		if err := l.set.Add(e); err != nil {
			return nil, fmt.Errorf("%w: removal log %s: entry %d: %w", ErrBadConfig, l.id, e.Seq, err)
		}
		tokens.observe(e.Seq)
		l.entries = append(l.entries, logEntry{Removal: e, at: now})
	}
	l.durable = len(l.entries)
	tokens.observe(l.floor)
	return l, nil
}

// add appends r with a fresh sequence number and returns it. open marks
// a RemoveAll/RemoveByRegex entry whose scan has not ended (seal it with
// seal). Caller may hold a shard lock.
func (l *removalLog) add(r masterapi.Removal, tokens *tokenSource, now int64, open bool) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	r.Seq = tokens.next(now)
	l.entries = append(l.entries, logEntry{Removal: r, at: now, open: open})
	if !open {
		_ = l.set.Add(r) // a key or an every entry never fails; patterns are added by seal
	}
	return r.Seq
}

// seal ends the scan of the open entry seq: spared is its final list.
func (l *removalLog) seal(seq uint64, spared []string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.entries) - 1; i >= 0; i-- {
		e := &l.entries[i]
		if e.Seq == seq && e.open {
			e.Spared, e.open = spared, false
			close(l.changed) // writers waiting behind it may flush now
			l.changed = make(chan struct{})
			return l.set.Add(e.Removal)
		}
	}
	return fmt.Errorf("master: removal log: no open entry %d", seq)
}

// latest is the largest sequence number of a retained entry covering key
// (0: none).
func (l *removalLog) latest(key string) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.set.Latest(key)
}

// latestDRAM is latest for a DRAM copy: DRAM evictions count too.
func (l *removalLog) latestDRAM(key string) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.set.LatestDRAM(key)
}

// wait returns once the entry seq is durable, or ctx ends, or the store
// failed to write it (the error names the store's).
func (l *removalLog) wait(ctx context.Context, seq uint64) error {
	for tried := false; ; {
		l.mu.Lock()
		if l.durableSeqLocked() >= seq {
			l.mu.Unlock()
			return nil
		}
		if err := l.failed; err != nil && tried && !l.flushing {
			l.mu.Unlock()
			return errcode.Errorf(errcode.InternalError, "master: removal log: the removal is not durable: %v", err)
		}
		if !l.flushing && l.writableLocked() > 0 {
			l.flushLocked(ctx) // unlocks
			tried = true
			continue
		}
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			return fmt.Errorf("master: removal log: waiting for the removal to be durable: %w", ctx.Err())
		case <-ch:
		}
	}
}

// waitKey returns once no entry covering key is still being written (or
// ctx ends, or the store fails it). A put of a key must not be
// acknowledged before the removal that made room for it is durable: if
// that removal were lost (a crash, a leader cut from etcd), the copies it
// removed would come back over the newer put. A DRAM eviction made no
// room for a put (the object stays) and is not waited for. The common
// case (every entry durable) takes the log's lock once.
func (l *removalLog) waitKey(ctx context.Context, key string) error {
	l.mu.Lock()
	var seq uint64
	for _, e := range l.entries[l.durable:] {
		if e.Kind.DRAMOnly() {
			continue
		}
		if m, err := e.Matcher(); err == nil && m(key) {
			seq = e.Seq
		}
	}
	l.mu.Unlock()
	if seq == 0 {
		return nil
	}
	return l.wait(ctx, seq)
}

// durableSeqLocked is the largest durable sequence number.
func (l *removalLog) durableSeqLocked() uint64 {
	if l.durable == 0 {
		return l.floor
	}
	return l.entries[l.durable-1].Seq
}

// writableLocked is how many entries after the durable ones are ready to
// be written (the run before the first open one).
func (l *removalLog) writableLocked() int {
	n := 0
	for _, e := range l.entries[l.durable:] {
		if e.open {
			break
		}
		n++
	}
	return n
}

// flushLocked writes the writable entries with one Append and unlocks l.
// Caller holds l.mu and is not flushing.
func (l *removalLog) flushLocked(ctx context.Context) {
	n := l.writableLocked()
	batch := make([]masterapi.Removal, n)
	for i, e := range l.entries[l.durable : l.durable+n] {
		batch[i] = e.Removal
	}
	l.flushing = true
	l.mu.Unlock()
	err := l.store.Append(context.WithoutCancel(ctx), batch)
	l.mu.Lock()
	l.flushing = false
	l.failed = err
	if err == nil {
		l.durable += n
	}
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
}

// since returns up to limit durable entries above seq, and whether more
// follow.
func (l *removalLog) since(seq uint64, limit int) ([]masterapi.Removal, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []masterapi.Removal
	for _, e := range l.entries[:l.durable] {
		if e.Seq <= seq {
			continue
		}
		if len(out) == limit {
			return out, true
		}
		out = append(out, e.Removal)
	}
	return out, false
}

// position returns the log's id, floor and largest durable sequence
// number.
func (l *removalLog) position() (id string, floor, durable uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.id, l.floor, l.durableSeqLocked()
}

// trim drops the durable entries appended before keepAfter (unix ns) and
// those beyond the limit newest, raising the floor to the first entry
// kept (or past the last one dropped).
func (l *removalLog) trim(ctx context.Context, keepAfter int64, limit int) error {
	l.mu.Lock()
	n := 0
	for n < l.durable && (l.entries[n].at < keepAfter || len(l.entries)-n > limit) {
		n++
	}
	if n == 0 {
		l.mu.Unlock()
		return nil
	}
	floor := l.entries[n-1].Seq + 1
	l.mu.Unlock()
	if err := l.store.Trim(ctx, floor); err != nil {
		return fmt.Errorf("master: removal log: trim below %d: %w", floor, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.entries[:n] {
		l.set.Drop(e.Removal)
	}
	l.entries = append([]logEntry(nil), l.entries[n:]...)
	l.durable -= n
	l.floor = max(l.floor, floor)
	return nil
}

// stats returns the retained entries and how many are not durable yet.
func (l *removalLog) stats() (retained, pending int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.entries), len(l.entries) - l.durable
}
