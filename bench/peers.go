package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/cockroachdb/pebble/v2"
	badger "github.com/dgraph-io/badger/v4"
)

func init() {
	register(scenario{
		name: "peers",
		help: "ingest + random read of 256K/1M values: tier engine vs pebble v2 vs badger v4",
		run:  runPeers,
	})
}

// kvStore is the seam the peers workload drives. putBatch returns after one
// durable sync covering the whole batch.
type kvStore interface {
	putBatch(ctx context.Context, keys, vals [][]byte) error
	get(ctx context.Context, key []byte) ([]byte, error)
	close() error
}

type storeKind struct {
	name string
	// open opens the store in dir; memtable sizes pebble's and badger's
	// memtables (and badger's block cache), which they allocate up front.
	open func(dir string, memtable int64) (kvStore, error)
}

// peerStores lists the stores compared; the tier engine registers itself
// first from its own file (tier.go) when the package is built in.
var peerStores = []storeKind{
	{"pebble", openPebble},
	{"badger", openBadger},
}

// pebble v2 storing the values itself (in its WAL, memtables and sstables).
type pebbleStore struct{ db *pebble.DB }

func openPebble(dir string, memtable int64) (kvStore, error) {
	db, err := pebble.Open(dir, &pebble.Options{
		MemTableSize: uint64(memtable),
		Logger:       quietPebbleLog{},
	})
	if err != nil {
		return nil, fmt.Errorf("pebble open: %w", err)
	}
	return &pebbleStore{db}, nil
}

func (s *pebbleStore) putBatch(_ context.Context, keys, vals [][]byte) error {
	b := s.db.NewBatch()
	defer b.Close()
	for i := range keys {
		if err := b.Set(keys[i], vals[i], nil); err != nil {
			return fmt.Errorf("pebble set: %w", err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("pebble commit: %w", err)
	}
	return nil
}

func (s *pebbleStore) get(_ context.Context, key []byte) ([]byte, error) {
	v, closer, err := s.db.Get(key)
	if err != nil {
		return nil, fmt.Errorf("pebble get: %w", err)
	}
	out := bytes.Clone(v)
	closer.Close()
	return out, nil
}

// close flushes the memtable first, so that a reopened store reads values
// from its sstables rather than replaying them from the WAL into memory.
func (s *pebbleStore) close() error {
	if err := s.db.Flush(); err != nil {
		s.db.Close()
		return fmt.Errorf("pebble flush: %w", err)
	}
	return s.db.Close()
}

// badger v4 with its value log holding the values (ValueThreshold 1 KiB) and
// a synced value log write per transaction.
type badgerStore struct{ db *badger.DB }

func openBadger(dir string, memtable int64) (kvStore, error) {
	opts := badger.DefaultOptions(dir).
		WithSyncWrites(true).
		WithValueThreshold(1 << 10).
		WithMemTableSize(memtable).
		WithBlockCacheSize(memtable).
		WithNumVersionsToKeep(1).
		WithLogger(nil)
	db, err := badger.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("badger open: %w", err)
	}
	return &badgerStore{db}, nil
}

func (s *badgerStore) putBatch(_ context.Context, keys, vals [][]byte) error {
	txn := s.db.NewTransaction(true)
	defer txn.Discard()
	for i := range keys {
		if err := txn.Set(keys[i], vals[i]); err != nil {
			return fmt.Errorf("badger set: %w", err)
		}
	}
	if err := txn.Commit(); err != nil {
		return fmt.Errorf("badger commit: %w", err)
	}
	return nil
}

func (s *badgerStore) get(_ context.Context, key []byte) ([]byte, error) {
	var out []byte
	err := s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(key)
		if err != nil {
			return err
		}
		out, err = item.ValueCopy(nil)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("badger get: %w", err)
	}
	return out, nil
}

func (s *badgerStore) close() error { return s.db.Close() }

type peerFigures struct {
	store, size                    string
	ingestMBps, batchP50, batchP99 float64
	readMBps, readP50, readP99     float64
	diskBytes, logicalBytes        int64
	readOps                        int
	cachedAtRead                   int64 // page-cache resident bytes when reads start
}

func runPeers(ctx context.Context, e *env) (*result, error) {
	start := time.Now()
	total := int64(512 << 20)
	batchBytes := int64(16 << 20)
	memtable := int64(64 << 20)
	readers := 4
	if e.quick {
		total, batchBytes = 8<<20, 2<<20
		memtable = 8 << 20
	}
	sizes := []int64{256 << 10, 1 << 20}
	res := &result{Options: map[string]string{
		"bytes_per_size": fmtBytes(total),
		"batch_bytes":    fmtBytes(batchBytes),
		"readers":        fmt.Sprint(readers),
		"sync":           "one durable sync per batch",
		"memtable":       fmtBytes(memtable) + " (pebble, badger)",
	}}
	var figs []peerFigures
	for _, size := range sizes {
		for _, sk := range peerStores {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			dir := filepath.Join(e.dir, sk.name+"-"+sizeName(size))
			f, err := peerRun(ctx, e, sk, dir, size, total, batchBytes, memtable, readers)
			os.RemoveAll(dir)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", sk.name, sizeName(size), err)
			}
			figs = append(figs, f)
		}
	}
	t := &table{
		Title: "ingest (batches, one sync each) and random reads; ratios are store / tier engine",
		Columns: []string{"store", "size", "ingest MB/s", "batch p50 ms", "batch p99 ms",
			"read MB/s", "read p50 ms", "read p99 ms", "cached MiB", "disk MiB", "space amp",
			"ingest x tier", "read x tier", "disk x tier"},
	}
	for _, f := range figs {
		var base *peerFigures
		for i := range figs {
			if figs[i].store == "tier" && figs[i].size == f.size {
				base = &figs[i]
			}
		}
		var ri, rr, rd any
		if base != nil {
			ri = ratio(f.ingestMBps, base.ingestMBps)
			rr = ratio(f.readMBps, base.readMBps)
			rd = ratio(float64(f.diskBytes), float64(base.diskBytes))
		}
		t.add(f.store, f.size, f.ingestMBps, f.batchP50, f.batchP99, f.readMBps, f.readP50, f.readP99, float64(f.cachedAtRead)/(1<<20),
			float64(f.diskBytes)/(1<<20), float64(f.diskBytes)/float64(f.logicalBytes), ri, rr, rd)
	}
	res.Tables = append(res.Tables, t)
	hasTier := false
	for _, sk := range peerStores {
		hasTier = hasTier || sk.name == "tier"
	}
	if !hasTier {
		res.Notes = append(res.Notes, "the tier engine is not built in yet: no ratios")
	}
	res.Notes = append(res.Notes, "reads follow a close, fdatasync+posix_fadvise(DONTNEED) of every file and a reopen; 'cached MiB' is how much of the store's files is in the page cache after the reopen (mincore): a store that loads its files at open reads from memory")
	res.Elapsed = time.Since(start).Seconds()
	res.charts = func(dir string) ([]string, error) {
		var groups []string
		for _, s := range sizes {
			groups = append(groups, sizeName(s))
		}
		var ing, rd []series
		for _, sk := range peerStores {
			si := series{name: sk.name}
			sr := series{name: sk.name}
			for _, g := range groups {
				vi, vr := math.NaN(), math.NaN()
				for _, f := range figs {
					if f.store == sk.name && f.size == g {
						vi, vr = f.ingestMBps, f.readMBps
					}
				}
				si.values = append(si.values, vi)
				sr.values = append(sr.values, vr)
			}
			ing = append(ing, si)
			rd = append(rd, sr)
		}
		p1 := filepath.Join(dir, "peers-ingest.png")
		if err := groupedBars(p1, "peers: ingest (synced batches)", "MB/s", groups, ing, nil); err != nil {
			return nil, err
		}
		p2 := filepath.Join(dir, "peers-read.png")
		if err := groupedBars(p2, "peers: random reads", "MB/s", groups, rd, nil); err != nil {
			return nil, err
		}
		return []string{p1, p2}, nil
	}
	return res, nil
}

func peerRun(ctx context.Context, e *env, sk storeKind, dir string, size, total, batchBytes, memtable int64, readers int) (peerFigures, error) {
	f := peerFigures{store: sk.name, size: sizeName(size)}
	n := int(total / size)
	per := int(max(batchBytes/size, 1))
	vs := newValueSource(int(size), uint64(size))
	key := func(i int) []byte { return fmt.Appendf(nil, "peer/%s/%08d", sizeName(size), i) }
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return f, err
	}
	st, err := sk.open(dir, memtable)
	if err != nil {
		return f, err
	}
	bar := e.progress(fmt.Sprintf("peers %s %s ingest", sk.name, sizeName(size)), int64(n))
	var lat latencies
	t0 := time.Now()
	for i := 0; i < n; i += per {
		end := min(i+per, n)
		keys := make([][]byte, 0, end-i)
		vals := make([][]byte, 0, end-i)
		for j := i; j < end; j++ {
			keys = append(keys, key(j))
			vals = append(vals, vs.value(j))
		}
		b0 := time.Now()
		if err := st.putBatch(ctx, keys, vals); err != nil {
			st.close()
			bar.Finish()
			return f, err
		}
		lat = append(lat, time.Since(b0))
		bar.Add(end - i)
	}
	ingest := time.Since(t0)
	bar.Finish()
	if err := st.close(); err != nil {
		return f, fmt.Errorf("close: %w", err)
	}
	f.logicalBytes = int64(n) * size
	f.diskBytes = diskUsage(dir)
	f.ingestMBps = mbps(f.logicalBytes, ingest)
	f.batchP50, f.batchP99 = ms(lat.pct(50)), ms(lat.pct(99))

	dropCache(dir)
	st, err = sk.open(dir, memtable)
	if err != nil {
		return f, fmt.Errorf("reopen: %w", err)
	}
	defer st.close()
	// Some stores read their files at open (badger maps and scans its
	// value log): say how much is in memory when the reads start.
	f.cachedAtRead = residentBytes(dir)
	b := e.progress(fmt.Sprintf("peers %s %s read", sk.name, sizeName(size)), int64(n))
	_, rlat, read, err := readPhase(ctx, n, readers, 1, 7, time.Time{}, b, func(ctx context.Context, objs []int) error {
		k := objs[0]
		v, err := st.get(ctx, key(k))
		if err == nil && !bytes.Equal(v, vs.value(k)) {
			err = fmt.Errorf("%w: key %s", errVerify, key(k))
		}
		return err
	})
	if err != nil {
		return f, err
	}
	f.readOps = n
	f.readMBps = mbps(int64(n)*size, read)
	f.readP50, f.readP99 = ms(rlat.pct(50)), ms(rlat.pct(99))
	return f, nil
}

// quietPebbleLog drops pebble's informational logs; errors still surface
// through the API.
type quietPebbleLog struct{}

func (quietPebbleLog) Infof(string, ...any)  {}
func (quietPebbleLog) Errorf(string, ...any) {}
func (quietPebbleLog) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("pebble fatal: "+format, args...))
}
