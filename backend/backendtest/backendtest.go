package backendtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tierstore/tierstore/backend"
)

// OpenFunc opens a backend on dir. It reports its own failures with t.Fatal.
type OpenFunc func(t *testing.T, dir string) backend.Backend

// Run runs the whole conformance suite as subtests of t.
func Run(t *testing.T, open OpenFunc) {
	s := &suite{open: open}
	tests := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"Name", s.testName},
		{"RoundTripSizes", s.testRoundTripSizes},
		{"RoundTripOddIovecs", s.testOddIovecs},
		{"RoundTripManyTinyIovecs", s.testManyTinyIovecs},
		{"InputNotRetained", s.testInputNotRetained},
		{"ReadDataOwnedByCaller", s.testReadDataOwned},
		{"ExtremeIDs", s.testExtremeIDs},
		{"ErrExists", s.testExists},
		{"ErrUnaligned", s.testUnaligned},
		{"UnalignedReads", s.testUnalignedReads},
		{"ReadPastEOF", s.testReadPastEOF},
		{"BadRange", s.testBadRange},
		{"ManyOps", s.testManyOps},
		{"NotFound", s.testNotFound},
		{"RewriteAfterDelete", s.testRewriteAfterDelete},
		{"List", s.testList},
		{"ListIgnoresForeignFiles", s.testForeignFiles},
		{"Allocated", s.testAllocated},
		{"Concurrent", s.testConcurrent},
		{"ConcurrentReadsSameBucket", s.testConcurrentSameBucket},
		{"Close", s.testClose},
		{"Reopen", s.testReopen},
		{"ContextCanceled", s.testContextCanceled},
		{"ErrorsNameBucket", s.testErrorsNameBucket},
		{"ReadAcrossFiles", s.testReadAcrossFiles},
		{"ReadIntoBuffers", s.testReadIntoBuffers},
		{"BufferTooSmall", s.testBufferTooSmall},
		{"StartRead", s.testStartRead},
	}
	for _, tc := range tests {
		t.Run(tc.name, tc.fn)
	}
}

type suite struct {
	open OpenFunc
}

// fresh opens a backend on a new temporary directory and closes it at the end
// of the test.
func (s *suite) fresh(t *testing.T) (backend.Backend, string) {
	t.Helper()
	dir := t.TempDir()
	return s.openOn(t, dir), dir
}

func (s *suite) openOn(t *testing.T, dir string) backend.Backend {
	t.Helper()
	b := s.open(t, dir)
	if b == nil {
		t.Fatalf("open(%q) returned a nil backend", dir)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil && !errors.Is(err, backend.ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// IDs lists the ids of b's buckets (List), in List's order.
func IDs(t *testing.T, b backend.Backend) []uint64 {
	t.Helper()
	list, err := b.List()
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, fi := range list {
		out = append(out, fi.ID)
	}
	return out
}

// Pattern returns n deterministic pseudo-random bytes derived from seed.
func Pattern(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	out := make([]byte, n)
	i := 0
	for ; i+8 <= n; i += 8 {
		v := r.Uint64()
		out[i] = byte(v)
		out[i+1] = byte(v >> 8)
		out[i+2] = byte(v >> 16)
		out[i+3] = byte(v >> 24)
		out[i+4] = byte(v >> 32)
		out[i+5] = byte(v >> 40)
		out[i+6] = byte(v >> 48)
		out[i+7] = byte(v >> 56)
	}
	for ; i < n; i++ {
		out[i] = byte(r.Uint32())
	}
	return out
}

// Split cuts b into iovecs whose lengths are taken from sizes in turn (cycling;
// a zero size yields an empty iovec); the last iovec takes the rest.
func Split(b []byte, sizes []int) [][]byte {
	var out [][]byte
	positive := false
	for _, n := range sizes {
		positive = positive || n > 0
	}
	if !positive {
		panic("backendtest: Split needs at least one positive size")
	}
	for i := 0; len(b) > 0; i++ {
		n := max(sizes[i%len(sizes)], 0)
		if n > len(b) {
			n = len(b)
		}
		out = append(out, b[:n:n])
		b = b[n:]
	}
	return out
}

func write(t *testing.T, b backend.Backend, id uint64, data [][]byte) {
	t.Helper()
	if err := b.WriteBucket(context.Background(), id, data); err != nil {
		t.Fatalf("WriteBucket(%#x, %d bytes in %d iovecs): %v", id, backend.TotalLen(data), len(data), err)
	}
}

// writePattern writes a bucket of n pattern bytes seeded by id and returns the
// bytes.
func writePattern(t *testing.T, b backend.Backend, id uint64, n int) []byte {
	t.Helper()
	want := Pattern(id, n)
	write(t, b, id, [][]byte{want})
	return want
}

// readRange reads [off, off+n) of bucket id and fails the test on any error.
func readRange(t *testing.T, b backend.Backend, id uint64, off int64, n int) []byte {
	t.Helper()
	ops := []backend.ReadOp{{Off: off, Len: n}}
	if err := backend.ReadFile(context.Background(), b, id, ops); err != nil {
		t.Fatalf("Read(%#x): %v", id, err)
	}
	if ops[0].Err != nil {
		t.Fatalf("Read(%#x) [%d,+%d): op error %v", id, off, n, ops[0].Err)
	}
	if len(ops[0].Data) != n {
		t.Fatalf("Read(%#x) [%d,+%d): got %d bytes", id, off, n, len(ops[0].Data))
	}
	return ops[0].Data
}

func checkRange(t *testing.T, b backend.Backend, id uint64, want []byte, off int64, n int) {
	t.Helper()
	got := readRange(t, b, id, off, n)
	if !bytes.Equal(got, want[off:off+int64(n)]) {
		t.Fatalf("Read(%#x) [%d,+%d): bytes differ from what was written (first difference at %d)",
			id, off, n, firstDiff(got, want[off:off+int64(n)]))
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// onDisk reports whether b keeps bucket id as dir/FileName(id).
func onDisk(dir string, id uint64) bool {
	fi, err := os.Stat(filepath.Join(dir, backend.FileName(id)))
	return err == nil && fi.Mode().IsRegular()
}

// isDirBacked writes a probe bucket and reports whether it appears in dir; the
// probe is deleted again.
func isDirBacked(t *testing.T, b backend.Backend, dir string) bool {
	t.Helper()
	const probe = 0xfeed_0000_0000
	writePattern(t, b, probe, backend.Alignment)
	ok := onDisk(dir, probe)
	if err := b.Delete(probe); err != nil {
		t.Fatalf("Delete(probe): %v", err)
	}
	return ok
}

func (s *suite) testName(t *testing.T) {
	b, _ := s.fresh(t)
	if b.Name() == "" {
		t.Fatal("Name() is empty")
	}
}

func (s *suite) testRoundTripSizes(t *testing.T) {
	b, dir := s.fresh(t)
	sizes := []int{
		backend.Alignment,
		16 * backend.Alignment,
		1<<20 + 3*backend.Alignment,
		6 << 20,
	}
	for i, n := range sizes {
		id := uint64(100 + i)
		want := writePattern(t, b, id, n)
		checkRange(t, b, id, want, 0, n)
		checkRange(t, b, id, want, int64(n-backend.Alignment), backend.Alignment)
		checkRange(t, b, id, want, int64(n/2+1), n/3)
		if onDisk(dir, id) {
			got, err := os.ReadFile(filepath.Join(dir, backend.FileName(id)))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("file %s on disk: %d bytes, differs from the %d written", backend.FileName(id), len(got), n)
			}
		}
	}
}

func (s *suite) testOddIovecs(t *testing.T) {
	b, _ := s.fresh(t)
	r := rand.New(rand.NewPCG(1, 2))
	for round, total := range []int{backend.Alignment, 40 * backend.Alignment, 3<<20 + backend.Alignment} {
		var sizes []int
		for range 64 {
			switch r.IntN(4) {
			case 0:
				sizes = append(sizes, 0)
			case 1:
				sizes = append(sizes, 1+r.IntN(17))
			case 2:
				sizes = append(sizes, 1+r.IntN(5000))
			default:
				sizes = append(sizes, 1+r.IntN(300_000))
			}
		}
		id := uint64(round + 1)
		want := Pattern(id, total)
		iov := Split(want, sizes)
		write(t, b, id, iov)
		checkRange(t, b, id, want, 0, total)
	}
}

// testManyTinyIovecs writes more iovecs than IOV_MAX (1024) in one bucket.
func (s *suite) testManyTinyIovecs(t *testing.T) {
	b, _ := s.fresh(t)
	const total = 4 * backend.Alignment
	want := Pattern(7, total)
	iov := Split(want, []int{1, 3, 0, 5, 7, 2})
	if len(iov) <= 3000 {
		t.Fatalf("test setup: only %d iovecs", len(iov))
	}
	write(t, b, 7, iov)
	checkRange(t, b, 7, want, 0, total)
}

func (s *suite) testInputNotRetained(t *testing.T) {
	b, _ := s.fresh(t)
	want := Pattern(3, 8*backend.Alignment)
	in := bytes.Clone(want)
	write(t, b, 3, Split(in, []int{5000, 100}))
	for i := range in {
		in[i] ^= 0xff
	}
	checkRange(t, b, 3, want, 0, len(want))
}

func (s *suite) testReadDataOwned(t *testing.T) {
	b, _ := s.fresh(t)
	want := writePattern(t, b, 4, 4*backend.Alignment)
	got := readRange(t, b, 4, 10, 5000)
	for i := range got {
		got[i] ^= 0xff
	}
	checkRange(t, b, 4, want, 0, len(want))
	checkRange(t, b, 4, want, 10, 5000)
}

func (s *suite) testExtremeIDs(t *testing.T) {
	b, _ := s.fresh(t)
	for _, id := range []uint64{0, 1, 1 << 63, ^uint64(0)} {
		want := writePattern(t, b, id, backend.Alignment)
		checkRange(t, b, id, want, 0, len(want))
	}
	list, err := b.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 4 || list[0].ID != 0 || list[1].ID != 1 || list[2].ID != 1<<63 || list[3].ID != ^uint64(0) {
		t.Fatalf("List = %v, want ids 0, 1, 1<<63, max in that order", list)
	}
}

func (s *suite) testExists(t *testing.T) {
	b, _ := s.fresh(t)
	want := writePattern(t, b, 9, 2*backend.Alignment)
	err := b.WriteBucket(context.Background(), 9, [][]byte{Pattern(99, 2*backend.Alignment)})
	if !errors.Is(err, backend.ErrExists) {
		t.Fatalf("second WriteBucket(9) = %v, want ErrExists", err)
	}
	err = b.WriteBucket(context.Background(), 9, [][]byte{Pattern(99, backend.Alignment)})
	if !errors.Is(err, backend.ErrExists) {
		t.Fatalf("third WriteBucket(9), shorter = %v, want ErrExists", err)
	}
	checkRange(t, b, 9, want, 0, len(want))
}

func (s *suite) testUnaligned(t *testing.T) {
	b, _ := s.fresh(t)
	for _, n := range []int{1, backend.Alignment - 1, backend.Alignment + 1, 3*backend.Alignment - 7} {
		err := b.WriteBucket(context.Background(), 5, Split(Pattern(5, n), []int{1000}))
		if !errors.Is(err, backend.ErrUnaligned) {
			t.Fatalf("WriteBucket of %d bytes = %v, want ErrUnaligned", n, err)
		}
		ops := []backend.ReadOp{{Off: 0, Len: 1}}
		if err := backend.ReadFile(context.Background(), b, 5, ops); !errors.Is(err, backend.ErrNotFound) {
			t.Fatalf("Read after an unaligned WriteBucket = %v, want ErrNotFound (no file left)", err)
		}
	}
	list, err := b.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 {
		t.Fatalf("List after unaligned writes = %v, want empty", list)
	}
	want := writePattern(t, b, 5, backend.Alignment)
	checkRange(t, b, 5, want, 0, len(want))
}

func (s *suite) testUnalignedReads(t *testing.T) {
	b, _ := s.fresh(t)
	const size = 5 * backend.Alignment
	want := writePattern(t, b, 11, size)
	offs := []int64{0, 1, 511, 512, 4095, 4096, 4097, 8191, 10000, size - 4097, size - 1}
	lens := []int{1, 7, 511, 4095, 4096, 4097, 8192, 12289}
	var ops []backend.ReadOp
	for _, off := range offs {
		for _, n := range lens {
			if off+int64(n) <= size {
				ops = append(ops, backend.ReadOp{Off: off, Len: n})
			}
		}
	}
	ops = append(ops, backend.ReadOp{Off: 123, Len: 0}, backend.ReadOp{Off: size, Len: 0})
	if err := backend.ReadFile(context.Background(), b, 11, ops); err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		if op.Err != nil {
			t.Fatalf("op [%d,+%d): %v", op.Off, op.Len, op.Err)
		}
		if len(op.Data) != op.Len || !bytes.Equal(op.Data, want[op.Off:op.Off+int64(op.Len)]) {
			t.Fatalf("op [%d,+%d): wrong bytes (%d returned)", op.Off, op.Len, len(op.Data))
		}
	}
}

func (s *suite) testReadPastEOF(t *testing.T) {
	b, _ := s.fresh(t)
	const size = 3 * backend.Alignment
	want := writePattern(t, b, 12, size)
	ops := []backend.ReadOp{
		{Off: size - 1, Len: 2},
		{Off: 0, Len: 100},
		{Off: size, Len: 1},
		{Off: size + backend.Alignment, Len: backend.Alignment},
		{Off: 0, Len: size + 1},
		{Off: size - 10, Len: 10},
		{Off: math.MaxInt64 - 10, Len: 100}, // Off+Len overflows
	}
	if err := backend.ReadFile(context.Background(), b, 12, ops); err != nil {
		t.Fatalf("Read with some ops past EOF returned %v; want nil (errors go to the ops)", err)
	}
	for _, i := range []int{0, 2, 3, 4, 6} {
		if !errors.Is(ops[i].Err, backend.ErrShortRead) {
			t.Fatalf("op %d [%d,+%d) on a %d-byte file: Err = %v, want ErrShortRead", i, ops[i].Off, ops[i].Len, size, ops[i].Err)
		}
	}
	for _, i := range []int{1, 5} {
		if ops[i].Err != nil || !bytes.Equal(ops[i].Data, want[ops[i].Off:ops[i].Off+int64(ops[i].Len)]) {
			t.Fatalf("op %d [%d,+%d) within the file: Err = %v, %d bytes", i, ops[i].Off, ops[i].Len, ops[i].Err, len(ops[i].Data))
		}
	}
}

func (s *suite) testBadRange(t *testing.T) {
	b, _ := s.fresh(t)
	writePattern(t, b, 13, backend.Alignment)
	ops := []backend.ReadOp{{Off: -1, Len: 10}, {Off: 0, Len: -1}, {Off: 0, Len: 10}}
	if err := backend.ReadFile(context.Background(), b, 13, ops); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 1} {
		if !errors.Is(ops[i].Err, backend.ErrBadRange) {
			t.Fatalf("op [%d,+%d): Err = %v, want ErrBadRange", ops[i].Off, ops[i].Len, ops[i].Err)
		}
	}
	if ops[2].Err != nil || len(ops[2].Data) != 10 {
		t.Fatalf("valid op beside bad ones: Err = %v, %d bytes", ops[2].Err, len(ops[2].Data))
	}
}

func (s *suite) testManyOps(t *testing.T) {
	b, _ := s.fresh(t)
	const size = 1 << 20
	want := writePattern(t, b, 14, size)
	r := rand.New(rand.NewPCG(3, 4))
	ops := make([]backend.ReadOp, 300)
	for i := range ops {
		n := 1 + r.IntN(70_000)
		ops[i] = backend.ReadOp{Off: r.Int64N(size - int64(n) + 1), Len: n}
	}
	if err := backend.ReadFile(context.Background(), b, 14, ops); err != nil {
		t.Fatal(err)
	}
	for i, op := range ops {
		if op.Err != nil || !bytes.Equal(op.Data, want[op.Off:op.Off+int64(op.Len)]) {
			t.Fatalf("op %d [%d,+%d): Err = %v, %d bytes, equal=%v", i, op.Off, op.Len, op.Err, len(op.Data),
				bytes.Equal(op.Data, want[op.Off:op.Off+int64(op.Len)]))
		}
	}
}

func (s *suite) testNotFound(t *testing.T) {
	b, _ := s.fresh(t)
	ops := []backend.ReadOp{{Off: 0, Len: 1}}
	if err := backend.ReadFile(context.Background(), b, 77, ops); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("Read of a missing bucket = %v, want ErrNotFound", err)
	}
	if err := b.Delete(77); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("Delete of a missing bucket = %v, want ErrNotFound", err)
	}
	writePattern(t, b, 77, backend.Alignment)
	if err := b.Delete(77); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := b.Delete(77); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("second Delete = %v, want ErrNotFound", err)
	}
	ops = []backend.ReadOp{{Off: 0, Len: 1}}
	if err := backend.ReadFile(context.Background(), b, 77, ops); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("Read after Delete = %v, want ErrNotFound", err)
	}
}

func (s *suite) testRewriteAfterDelete(t *testing.T) {
	b, _ := s.fresh(t)
	writePattern(t, b, 21, 2*backend.Alignment)
	if err := b.Delete(21); err != nil {
		t.Fatal(err)
	}
	want := Pattern(2121, backend.Alignment)
	write(t, b, 21, [][]byte{want})
	checkRange(t, b, 21, want, 0, len(want))
	ops := []backend.ReadOp{{Off: 0, Len: backend.Alignment + 1}}
	if err := backend.ReadFile(context.Background(), b, 21, ops); err != nil || !errors.Is(ops[0].Err, backend.ErrShortRead) {
		t.Fatalf("rewritten bucket is shorter; read past its end: %v / %v, want ErrShortRead", err, ops[0].Err)
	}
}

func checkList(t *testing.T, b backend.Backend, want []backend.FileInfo) {
	t.Helper()
	got, err := b.List()
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(got) != len(want) {
		t.Fatalf("List = %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("List = %v, want %v", got, want)
		}
	}
}

func (s *suite) testList(t *testing.T) {
	b, _ := s.fresh(t)
	checkList(t, b, nil)
	ids := []uint64{5, 1, 1 << 40, 0x10, 3, 0xff}
	for i, id := range ids {
		writePattern(t, b, id, (i+1)*backend.Alignment)
	}
	A := int64(backend.Alignment)
	checkList(t, b, []backend.FileInfo{
		{ID: 1, Size: 2 * A}, {ID: 3, Size: 5 * A}, {ID: 5, Size: 1 * A},
		{ID: 0x10, Size: 4 * A}, {ID: 0xff, Size: 6 * A}, {ID: 1 << 40, Size: 3 * A},
	})
	if err := b.Delete(3); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(1 << 40); err != nil {
		t.Fatal(err)
	}
	checkList(t, b, []backend.FileInfo{
		{ID: 1, Size: 2 * A}, {ID: 5, Size: 1 * A}, {ID: 0x10, Size: 4 * A}, {ID: 0xff, Size: 6 * A},
	})
}

func (s *suite) testForeignFiles(t *testing.T) {
	b, dir := s.fresh(t)
	if !isDirBacked(t, b, dir) {
		t.Skipf("%s does not keep bucket files in its directory", b.Name())
	}
	writePattern(t, b, 2, backend.Alignment)
	alloc0, err := b.Allocated()
	if err != nil {
		t.Fatal(err)
	}
	foreign := []string{
		"README", "0000000000000001.bucket.tmp", "000000000000000A.bucket", "00000000000000zz.bucket",
		"1.bucket", ".0000000000000003.bucket", "00000000000000003.bucket",
	}
	for _, name := range foreign {
		if err := os.WriteFile(filepath.Join(dir, name), Pattern(1, 3*backend.Alignment), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, backend.FileName(4)), 0o755); err != nil {
		t.Fatal(err)
	}
	checkList(t, b, []backend.FileInfo{{ID: 2, Size: backend.Alignment}})
	alloc1, err := b.Allocated()
	if err != nil {
		t.Fatal(err)
	}
	if alloc1 != alloc0 {
		t.Fatalf("Allocated counts foreign files: %d before, %d after adding them", alloc0, alloc1)
	}
}

func (s *suite) testAllocated(t *testing.T) {
	b, _ := s.fresh(t)
	a0, err := b.Allocated()
	if err != nil {
		t.Fatal(err)
	}
	if a0 != 0 {
		t.Fatalf("Allocated of an empty backend = %d, want 0", a0)
	}
	const n1, n2 = 1 << 20, 256 << 10
	writePattern(t, b, 1, n1)
	writePattern(t, b, 2, n2)
	a1, err := b.Allocated()
	if err != nil {
		t.Fatal(err)
	}
	if a1 < n1+n2 {
		t.Fatalf("Allocated = %d after writing %d bytes, want at least that", a1, n1+n2)
	}
	if err := b.Delete(1); err != nil {
		t.Fatal(err)
	}
	a2, err := b.Allocated()
	if err != nil {
		t.Fatal(err)
	}
	if a2 >= a1 || a2 < n2 {
		t.Fatalf("Allocated = %d after deleting %d of %d bytes (was %d), want it to shrink to >= %d", a2, n1, n1+n2, a1, n2)
	}
	if err := b.Delete(2); err != nil {
		t.Fatal(err)
	}
	a3, err := b.Allocated()
	if err != nil {
		t.Fatal(err)
	}
	if a3 != 0 {
		t.Fatalf("Allocated = %d after deleting every bucket, want 0", a3)
	}
}

func (s *suite) testConcurrent(t *testing.T) {
	b, _ := s.fresh(t)
	const workers, perWorker = 6, 8
	var wg sync.WaitGroup
	var mu sync.Mutex // protects kept
	kept := map[uint64]int{}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range perWorker {
				id := uint64(w*1000 + j)
				n := (1 + (w+j)%16) * backend.Alignment
				want := Pattern(id, n)
				if err := b.WriteBucket(context.Background(), id, Split(want, []int{3000, 70000})); err != nil {
					t.Errorf("WriteBucket(%d): %v", id, err)
					return
				}
				// Read back this bucket and an older one of the same worker
				// while the other workers write and delete.
				ops := []backend.ReadOp{{Off: 0, Len: n}, {Off: 1, Len: n - 1}}
				if err := backend.ReadFile(context.Background(), b, id, ops); err != nil {
					t.Errorf("Read(%d): %v", id, err)
					return
				}
				for _, op := range ops {
					if op.Err != nil || !bytes.Equal(op.Data, want[op.Off:op.Off+int64(op.Len)]) {
						t.Errorf("Read(%d) [%d,+%d): Err %v or wrong bytes", id, op.Off, op.Len, op.Err)
						return
					}
				}
				if j%2 == 1 {
					if err := b.Delete(id); err != nil {
						t.Errorf("Delete(%d): %v", id, err)
						return
					}
				} else {
					mu.Lock()
					kept[id] = n
					mu.Unlock()
				}
				if _, err := b.List(); err != nil {
					t.Errorf("List: %v", err)
					return
				}
				if _, err := b.Allocated(); err != nil {
					t.Errorf("Allocated: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	list, err := b.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != len(kept) {
		t.Fatalf("List has %d buckets, want %d", len(list), len(kept))
	}
	for _, fi := range list {
		if n, ok := kept[fi.ID]; !ok || int64(n) != fi.Size {
			t.Fatalf("List entry %v: want size %d (present %v)", fi, n, ok)
		}
		want := Pattern(fi.ID, kept[fi.ID])
		checkRange(t, b, fi.ID, want, 0, len(want))
	}
}

func (s *suite) testConcurrentSameBucket(t *testing.T) {
	b, _ := s.fresh(t)
	const size = 256 << 10
	want := writePattern(t, b, 31, size)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 5))
			for range 20 {
				n := 1 + r.IntN(20_000)
				op := []backend.ReadOp{{Off: r.Int64N(size - int64(n)), Len: n}}
				if err := backend.ReadFile(context.Background(), b, 31, op); err != nil {
					t.Errorf("Read: %v", err)
					return
				}
				if op[0].Err != nil || !bytes.Equal(op[0].Data, want[op[0].Off:op[0].Off+int64(n)]) {
					t.Errorf("Read [%d,+%d): Err %v or wrong bytes", op[0].Off, n, op[0].Err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func (s *suite) testClose(t *testing.T) {
	b, _ := s.fresh(t)
	writePattern(t, b, 1, backend.Alignment)
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	ctx := context.Background()
	checks := map[string]error{
		"WriteBucket": b.WriteBucket(ctx, 2, [][]byte{Pattern(2, backend.Alignment)}),
		"Read":        backend.ReadFile(ctx, b, 1, []backend.ReadOp{{Off: 0, Len: 1}}),
		"Delete":      b.Delete(1),
		"Close":       b.Close(),
	}
	_, checks["List"] = b.List()
	_, checks["Allocated"] = b.Allocated()
	for op, err := range checks {
		if !errors.Is(err, backend.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", op, err)
		}
	}
}

func (s *suite) testReopen(t *testing.T) {
	b, dir := s.fresh(t)
	if !isDirBacked(t, b, dir) {
		t.Skipf("%s does not keep bucket files in its directory", b.Name())
	}
	w1 := writePattern(t, b, 1, 3*backend.Alignment)
	w2 := writePattern(t, b, 2, 64<<10)
	writePattern(t, b, 3, backend.Alignment)
	if err := b.Delete(3); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b2 := s.openOn(t, dir)
	checkList(t, b2, []backend.FileInfo{{ID: 1, Size: int64(len(w1))}, {ID: 2, Size: int64(len(w2))}})
	checkRange(t, b2, 1, w1, 0, len(w1))
	checkRange(t, b2, 2, w2, 0, len(w2))
	if err := b2.WriteBucket(context.Background(), 1, [][]byte{w1}); !errors.Is(err, backend.ErrExists) {
		t.Fatalf("WriteBucket over a bucket of the previous instance = %v, want ErrExists", err)
	}
}

func (s *suite) testContextCanceled(t *testing.T) {
	b, _ := s.fresh(t)
	writePattern(t, b, 1, backend.Alignment)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithTimeout(context.Background(), -1)
	defer cancel2()
	for _, c := range []struct {
		ctx  context.Context
		want error
	}{{canceled, context.Canceled}, {expired, context.DeadlineExceeded}} {
		err := b.WriteBucket(c.ctx, 2, [][]byte{Pattern(2, 256<<10)})
		if !errors.Is(err, c.want) {
			t.Fatalf("WriteBucket with a done context = %v, want %v", err, c.want)
		}
		ops := []backend.ReadOp{{Off: 0, Len: 1}}
		if err := backend.ReadFile(context.Background(), b, 2, ops); !errors.Is(err, backend.ErrNotFound) {
			t.Fatalf("Read of a bucket whose WriteBucket was canceled = %v, want ErrNotFound", err)
		}
		ops = []backend.ReadOp{{Off: 0, Len: 1}}
		if err := backend.ReadFile(c.ctx, b, 1, ops); !errors.Is(err, c.want) {
			t.Fatalf("Read with a done context = %v, want %v", err, c.want)
		}
	}
	checkList(t, b, []backend.FileInfo{{ID: 1, Size: backend.Alignment}})
}

func (s *suite) testErrorsNameBucket(t *testing.T) {
	b, _ := s.fresh(t)
	const id = 0xabc123def
	ops := []backend.ReadOp{{Off: 0, Len: 1}}
	err := backend.ReadFile(context.Background(), b, id, ops)
	if err == nil {
		t.Fatal("Read of a missing bucket succeeded")
	}
	msg := err.Error()
	if !strings.Contains(msg, fmt.Sprintf("%x", uint64(id))) && !strings.Contains(msg, fmt.Sprint(uint64(id))) {
		t.Fatalf("error %q does not name bucket %#x", msg, uint64(id))
	}
}

// One Read spans several files: each op reads its own file, an op of a
// missing file fails alone with ErrNotFound.
func (s *suite) testReadAcrossFiles(t *testing.T) {
	b, _ := s.fresh(t)
	w1 := writePattern(t, b, 41, 3*backend.Alignment)
	w2 := writePattern(t, b, 42, 2*backend.Alignment)
	ops := []backend.ReadOp{
		{ID: 42, Off: 100, Len: 5000}, {ID: 41, Off: 0, Len: 3 * backend.Alignment},
		{ID: 43, Off: 0, Len: 10}, {ID: 41, Off: 4095, Len: 2},
	}
	if err := b.Read(context.Background(), ops); err != nil {
		t.Fatalf("Read: %v", err)
	}
	for i, want := range [][]byte{w2[100:5100], w1, nil, w1[4095:4097]} {
		if want == nil {
			if !errors.Is(ops[i].Err, backend.ErrNotFound) || ops[i].Data != nil {
				t.Fatalf("op %d of a missing file: Err %v, %d bytes; want ErrNotFound", i, ops[i].Err, len(ops[i].Data))
			}
			continue
		}
		if ops[i].Err != nil || !bytes.Equal(ops[i].Data, want) {
			t.Fatalf("op %d (bucket %d [%d,+%d)): Err %v or wrong bytes", i, ops[i].ID, ops[i].Off, ops[i].Len, ops[i].Err)
		}
	}
}

// Reads land in the caller's buffers, aligned or not: Data is Buf[:Len],
// and nothing is written past len(Buf).
func (s *suite) testReadIntoBuffers(t *testing.T) {
	b, _ := s.fresh(t)
	want := writePattern(t, b, 44, 64<<10)
	for _, c := range []struct {
		name string
		off  int64
		n    int
		buf  func(n int) (buf, guard []byte)
	}{
		{"aligned", 4096, 20000, func(n int) ([]byte, []byte) {
			big := backend.AlignedBuffer(backend.DirectLen(n) + backend.Alignment)
			return big[:backend.DirectLen(n)], big[backend.DirectLen(n):]
		}},
		{"aligned, exact length", 8192, 8000, func(n int) ([]byte, []byte) {
			big := backend.AlignedBuffer(n + backend.Alignment)
			return big[:n], big[n:]
		}},
		{"unaligned buffer", 4096, 10000, func(n int) ([]byte, []byte) {
			big := make([]byte, n+1+100)
			return big[1 : 1+n], big[1+n:]
		}},
		{"unaligned offset", 333, 7000, func(n int) ([]byte, []byte) {
			big := backend.AlignedBuffer(backend.DirectLen(n) + 2*backend.Alignment)
			return big[:n], big[n:]
		}},
	} {
		buf, guard := c.buf(c.n)
		for i := range guard {
			guard[i] = 0xA5
		}
		ops := []backend.ReadOp{{ID: 44, Off: c.off, Len: c.n, Buf: buf}}
		if err := b.Read(context.Background(), ops); err != nil || ops[0].Err != nil {
			t.Fatalf("%s: Read: %v / %v", c.name, err, ops[0].Err)
		}
		if !bytes.Equal(ops[0].Data, want[c.off:c.off+int64(c.n)]) {
			t.Fatalf("%s: wrong bytes", c.name)
		}
		if &ops[0].Data[0] != &buf[0] {
			t.Fatalf("%s: Data is not the caller's buffer", c.name)
		}
		for i, g := range guard {
			if g != 0xA5 {
				t.Fatalf("%s: byte %d past the buffer was written", c.name, i)
			}
		}
	}
}

// A buffer shorter than the range fails that op alone with
// ErrBufferTooSmall, and is left untouched.
func (s *suite) testBufferTooSmall(t *testing.T) {
	b, _ := s.fresh(t)
	want := writePattern(t, b, 45, 2*backend.Alignment)
	small := backend.AlignedBuffer(backend.Alignment)[:100]
	for i := range small {
		small[i] = 0x5A
	}
	ops := []backend.ReadOp{{ID: 45, Off: 0, Len: 101, Buf: small}, {ID: 45, Off: 0, Len: 100, Buf: make([]byte, 100)}}
	if err := b.Read(context.Background(), ops); err != nil {
		t.Fatalf("Read: %v", err)
	}
	if !errors.Is(ops[0].Err, backend.ErrBufferTooSmall) || ops[0].Data != nil {
		t.Fatalf("101 bytes into 100: Err %v, %d bytes; want ErrBufferTooSmall", ops[0].Err, len(ops[0].Data))
	}
	if !strings.Contains(ops[0].Err.Error(), "2d") {
		t.Fatalf("error %q does not name bucket 2d", ops[0].Err)
	}
	for i, c := range small[:cap(small)] {
		if c != 0x5A && i < 100 {
			t.Fatalf("byte %d of a too small buffer was written", i)
		}
	}
	if ops[1].Err != nil || !bytes.Equal(ops[1].Data, want[:100]) {
		t.Fatalf("the other op: %v", ops[1].Err)
	}
}

// StartRead (ReadAsync where the backend has it) returns at once and calls
// done exactly once, after every op is answered.
func (s *suite) testStartRead(t *testing.T) {
	b, _ := s.fresh(t)
	want := writePattern(t, b, 46, 8*backend.Alignment)
	const calls = 16
	results := make(chan error, calls)
	opsOf := make([][]backend.ReadOp, calls)
	for c := range calls {
		opsOf[c] = []backend.ReadOp{
			{ID: 46, Off: int64(c) * 1000, Len: 3000, Buf: backend.AlignedBuffer(3000)},
			{ID: 47, Off: 0, Len: 1},
		}
		backend.StartRead(context.Background(), b, opsOf[c], func(err error) { results <- err })
	}
	for range calls {
		if err := <-results; err != nil {
			t.Fatalf("done(%v)", err)
		}
	}
	for c, ops := range opsOf {
		if ops[0].Err != nil || !bytes.Equal(ops[0].Data, want[c*1000:c*1000+3000]) {
			t.Fatalf("call %d: Err %v or wrong bytes", c, ops[0].Err)
		}
		if !errors.Is(ops[1].Err, backend.ErrNotFound) {
			t.Fatalf("call %d: op of a missing file: %v", c, ops[1].Err)
		}
	}
	select {
	case err := <-results:
		t.Fatalf("done called more than once (%v)", err)
	default:
	}
}
