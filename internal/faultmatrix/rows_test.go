package faultmatrix

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/tierstore/tierstore/backend/faulty"
	"github.com/tierstore/tierstore/tier"
)

const (
	eio    = "input/output error"
	nospc  = "no space"
	layerI = "index (pebble)"
	layerB = "bucket backend"
	// bigKey is the key length of the rows that make pebble flush: long
	// keys fill its 4 MiB memtables with few objects.
	bigKey = 4000
)

// bigOpts: buckets of 100 objects, so that one commit batch stays well
// below a memtable.
var bigOpts = tier.Options{BucketKeysLimit: 100}

// offloadFailing offloads 3 objects (one bucket) while the fault is armed
// and clears it with disarm.
func (v *env) offloadFailing(cause string, disarm func()) faulted {
	ts := v.tasks("during", 3, 0, 5000)
	out := v.offload(ts)
	disarm()
	return faulted{
		call:    "Offload",
		outcome: fmt.Sprintf("%s; stray bucket files left: %d", v.failedOffload(out, cause), v.strayFiles()),
		offered: keysOf(ts),
	}
}

func keysOf(ts []tier.Task) [][]byte {
	ks := make([][]byte, len(ts))
	for i, t := range ts {
		ks[i] = t.Key
	}
	return ks
}

// persistedAll requires every outcome to be Persisted.
func (v *env) persistedAll(out []tier.Outcome) {
	v.t.Helper()
	for _, o := range out {
		if o.Status != tier.Persisted {
			v.t.Fatalf("offload of %.20q: %v %v", o.Key, o.Status, o.Err)
		}
	}
}

// loadFailing loads the announced objects while the fault is armed.
func (v *env) loadFailing(cause string) (string, int) {
	keys, _ := v.snapshot()
	ok, errs := v.loadCheck(keys)
	if ok != 0 {
		v.errorf("%d loads succeeded under the fault", ok)
	}
	return fmt.Sprintf("%d/%d fail (%s)", len(errs), len(keys), v.sameErrors("load", errs, cause)), len(errs)
}

// openFailing closes the engine and opens it again with the fault armed.
func (v *env) openFailing(cause string, arm func(*faulty.Backend), armFS func()) faulted {
	if err := v.e.Close(); err != nil {
		v.t.Fatalf("close: %v", err)
	}
	v.e = nil
	v.forgetCleanClose()
	files := len(v.bucketFiles())
	if armFS != nil {
		armFS()
	}
	err := v.open(arm)
	v.fs.clear()
	after := len(v.bucketFiles())
	if err == nil {
		st := v.e.Stats()
		v.be.Clear()
		return faulted{call: "Open", outcome: fmt.Sprintf("succeeds; drops %d index entries and deletes %d of %d bucket files",
			st.EntriesDropped, files-after, files)}
	}
	if !namesCause(err, cause) {
		v.errorf("Open under the fault: %q does not name the cause %q", err, cause)
	}
	if files != after {
		v.errorf("a failed Open deleted %d bucket files", files-after)
	}
	return faulted{call: "Open", outcome: fmt.Sprintf("fails closed (%s), deletes nothing", describe(err))}
}

var rows = []row{
	{
		id: "I1", layer: layerI, fault: "WAL write fails (until cleared)",
		run: func(v *env) faulted {
			v.fs.set(0, walWrite)
			return v.offloadFailing(eio, v.fs.clear)
		},
	},
	{
		id: "I2", layer: layerI, fault: "WAL fdatasync fails (until cleared)",
		note: "only the sync failed, so the batch is in the WAL: Open replays it, finds its bucket file removed and drops its 3 entries",
		run: func(v *env) faulted {
			v.fs.set(0, walSync)
			return v.offloadFailing(eio, v.fs.clear)
		},
	},
	{
		id: "I3", layer: layerI, fault: "SST write fails 3 times during a memtable flush (1000 objects with 4000-byte keys)",
		opts: bigOpts,
		run: func(v *env) faulted {
			v.fs.set(3, sstWrite)
			ts := v.tasks("big", 1000, bigKey, 16)
			out := v.offload(ts)
			v.fs.waitHits(v.t, 3)
			v.fs.clear()
			return faulted{call: "Offload", offered: keysOf(ts),
				outcome: statusCounts(out) + "; the flush runs after the commits, in pebble's background, and pebble retries it until it succeeds"}
		},
	},
	{
		id: "I4", layer: layerI, fault: "SST write fails during memtable flushes (until cleared; 2500 objects with 4000-byte keys)",
		opts: bigOpts,
		run:  stallRow,
	},
	{
		id: "I5", layer: layerI, fault: "SST read fails at Load (3000 objects with 4000-byte keys, more than the block cache holds; engine reopened first)",
		opts: tier.Options{BucketKeysLimit: 500, IndexCacheSize: 1},
		run: func(v *env) faulted {
			v.persistedAll(v.offload(v.tasks("big", 3000, bigKey, 16)))
			if err := v.restart(); err != nil {
				v.t.Fatal(err)
			}
			v.fs.set(0, sstRead)
			s, _ := v.loadFailing(eio)
			hits := v.fs.hits.Load()
			v.fs.clear()
			if hits == 0 {
				v.t.Fatal("no SST read reached the disk: the row tests nothing")
			}
			st := v.e.Stats()
			return faulted{call: "Load", outcome: fmt.Sprintf("%s; entries kept, checksum errors %d", s, st.ChecksumErrors)}
		},
	},
	{
		id: "I6", layer: layerI, fault: "SST read fails at Open (700 objects with 4000-byte keys, so that an SST exists)",
		opts: bigOpts,
		run: func(v *env) faulted {
			v.persistedAll(v.offload(v.tasks("big", 700, bigKey, 16)))
			return v.openFailing(eio, nil, func() { v.fs.set(0, sstRead) })
		},
	},
	{
		id: "B1", layer: layerB, fault: "bucket write fails with EIO (once)",
		run: func(v *env) faulted {
			v.be.FailNth(faulty.OpWrite, 1, syscall.EIO)
			return v.offloadFailing(eio, v.be.Clear)
		},
	},
	{
		id: "B2", layer: layerB, fault: "device full: every bucket write fails with ENOSPC (until cleared)",
		run: func(v *env) faulted {
			v.be.NoSpace()
			return v.offloadFailing(nospc, v.be.Clear)
		},
	},
	{
		id: "B3", layer: layerB, fault: "short write: half the bucket is written, the torn file stays, the write fails (once)",
		note: "the torn file is an orphan until then",
		run: func(v *env) faulted {
			v.be.ShortWrite(1)
			return v.offloadFailing("injected", v.be.Clear)
		},
	},
	{
		id: "B4", layer: layerB, fault: "fdatasync of the bucket fails (once; the backend removes the file)",
		run: func(v *env) faulted {
			v.be.SyncFail(1)
			return v.offloadFailing("sync", v.be.Clear)
		},
	},
	{
		id: "B5", layer: layerB, fault: "bucket read fails with EIO at Load (until cleared)",
		run: func(v *env) faulted {
			v.be.FailAll(faulty.OpRead, syscall.EIO)
			s, _ := v.loadFailing(eio)
			v.be.Clear()
			keys, _ := v.snapshot()
			ok, err := v.e.Exists(keys[0])
			st := v.e.Stats()
			return faulted{call: "Load", outcome: fmt.Sprintf("%s; entries kept (Exists %v, %v), checksum errors %d", s, ok, err, st.ChecksumErrors)}
		},
	},
	{
		id: "B6", layer: layerB, fault: "bucket read fails with EIO at Open (footer and trailer validation)",
		run: func(v *env) faulted {
			return v.openFailing(eio, func(b *faulty.Backend) { b.FailAll(faulty.OpRead, syscall.EIO) }, nil)
		},
	},
	{
		id: "B7", layer: layerB, fault: "bucket listing fails with EIO at Open",
		run: func(v *env) faulted {
			return v.openFailing(eio, func(b *faulty.Backend) { b.FailAll(faulty.OpList, syscall.EIO) }, nil)
		},
	},
	{
		id: "B8", layer: layerB, fault: "a bucket file vanishes (deleted under the running engine)",
		note: "while the backend still holds the unlinked file open (its descriptor cache) the objects are served with their bytes, so the replica is not a phantom; a Load that finds the file gone drops the entries and tells the owner (tier/vanish_test.go)",
		run:  vanishRow,
	},
	{
		id: "B9", layer: layerB, fault: "notify refuses the bucket and deleting its file fails with EIO",
		note: "the rolled-back bucket's file is an orphan until then (invariant 1)",
		run: func(v *env) faulted {
			v.mu.Lock()
			v.refuse = true
			v.mu.Unlock()
			v.be.FailAll(faulty.OpDelete, syscall.EIO)
			return v.offloadFailing("refuses", func() {
				v.be.Clear()
				v.mu.Lock()
				v.refuse = false
				v.mu.Unlock()
			})
		},
	},
}

// pending reports whether nothing was sent on c yet (without taking it).
func pending[T any](c chan T) bool {
	select {
	case x := <-c:
		c <- x
		return false
	default:
		return true
	}
}

// stallRow: pebble's flush keeps failing until both memtables are full and
// writes stall; the offload blocks in its index commit, which runs under
// the engine lock.
func stallRow(v *env) faulted {
	v.fs.set(0, sstWrite)
	ts := v.tasks("big", 2500, bigKey, 16)
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	done := make(chan []tier.Outcome, 1)
	go func() { done <- v.e.Offload(ctx, ts, v.notify) }()
	// pebble retries a failed flush at once: after 30 failed attempts a
	// commit that could proceed would long be done.
	v.fs.waitHits(v.t, 30)
	blocked := pending(done)
	keys, _ := v.snapshot()
	loadDone := make(chan error, 1)
	go func() { loadDone <- v.e.Load(bg, keys[:1])[0].Err }()
	var statsDone = make(chan struct{}, 1)
	go func() { v.e.Stats(); statsDone <- struct{}{} }()
	cancel()
	v.fs.waitHits(v.t, 60)
	stillBlocked, loadBlocked, statsBlocked := pending(done), pending(loadDone), pending(statsDone)
	v.fs.clear()
	out := <-done
	if err := <-loadDone; err != nil {
		v.t.Errorf("Load during the stall: %v", err)
	}
	<-statsDone
	if !blocked || !stillBlocked {
		return faulted{call: "Offload", offered: keysOf(ts), outcome: "returned while the flush kept failing: " + statusCounts(out)}
	}
	// Each task either persisted (its bucket committed) or failed because
	// ctx was cancelled (its bucket had not started, or its write saw the
	// cancellation); only the persisted ones were announced.
	persisted, canceled := 0, 0
	v.mu.Lock()
	for _, o := range out {
		_, announced := v.announced[string(o.Key)]
		switch {
		case o.Status == tier.Persisted && announced:
			persisted++
		case o.Status == tier.Failed && o.Retryable && errors.Is(o.Err, context.Canceled) && !announced:
			canceled++
		default:
			v.t.Errorf("after the stall: %.20q %v %v (announced %v)", o.Key, o.Status, o.Err, announced)
		}
	}
	v.mu.Unlock()
	if persisted == 0 || canceled == 0 {
		v.t.Errorf("after the stall: %d persisted, %d cancelled", persisted, canceled)
	}
	return faulted{call: "Offload", offered: keysOf(ts),
		announced: "exactly the objects answered Persisted, each checked durable and indexed when announced",
		outcome: fmt.Sprintf("blocks in the index commit while the flush keeps failing (pebble write stall: both memtables full); "+
			"cancelling its ctx does not end it; meanwhile Load blocks: %v, Stats blocks: %v (the commit holds the engine lock). "+
			"Once the fault clears, each task is Persisted (its bucket committed) or Failed (retryable, context.Canceled: its bucket "+
			"had not started, or its write saw the cancellation)", loadBlocked, statsBlocked)}
}

// vanishRow deletes the file of the first announced bucket under the
// running engine.
func vanishRow(v *env) faulted {
	keys, _ := v.snapshot()
	v.mu.Lock()
	id := v.bucketOf[string(keys[0])]
	lost := map[string]bool{}
	var gone [][]byte
	for _, k := range keys {
		if v.bucketOf[string(k)] == id {
			lost[string(k)] = true
			gone = append(gone, k)
		}
	}
	v.mu.Unlock()
	if err := os.Remove(v.bucketFile(id)); err != nil {
		v.t.Fatal(err)
	}
	// An open descriptor of the unlinked file (the backend's descriptor
	// cache) may still serve its bytes, CRC-checked: the same bytes, so not
	// a violation; loadCheck fails the test on wrong bytes.
	ok, errs := v.loadCheck(gone)
	if ok != 0 {
		v.t.Logf("%d objects of the deleted file still served from an open descriptor", ok)
	}
	for _, err := range errs {
		if !errors.Is(err, tier.ErrNotFound) && !errors.Is(err, tier.ErrChecksum) {
			v.errorf("Load of an object whose file vanished: %v is not a miss (tier.ErrNotFound or tier.ErrChecksum)", err)
		}
	}
	ex, exErr := v.e.Exists(gone[0])
	if ex && ok < len(gone) {
		v.errorf("Exists still answers true for an object whose file vanished and whose Load failed")
	}
	listed := 0
	if err := v.e.Keys(func(k []byte, _ tier.KeyInfo) bool {
		if lost[string(k)] {
			listed++
		}
		return true
	}); err != nil {
		v.t.Fatal(err)
	}
	if listed > 0 && ok < len(gone) {
		v.errorf("Keys (re-registration) still lists %d objects whose file vanished and could not be read", listed)
	}
	return faulted{call: "Load", lost: lost, outcome: fmt.Sprintf(
		"%d of the %d objects of that file served from the still-open descriptor, %d fail (%s); Exists answers %v (%s) and Keys lists %d of them",
		ok, len(gone), len(errs), v.sameErrors("load", errs, "not found"), ex, describe(exErr), listed)}
}
