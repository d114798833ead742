package tier

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/index"
)

// Exists reports whether key is on this node's SSD.
func (e *Engine) Exists(key []byte) (bool, error) {
	if err := validKey(key); err != nil {
		return false, err
	}
	if err := e.begin(); err != nil {
		return false, err
	}
	defer e.ops.Done()
	_, ok, err := e.ix.Get(key)
	return ok, err
}

// Stat returns what the index records of key (size, CRC32C, bucket) without
// reading the object. ErrNotFound when absent.
func (e *Engine) Stat(key []byte) (KeyInfo, error) {
	if err := validKey(key); err != nil {
		return KeyInfo{}, err
	}
	if err := e.begin(); err != nil {
		return KeyInfo{}, err
	}
	defer e.ops.Done()
	loc, ok, err := e.ix.Get(key)
	if err != nil {
		return KeyInfo{}, err
	}
	if !ok {
		return KeyInfo{}, fmt.Errorf("%w: %q", ErrNotFound, key)
	}
	return KeyInfo{Size: int64(loc.ValueLen), CRC: loc.CRC, Bucket: loc.Bucket}, nil
}

// Remove deletes key from the tier. The bucket file goes when its last key
// goes (after its readers finish). ErrNotFound when absent. The removal is a
// synced index batch under commitMu (so that a concurrent re-insertion
// cannot bring the key back); the engine lock is not held across it.
func (e *Engine) Remove(key []byte) error {
	if err := validKey(key); err != nil {
		return err
	}
	if err := e.begin(); err != nil {
		return err
	}
	defer e.ops.Done()
	e.commitMu.Lock()
	res, err := e.ix.RemoveKeys([][]byte{key})
	e.commitMu.Unlock()
	if err != nil {
		return err
	}
	if len(res.Removed) == 0 {
		return fmt.Errorf("%w: %q", ErrNotFound, key)
	}
	e.left(res.Removed)
	e.buryEmptied(res.Emptied)
	return nil
}

// RemoveKeys deletes keys from the tier in one synced index batch and
// returns how many it held; keys it does not hold are ignored. Buckets
// left without objects go (after their readers), as with Remove.
func (e *Engine) RemoveKeys(keys [][]byte) (int, error) {
	for _, k := range keys {
		if err := validKey(k); err != nil {
			return 0, err
		}
	}
	if len(keys) == 0 {
		return 0, nil
	}
	if err := e.begin(); err != nil {
		return 0, err
	}
	defer e.ops.Done()
	e.commitMu.Lock()
	res, err := e.ix.RemoveKeys(keys)
	e.commitMu.Unlock()
	if err != nil {
		return 0, err
	}
	e.left(res.Removed)
	e.buryEmptied(res.Emptied)
	return len(res.Removed), nil
}

// markFile holds the owner's mark (SetMark) in the tier's directory.
const markFile = "MARK"

// Mark returns what SetMark last stored (nil if never). The node keeps
// its removal log cursor there: the position of the log its SSD contents
// are consistent with.
func (e *Engine) Mark() ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(e.dir, markFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tier: reading the mark: %w", err)
	}
	return b, nil
}

// SetMark stores mark durably beside the tier's contents (a temporary
// file, fsync, rename, fsync of the directory), replacing the previous
// one.
func (e *Engine) SetMark(mark []byte) error {
	path := filepath.Join(e.dir, markFile)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("tier: writing the mark: %w", err)
	}
	if _, err = f.Write(mark); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		var d *os.File
		if d, err = os.Open(e.dir); err == nil {
			err = d.Sync()
			d.Close()
		}
	}
	if err != nil {
		return fmt.Errorf("tier: writing the mark: %w", err)
	}
	return nil
}

// Keys calls fn for every object on SSD whose announcement is not in flight,
// in key order, until fn returns false. A node uses it to re-register its
// objects with the master.
func (e *Engine) Keys(fn func(key []byte, info KeyInfo) bool) error {
	if err := e.begin(); err != nil {
		return err
	}
	defer e.ops.Done()
	return e.ix.Keys(func(k []byte, loc index.Location) bool {
		e.mu.Lock()
		_, pending := e.pending[string(k)]
		e.mu.Unlock()
		if pending {
			return true
		}
		return fn(k, KeyInfo{Size: int64(loc.ValueLen), CRC: loc.CRC, Bucket: loc.Bucket})
	})
}

// Stats returns a snapshot of the engine's counters.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	s := Stats{
		Buckets:   int64(len(e.buckets)),
		BytesUsed: e.used,
		Capacity:  e.opts.Capacity,
	}
	for _, b := range e.buckets {
		if b.dead.Load() {
			s.DeadBytes += b.written // its file waits for its readers
			continue
		}
		s.LiveBytes += b.live
		s.DeadBytes += b.written - b.live
	}
	s.MostlyDeadBuckets = int64(len(e.dying))
	e.mu.Unlock()
	s.Objects = e.ix.Count()
	s.BucketsWritten = e.st.bucketsWritten.Load()
	s.BytesWritten = e.st.bytesWritten.Load()
	s.ObjectsLoaded = e.st.objectsLoaded.Load()
	s.BytesRead = e.st.bytesRead.Load()
	s.Evictions = e.st.evictions.Load()
	s.EvictedKeys = e.st.evictedKeys.Load()
	s.ChecksumErrors = e.st.checksumErrors.Load()
	s.NotifyFailures = e.st.notifyFailures.Load()
	s.OrphanFilesRemoved = e.st.orphans.Load()
	s.EntriesDropped = e.st.dropped.Load()
	s.ReinsertedObjects = e.st.reinsertedObjects.Load()
	s.ReinsertedBytes = e.st.reinsertedBytes.Load()
	s.DiscardedBuckets = e.st.discardedBuckets.Load()
	s.DiscardedBytes = e.st.discardedBytes.Load()
	s.EvictedLiveBytes = e.st.evictedLiveBytes.Load()
	s.EvictedDeadBytes = e.st.evictedDeadBytes.Load()
	s.OpenTime, s.IndexOpenTime = e.openTime, e.indexOpenTime
	s.OpenBucketReads = e.st.openReads.Load()
	s.OpenAfterCleanClose = e.lastSession.Clean
	return s
}

// Backend returns the engine's backend (for its name and metrics).
func (e *Engine) Backend() backend.Backend { return e.be }

// Close waits for calls in progress, then records a clean close in the
// index's session record (the next Open reads no bucket) and closes the
// index and the backend (the engine owns both, including a Backend passed
// in Options).
func (e *Engine) Close() error { return e.close(true) }

// close is Close; clean false leaves the session record as Open wrote it,
// as a crash does (tests).
func (e *Engine) close(clean bool) error {
	e.life.Lock()
	if e.closed {
		e.life.Unlock()
		return ErrClosed
	}
	e.closed = true
	e.life.Unlock()
	e.ops.Wait()
	// A clean close: every bucket in the index is committed and durable,
	// so the next Open reads none (the session record, format 3). A failed
	// index keeps the record of the session's Open.
	e.mu.Lock()
	next := e.nextID
	e.mu.Unlock()
	if !clean {
		return errors.Join(e.ix.Close(), e.be.Close())
	}
	if err := e.ix.SetSession(index.Session{ProvenBelow: next, Clean: true}); err != nil {
		e.log.Warn("tier: close: recording a clean close failed; the next Open reads this session's buckets", "err", err)
	}
	return errors.Join(e.ix.Close(), e.be.Close())
}
