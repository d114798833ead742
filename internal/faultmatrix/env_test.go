package faultmatrix

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/backend/faulty"
	"github.com/tierstore/tierstore/backend/pwrite"
	"github.com/tierstore/tierstore/index"
	"github.com/tierstore/tierstore/internal/crc32c"
	"github.com/tierstore/tierstore/tier"
)

var (
	bg    = context.Background()
	quiet = slog.New(slog.DiscardHandler)
)

// guard bounds every wait of the matrix on an event the engine or pebble
// must produce; reaching it fails the test (it never stands in for the
// event itself).
const guard = 30 * time.Second

// fsFault is the errorfs.Injector of every index in the matrix. Its rule can
// be replaced at any time; hits counts the errors it injected.
type fsFault struct {
	rule atomic.Pointer[fsRule]
	hits atomic.Int64
	// hit receives a token (without blocking) after each injected error,
	// so that waitHits wakes up.
	hit chan struct{}
}

type fsRule struct {
	match func(errorfs.Op) bool
	limit int64        // most errors to inject; 0 means no limit
	used  atomic.Int64 // matching ops seen
}

func newFSFault() *fsFault { return &fsFault{hit: make(chan struct{}, 1)} }

// set installs a rule injecting EIO into the ops match accepts, at most n
// times (n == 0: until clear).
func (f *fsFault) set(n int64, match func(errorfs.Op) bool) {
	f.rule.Store(&fsRule{match: match, limit: n})
}

func (f *fsFault) clear() { f.rule.Store(nil) }

func (f *fsFault) String() string { return "faultmatrix" }

// MaybeError implements errorfs.Injector.
func (f *fsFault) MaybeError(op errorfs.Op) error {
	r := f.rule.Load()
	if r == nil || !r.match(op) {
		return nil
	}
	if r.limit > 0 && r.used.Add(1) > r.limit {
		return nil
	}
	f.hits.Add(1)
	select {
	case f.hit <- struct{}{}:
	default:
	}
	return fmt.Errorf("%w: %w (%s)", errorfs.ErrInjected, syscall.EIO, filepath.Base(op.Path))
}

// waitHits waits until at least n errors were injected.
func (f *fsFault) waitHits(t *testing.T, n int64) {
	t.Helper()
	deadline := time.After(guard)
	for f.hits.Load() < n {
		select {
		case <-f.hit:
		case <-deadline:
			t.Fatalf("only %d of %d expected injected errors after %v", f.hits.Load(), n, guard)
		}
	}
}

// onFiles matches the ops of the given kinds on files with the suffix.
func onFiles(suffix string, kinds ...errorfs.OpKind) func(errorfs.Op) bool {
	return func(op errorfs.Op) bool {
		return strings.HasSuffix(op.Path, suffix) && slices.Contains(kinds, op.Kind)
	}
}

var (
	walWrite = onFiles(".log", errorfs.OpFileWrite, errorfs.OpFileWriteAt)
	walSync  = onFiles(".log", errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo)
	sstWrite = onFiles(".sst", errorfs.OpFileWrite, errorfs.OpFileWriteAt)
	sstRead  = onFiles(".sst", errorfs.OpFileRead, errorfs.OpFileReadAt)
)

// env is one tier directory on the real disk with its fault injectors and
// the record of what was offered and announced.
type env struct {
	t    *testing.T
	dir  string
	opts tier.Options // without Backend and IndexFS
	fs   *fsFault
	be   *faulty.Backend // the current engine's backend
	e    *tier.Engine

	// mu guards the fields below: notify runs concurrently for the
	// pipelined buckets of one Offload.
	mu        sync.Mutex
	offered   map[string][]byte // every value ever offered, by key
	announced map[string][]byte // keys a notify accepted
	bucketOf  map[string]uint64 // bucket named by the accepting notify
	refuse    bool              // notify refuses every bucket
	notifies  int               // notify calls that accepted
	// knownBug, when set, collects invariant violations in violations
	// instead of failing the test (a row documenting a reported bug).
	knownBug   bool
	violations []string
}

// errorf reports a broken invariant: it fails the test, or records the
// violation for a row that documents a known bug.
func (v *env) errorf(format string, args ...any) {
	v.t.Helper()
	msg := fmt.Sprintf(format, args...)
	v.mu.Lock()
	bug := v.knownBug
	if bug {
		v.violations = append(v.violations, msg)
	}
	v.mu.Unlock()
	if !bug {
		v.t.Error(msg)
	}
}

func newEnv(t *testing.T, opts tier.Options) *env {
	opts.Logger = quiet
	v := &env{
		t: t, dir: t.TempDir(), opts: opts, fs: newFSFault(),
		offered: map[string][]byte{}, announced: map[string][]byte{}, bucketOf: map[string]uint64{},
	}
	if err := v.open(nil); err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		if v.e != nil {
			_ = v.e.Close()
		}
	})
	return v
}

// open opens the engine on a new pwrite backend wrapped in a new faulty
// backend; arm, when not nil, installs backend faults before tier.Open.
func (v *env) open(arm func(*faulty.Backend)) error {
	pw, err := pwrite.Open(filepath.Join(v.dir, "buckets"), pwrite.Options{Logger: quiet})
	if err != nil {
		v.t.Fatalf("pwrite: %v", err)
	}
	v.be = faulty.Wrap(pw)
	if arm != nil {
		arm(v.be)
	}
	o := v.opts
	o.Backend = v.be
	o.IndexFS = errorfs.Wrap(vfs.Default, v.fs)
	e, err := tier.Open(v.dir, o)
	if err != nil {
		_ = v.be.Close() // tier.Open does not always close a Backend it was given
		v.e = nil
		return err
	}
	v.e = e
	return nil
}

// forgetCleanClose rewrites the closed engine's session record as a crash
// leaves it (tier format 3): the next Open reads every bucket, so a fault
// of the bucket reads at Open is met (after a clean close Open reads none).
func (v *env) forgetCleanClose() {
	ix, err := index.Open(filepath.Join(v.dir, "index"), index.Options{Logger: quiet})
	if err != nil {
		v.t.Fatalf("index: %v", err)
	}
	if err := ix.SetSession(index.Session{}); err != nil {
		v.t.Fatalf("session record: %v", err)
	}
	if err := ix.Close(); err != nil {
		v.t.Fatalf("index close: %v", err)
	}
}

// restart closes the engine and opens it again with every fault cleared.
func (v *env) restart() error {
	v.fs.clear()
	if v.e != nil {
		_ = v.e.Close() // may repeat the storage failure; Open is what counts
		v.e = nil
	}
	err := v.open(nil)
	if err != nil {
		return err
	}
	return nil
}

func (v *env) bucketFile(id uint64) string {
	return filepath.Join(v.dir, "buckets", backend.FileName(id))
}

// notify is the NotifyFunc of every offload: it checks that each key it is
// given is durable, indexed and readable with the offered bytes (invariant
// 1) before it accepts (or refuses) the bucket.
func (v *env) notify(_ context.Context, cs []tier.Committed) error {
	v.mu.Lock()
	refuse := v.refuse
	v.mu.Unlock()
	keys := make([][]byte, len(cs))
	for i, c := range cs {
		keys[i] = c.Key
		v.mu.Lock()
		want, ok := v.offered[string(c.Key)]
		v.mu.Unlock()
		switch {
		case !ok:
			v.t.Errorf("notify of key %.20q that was never offered", c.Key)
		case c.Size != int64(len(want)) || c.CRC != crc32c.Checksum(want):
			v.t.Errorf("notify of %.20q: size %d crc %08x, offered %d bytes", c.Key, c.Size, c.CRC, len(want))
		}
		if c.Bucket != cs[0].Bucket {
			v.t.Errorf("notify of one bucket names buckets %d and %d", cs[0].Bucket, c.Bucket)
		}
	}
	// Durable: the bucket file is on disk (WriteBucket's fdatasync is the
	// backend's, checked by its own tests); indexed and readable: Exists
	// and Load through the index.
	if len(cs) > 0 {
		if fi, err := os.Stat(v.bucketFile(cs[0].Bucket)); err != nil || fi.Size() == 0 {
			v.t.Errorf("notify of bucket %d before its file is on disk: %v", cs[0].Bucket, err)
		}
		if ok, err := v.e.Exists(cs[0].Key); !ok || err != nil {
			v.t.Errorf("notify of %.20q before it is indexed: exists %v, %v", cs[0].Key, ok, err)
		}
	}
	for i, r := range v.e.Load(bg, keys) {
		v.mu.Lock()
		want := v.offered[string(keys[i])]
		v.mu.Unlock()
		if r.Err != nil || !bytes.Equal(r.Value, want) {
			v.t.Errorf("notify of %.20q that Load cannot serve: %v", keys[i], r.Err)
		}
	}
	if refuse {
		return errors.New("faultmatrix: owner refuses the bucket")
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.notifies++
	for i, c := range cs {
		v.announced[string(keys[i])] = v.offered[string(keys[i])]
		v.bucketOf[string(keys[i])] = c.Bucket
	}
	return nil
}

// tasks makes n tasks; keys are prefix-i padded to keyLen bytes, values of
// size bytes are drawn from a generator seeded by the prefix.
func (v *env) tasks(prefix string, n, keyLen, size int) []tier.Task {
	var seed uint64
	for _, c := range prefix {
		seed = seed*131 + uint64(c)
	}
	rng := rand.New(rand.NewPCG(seed, uint64(n)))
	ts := make([]tier.Task, n)
	v.mu.Lock()
	defer v.mu.Unlock()
	for i := range ts {
		k := fmt.Sprintf("%s-%05d", prefix, i)
		if len(k) < keyLen {
			k += strings.Repeat(".", keyLen-len(k))
		}
		val := make([]byte, size)
		for j := range val {
			val[j] = byte(rng.Uint32())
		}
		ts[i] = tier.Task{Key: []byte(k), Value: val}
		v.offered[k] = val
	}
	return ts
}

func (v *env) offload(ts []tier.Task) []tier.Outcome {
	return v.e.Offload(bg, ts, v.notify)
}

// snapshot returns the announced keys, sorted, and the values.
func (v *env) snapshot() ([][]byte, map[string][]byte) {
	v.mu.Lock()
	defer v.mu.Unlock()
	keys := make([][]byte, 0, len(v.announced))
	vals := make(map[string][]byte, len(v.announced))
	for k, val := range v.announced {
		keys = append(keys, []byte(k))
		vals[k] = val
	}
	slices.SortFunc(keys, bytes.Compare)
	return keys, vals
}

// loadCheck loads keys and fails the test on any wrong bytes. It returns
// the number served and the errors of the others.
func (v *env) loadCheck(keys [][]byte) (ok int, errs []error) {
	for i, r := range v.e.Load(bg, keys) {
		if r.Err != nil {
			errs = append(errs, r.Err)
			continue
		}
		v.mu.Lock()
		want := v.offered[string(keys[i])]
		v.mu.Unlock()
		if !bytes.Equal(r.Value, want) {
			v.t.Errorf("Load(%.20q) returned wrong bytes (invariant 5)", keys[i])
			continue
		}
		ok++
	}
	return ok, errs
}

// sentinels are the errors an outcome is described by.
var sentinels = []struct {
	name string
	err  error
}{
	{"tier.ErrNoSpace", tier.ErrNoSpace},
	{"tier.ErrNotFound", tier.ErrNotFound},
	{"tier.ErrChecksum", tier.ErrChecksum},
	{"tier.ErrNotifyFailed", tier.ErrNotifyFailed},
	{"tier.ErrClosed", tier.ErrClosed},
	{"index.ErrFailed", index.ErrFailed},
	{"index.ErrCorrupt", index.ErrCorrupt},
	{"backend.ErrNoSpace", backend.ErrNoSpace},
	{"backend.ErrNotFound", backend.ErrNotFound},
	{"backend.ErrInjected", backend.ErrInjected},
	{"EIO", syscall.EIO},
	{"context.Canceled", context.Canceled},
}

// describe names the sentinels err matches, and whether its message names
// the injected cause ("input/output error" or "no space").
func describe(err error) string {
	if err == nil {
		return "nil"
	}
	var names []string
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			names = append(names, s.name)
		}
	}
	if len(names) == 0 {
		names = append(names, "no sentinel")
	}
	return strings.Join(names, ", ")
}

// namesCause reports whether an error's message says what went wrong.
func namesCause(err error, cause string) bool {
	return err != nil && strings.Contains(err.Error(), cause)
}

// statusCounts summarises outcomes: "Failed (retryable) 3/3" etc.
func statusCounts(out []tier.Outcome) string {
	type k struct {
		s tier.Status
		r bool
	}
	counts := map[k]int{}
	var order []k
	for _, o := range out {
		key := k{o.Status, o.Retryable}
		if counts[key] == 0 {
			order = append(order, key)
		}
		counts[key]++
	}
	var parts []string
	for _, key := range order {
		s := key.s.String()
		if key.s == tier.Failed {
			if key.r {
				s += " (retryable)"
			} else {
				s += " (not retryable)"
			}
		}
		parts = append(parts, fmt.Sprintf("%s %d/%d", s, counts[key], len(out)))
	}
	return strings.Join(parts, ", ")
}

// sameErrors describes a list of errors that must all match the same
// sentinels; it fails the test when they differ or do not name cause.
func (v *env) sameErrors(what string, errs []error, cause string) string {
	v.t.Helper()
	if len(errs) == 0 {
		return ""
	}
	d := describe(errs[0])
	for _, err := range errs {
		if describe(err) != d {
			v.errorf("%s: errors differ: %v vs %v", what, errs[0], err)
		}
		if cause != "" && !namesCause(err, cause) {
			v.errorf("%s: error %q does not name the cause %q", what, err, cause)
		}
	}
	return d
}

// failedOffload checks that every outcome failed with an error naming
// cause, and describes them.
func (v *env) failedOffload(out []tier.Outcome, cause string) string {
	v.t.Helper()
	var errs []error
	for _, o := range out {
		if o.Status != tier.Failed {
			v.errorf("faulted offload of %.20q: %v, want failed", o.Key, o.Status)
			continue
		}
		errs = append(errs, o.Err)
	}
	return fmt.Sprintf("%s; errors.Is: %s", statusCounts(out), v.sameErrors("offload", errs, cause))
}
