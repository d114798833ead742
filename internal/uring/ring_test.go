package uring

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync"
	"syscall"
	"testing"
	"time"
	"weak"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/tierstore/tierstore/internal/crc32c"
)

// newRing creates a ring for a test or skips the test when io_uring is not
// available in this environment.
func newRing(t testing.TB, cfg Config) *Ring {
	t.Helper()
	r, err := New(cfg)
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("io_uring unavailable: %v", err)
	}
	require.NoError(t, err)
	t.Cleanup(func() {
		if !r.closed {
			require.NoError(t, r.Close())
		}
	})
	return r
}

func newBuf(t testing.TB, n int) *Buffer {
	t.Helper()
	b, err := NewBuffer(n)
	require.NoError(t, err)
	t.Cleanup(func() {
		if b.mem != nil {
			require.NoError(t, b.Free())
		}
	})
	return b
}

// waitAll waits for every request in flight and returns the completions by
// user_data.
func waitAll(t testing.TB, r *Ring) map[uint64]Completion {
	t.Helper()
	require.NoError(t, r.Wait(r.InFlight()+len(r.done)))
	out := make(map[uint64]Completion)
	for _, c := range r.Reap(nil) {
		_, dup := out[c.UserData]
		require.False(t, dup, "user_data %d completed twice", c.UserData)
		out[c.UserData] = c
	}
	require.Equal(t, 0, r.InFlight())
	return out
}

func TestNopRoundTrip(t *testing.T) {
	r := newRing(t, Config{Entries: 4})
	ids := make(map[uint64]int)
	for i := range 3 {
		id, err := r.Prepare(Op{Opcode: OpNop, Tag: i})
		require.NoError(t, err)
		ids[id] = i
	}
	require.Equal(t, 3, r.InFlight())
	n, err := r.Submit()
	require.NoError(t, err)
	require.Equal(t, 3, n)
	got := waitAll(t, r)
	require.Len(t, got, 3)
	for id, i := range ids {
		c, ok := got[id]
		require.True(t, ok, "no completion for user_data %d", id)
		require.Equal(t, int32(0), c.Res)
		require.Equal(t, OpNop, c.Opcode)
		require.Equal(t, i, c.Tag)
		require.NoError(t, c.Err())
	}
	st := r.Stats()
	require.Equal(t, uint64(3), st.Submitted)
	require.Equal(t, uint64(3), st.Completed)
	require.Equal(t, uint64(3), st.ByOpcode[OpNop])
}

func tempFile(t testing.TB, flag int) *os.File {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "data"), os.O_RDWR|os.O_CREATE|flag, 0o644)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

func TestWriteThenReadChecksums(t *testing.T) {
	const block, nblocks = 16 << 10, 24
	r := newRing(t, Config{Entries: 8})
	f := tempFile(t, 0)
	fd := int(f.Fd())
	rng := rand.New(rand.NewPCG(1, 2))
	src := newBuf(t, block*nblocks)
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(rng.Uint32())
	}
	want := make([]uint32, nblocks)
	for i := range nblocks {
		want[i] = crc32c.Checksum(src.Bytes()[i*block : (i+1)*block])
	}
	// Write the blocks in shuffled order, at most 8 in flight, via WRITE
	// and WRITEV alternately.
	order := rng.Perm(nblocks)
	for len(order) > 0 {
		for len(order) > 0 && r.SQSpace() > 0 {
			i := order[0]
			order = order[1:]
			p := src.Bytes()[i*block : (i+1)*block]
			op := Op{Opcode: OpWrite, Fd: fd, Off: int64(i * block), Buf: p}
			if i%2 == 1 {
				op = Op{Opcode: OpWritev, Fd: fd, Off: int64(i * block), Bufs: [][]byte{p[:block/4], p[block/4:]}}
			}
			_, err := r.Prepare(op)
			require.NoError(t, err)
		}
		for _, c := range waitAll(t, r) {
			require.Equal(t, int32(block), c.Res, "%v", c.Err())
		}
	}
	_, err := r.Prepare(Op{Opcode: OpFsync, Fd: fd, Datasync: true})
	require.NoError(t, err)
	for _, c := range waitAll(t, r) {
		require.NoError(t, c.Err())
	}
	// The file as the kernel sees it through the page cache.
	onDisk, err := os.ReadFile(f.Name())
	require.NoError(t, err)
	require.Equal(t, block*nblocks, len(onDisk))
	for i := range nblocks {
		require.Equal(t, want[i], crc32c.Checksum(onDisk[i*block:(i+1)*block]), "block %d", i)
	}
	// Read back through the ring, READ and READV.
	dst := newBuf(t, block*nblocks)
	for i := 0; i < nblocks; i += 4 {
		for j := i; j < i+4; j++ {
			p := dst.Bytes()[j*block : (j+1)*block]
			op := Op{Opcode: OpRead, Fd: fd, Off: int64(j * block), Buf: p, Tag: j}
			if j%2 == 0 {
				op = Op{Opcode: OpReadv, Fd: fd, Off: int64(j * block), Bufs: [][]byte{p[:100], p[100:]}, Tag: j}
			}
			_, err := r.Prepare(op)
			require.NoError(t, err)
		}
		for _, c := range waitAll(t, r) {
			require.Equal(t, int32(block), c.Res, "block %v: %v", c.Tag, c.Err())
		}
	}
	for i := range nblocks {
		require.Equal(t, want[i], crc32c.Checksum(dst.Bytes()[i*block:(i+1)*block]), "block %d", i)
	}
}

func TestFixedBuffers(t *testing.T) {
	r := newRing(t, Config{Entries: 4})
	f := tempFile(t, 0)
	fd := int(f.Fd())
	a, b := newBuf(t, 8192), newBuf(t, 8192)
	_, err := r.Prepare(Op{Opcode: OpWriteFixed, Fd: fd, Buf: a.Bytes()})
	require.ErrorIs(t, err, ErrNoFixedBuffers)
	require.NoError(t, r.RegisterBuffers([]*Buffer{a, b}))
	require.Error(t, r.RegisterBuffers([]*Buffer{a}))
	for i := range a.Bytes() {
		a.Bytes()[i] = byte(i * 7)
	}
	_, err = r.Prepare(Op{Opcode: OpWriteFixed, Fd: fd, Off: 0, Buf: a.Bytes(), BufIndex: 0})
	require.NoError(t, err)
	for _, c := range waitAll(t, r) {
		require.Equal(t, int32(8192), c.Res, "%v", c.Err())
	}
	// Read the second page into the middle of buffer 1.
	_, err = r.Prepare(Op{Opcode: OpReadFixed, Fd: fd, Off: 4096, Buf: b.Bytes()[1000:5096], BufIndex: 1})
	require.NoError(t, err)
	for _, c := range waitAll(t, r) {
		require.Equal(t, int32(4096), c.Res, "%v", c.Err())
	}
	require.Equal(t, a.Bytes()[4096:], b.Bytes()[1000:5096])

	// A buffer outside the registered one, and an index out of range.
	_, err = r.Prepare(Op{Opcode: OpReadFixed, Fd: fd, Buf: b.Bytes(), BufIndex: 0})
	require.ErrorIs(t, err, ErrBadOp)
	_, err = r.Prepare(Op{Opcode: OpReadFixed, Fd: fd, Buf: b.Bytes(), BufIndex: 2})
	require.ErrorIs(t, err, ErrNoFixedBuffers)
	require.NoError(t, r.UnregisterBuffers())
	require.ErrorIs(t, r.UnregisterBuffers(), ErrNoFixedBuffers)
}

func TestFsync(t *testing.T) {
	r := newRing(t, Config{Entries: 2})
	f := tempFile(t, 0)
	_, err := f.WriteAt([]byte("durable"), 0)
	require.NoError(t, err)
	for _, ds := range []bool{true, false} {
		_, err := r.Prepare(Op{Opcode: OpFsync, Fd: int(f.Fd()), Datasync: ds})
		require.NoError(t, err)
		for _, c := range waitAll(t, r) {
			require.Equal(t, OpFsync, c.Opcode)
			require.NoError(t, c.Err())
		}
	}
	// fsync of a closed descriptor number fails with EBADF in the CQE.
	g := tempFile(t, 0)
	bad := int(g.Fd())
	require.NoError(t, g.Close())
	_, err = r.Prepare(Op{Opcode: OpFsync, Fd: bad})
	require.NoError(t, err)
	for _, c := range waitAll(t, r) {
		require.ErrorIs(t, c.Err(), syscall.EBADF)
	}
}

func TestErrorCompletionReadOnlyFd(t *testing.T) {
	r := newRing(t, Config{Entries: 2})
	f := tempFile(t, 0)
	ro, err := os.Open(f.Name())
	require.NoError(t, err)
	defer ro.Close()
	buf := newBuf(t, 4096)
	_, err = r.Prepare(Op{Opcode: OpWrite, Fd: int(ro.Fd()), Buf: buf.Bytes()})
	require.NoError(t, err)
	got := waitAll(t, r)
	require.Len(t, got, 1)
	for _, c := range got {
		require.Equal(t, -int32(syscall.EBADF), c.Res)
		require.ErrorIs(t, c.Err(), syscall.EBADF)
	}
}

func TestMoreSubmissionsThanCQHolds(t *testing.T) {
	r := newRing(t, Config{Entries: 8, CQEntries: 16})
	require.Equal(t, 16, r.CQEntries())
	const rounds = 12 // 96 requests in flight against a CQ of 16
	want := make(map[uint64]bool)
	for range rounds {
		for r.SQSpace() > 0 {
			id, err := r.Prepare(Op{Opcode: OpNop})
			require.NoError(t, err)
			want[id] = true
		}
		_, err := r.Prepare(Op{Opcode: OpNop})
		require.ErrorIs(t, err, ErrQueueFull)
		n, err := r.Submit()
		require.NoError(t, err)
		require.Equal(t, 8, n)
	}
	require.Equal(t, rounds*8, r.InFlight())
	got := waitAll(t, r)
	require.Len(t, got, len(want))
	for id := range want {
		require.Contains(t, got, id)
	}
	// The backlog really went through the kernel's overflow list.
	require.Positive(t, r.Stats().OverflowFlushes)
	// And the ring is still usable.
	_, err := r.Prepare(Op{Opcode: OpNop})
	require.NoError(t, err)
	require.Len(t, waitAll(t, r), 1)
}

func TestConcurrentRings(t *testing.T) {
	const rings, block, perRing = 4, 8192, 32
	f := tempFile(t, 0)
	var wg sync.WaitGroup
	errs := make(chan error, rings)
	for g := range rings {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			r, err := New(Config{Entries: 8})
			if err != nil {
				errs <- err
				return
			}
			defer r.Close()
			buf, err := NewBuffer(block * perRing)
			if err != nil {
				errs <- err
				return
			}
			defer buf.Free()
			for i := range buf.Bytes() {
				buf.Bytes()[i] = byte(g*31 + i/block)
			}
			base := int64(g * block * perRing)
			for i := 0; i < perRing; {
				for ; i < perRing && r.SQSpace() > 0; i++ {
					if _, err := r.Prepare(Op{Opcode: OpWrite, Fd: int(f.Fd()), Off: base + int64(i*block), Buf: buf.Bytes()[i*block : (i+1)*block]}); err != nil {
						errs <- err
						return
					}
				}
				if err := r.Wait(r.InFlight()); err != nil {
					errs <- err
					return
				}
				for _, c := range r.Reap(nil) {
					if c.Res != block {
						errs <- c.Err()
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	data, err := os.ReadFile(f.Name())
	require.NoError(t, err)
	require.Len(t, data, rings*block*perRing)
	for g := range rings {
		for i := range block * perRing {
			if data[g*block*perRing+i] != byte(g*31+i/block) {
				t.Fatalf("ring %d byte %d: got %d", g, i, data[g*block*perRing+i])
			}
		}
	}
}

//go:noinline
func deepRecursion(n int) int {
	var pad [256]byte
	pad[n%256] = byte(n)
	if n == 0 {
		return int(pad[0])
	}
	return deepRecursion(n-1) + int(pad[n%256])
}

// TestGCAndStackMoves runs reads and writes while the collector runs
// constantly (GOGC=1) and the goroutine stack is grown (and so moved) by
// deep recursion between submission and completion. Heap buffers whose only
// reference is the ring's in-flight table must stay alive until reaped.
func TestGCAndStackMoves(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(1))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r := newRing(t, Config{Entries: 16})
	f := tempFile(t, 0)
	fd := int(f.Fd())
	const n, size = 8, 64 << 10
	content := make([]byte, n*size)
	for i := range content {
		content[i] = byte(i*13 + i>>12)
	}
	_, err := f.WriteAt(content, 0)
	require.NoError(t, err)

	for round := range 4 {
		weaks := make([]weak.Pointer[[size]byte], n)
		for i := range n {
			buf := new([size]byte) // heap, referenced only by the ring
			weaks[i] = weak.Make(buf)
			_, err := r.Prepare(Op{Opcode: OpRead, Fd: fd, Off: int64(i * size), Buf: buf[:], Tag: i})
			require.NoError(t, err)
		}
		_, err := r.Submit()
		require.NoError(t, err)
		require.Positive(t, deepRecursion(2000+round*1000))
		runtime.GC()
		runtime.GC()
		for i, w := range weaks {
			require.NotNil(t, w.Value(), "round %d: buffer %d collected while in flight", round, i)
		}
		require.Positive(t, deepRecursion(4000))
		require.NoError(t, r.Wait(n))
		for _, c := range r.Reap(nil) {
			i := c.Tag.(int)
			require.Equal(t, int32(size), c.Res)
			b := weaks[i].Value()
			require.NotNil(t, b)
			require.True(t, bytes.Equal(content[i*size:(i+1)*size], b[:]), "round %d buffer %d differs", round, i)
		}
	}
}

func TestProbe(t *testing.T) {
	r := newRing(t, Config{Entries: 2})
	p, err := r.Probe()
	require.NoError(t, err)
	for _, op := range []Opcode{OpNop, OpRead, OpWrite, OpReadv, OpWritev, OpFsync, OpReadFixed, OpWriteFixed} {
		require.True(t, p.Supported(op), "%v", op)
	}
	require.GreaterOrEqual(t, p.LastOp, OpWrite)
	require.False(t, p.Supported(255))
	kp, feats, err := ProbeKernel()
	require.NoError(t, err)
	require.True(t, kp.Supported(OpWrite))
	require.Equal(t, r.Features(), feats)
}

func TestBadInput(t *testing.T) {
	_, err := New(Config{})
	require.ErrorIs(t, err, ErrBadEntries)
	_, err = New(Config{Entries: MaxEntries + 1})
	require.ErrorIs(t, err, ErrBadEntries)
	_, err = New(Config{Entries: 8, CQEntries: 4})
	require.ErrorIs(t, err, ErrBadEntries)
	_, err = NewBuffer(0)
	require.ErrorIs(t, err, ErrBadBuffer)
	b, err := NewBuffer(1)
	require.NoError(t, err)
	require.Equal(t, PageSize, b.Len())
	require.NoError(t, b.Free())
	require.ErrorIs(t, b.Free(), ErrBadBuffer)

	r := newRing(t, Config{Entries: 2})
	for _, op := range []Op{
		{Opcode: OpWrite, Fd: 0},
		{Opcode: OpRead, Fd: -1, Buf: make([]byte, 1)},
		{Opcode: OpRead, Fd: 0, Off: -1, Buf: make([]byte, 1)},
		{Opcode: OpWritev, Fd: 0},
		{Opcode: OpWritev, Fd: 0, Bufs: [][]byte{nil}},
		{Opcode: 200, Fd: 0},
	} {
		_, err := r.Prepare(op)
		require.ErrorIs(t, err, ErrBadOp, "%+v", op)
	}
	require.Equal(t, 0, r.InFlight())
	require.NoError(t, r.Close())
	_, err = r.Prepare(Op{Opcode: OpNop})
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, r.Wait(1), ErrClosed)
	require.ErrorIs(t, r.Close(), ErrClosed)
}

func TestSetupErrorClassification(t *testing.T) {
	for _, errno := range []syscall.Errno{unix.ENOSYS, unix.EPERM, unix.EACCES, unix.ENOMEM} {
		err := newSetupError("io_uring_setup", errno)
		var se *SetupError
		require.ErrorAs(t, err, &se)
		require.ErrorIs(t, err, ErrUnavailable)
		require.ErrorIs(t, err, errno)
		require.NotEmpty(t, se.Reason)
	}
	err := newSetupError("io_uring_setup", unix.EINVAL)
	require.NotErrorIs(t, err, ErrUnavailable)
	require.ErrorIs(t, err, unix.EINVAL)
}

func TestCloseWaitsForInFlight(t *testing.T) {
	r := newRing(t, Config{Entries: 4})
	f := tempFile(t, 0)
	buf := newBuf(t, 4096)
	for i := range 4 {
		_, err := r.Prepare(Op{Opcode: OpWrite, Fd: int(f.Fd()), Off: int64(i * 4096), Buf: buf.Bytes()})
		require.NoError(t, err)
	}
	require.NoError(t, r.Close())
	st, err := f.Stat()
	require.NoError(t, err)
	require.Equal(t, int64(4*4096), st.Size())
}

// TestCloseAbandonsLostRequests: when completions were lost (simulated by
// setting the sticky ErrCQOverflow), Close cannot wait for the requests in
// flight and must keep their buffers reachable instead of letting the
// collector reuse memory the kernel may still write.
func TestCloseAbandonsLostRequests(t *testing.T) {
	r := newRing(t, Config{Entries: 2})
	var p [2]int
	require.NoError(t, unix.Pipe(p[:]))
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	buf := new([4096]byte)
	w := weak.Make(buf)
	_, err := r.Prepare(Op{Opcode: OpRead, Fd: p[0], Buf: buf[:]}) // blocks: nothing is written
	require.NoError(t, err)
	buf = nil
	_, err = r.Submit()
	require.NoError(t, err)
	r.err = ErrCQOverflow
	require.ErrorIs(t, r.Close(), ErrCQOverflow)
	require.True(t, r.Abandoned())
	runtime.GC()
	runtime.GC()
	require.NotNil(t, w.Value(), "buffer of an abandoned request was collected")
}

// TestWaitRetriesEINTR: signals delivered to the thread blocked in
// io_uring_enter (here SIGURG, the Go runtime's own preemption signal, which
// it tolerates at any time) make the kernel return EINTR; Wait must retry
// and still deliver the completion.
func TestWaitRetriesEINTR(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r := newRing(t, Config{Entries: 2})
	var p [2]int
	require.NoError(t, unix.Pipe(p[:]))
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	buf := make([]byte, 8)
	_, err := r.Prepare(Op{Opcode: OpRead, Fd: p[0], Buf: buf})
	require.NoError(t, err)
	tid, pid := unix.Gettid(), unix.Getpid()
	waitDone := make(chan struct{})
	go func() {
		// Keep signalling the waiting thread until the read is fed
		// (after 50 signals) and the wait is over.
		for i := 0; ; i++ {
			select {
			case <-waitDone:
				return
			default:
			}
			_ = unix.Tgkill(pid, tid, unix.SIGURG)
			if i == 50 {
				_, _ = unix.Write(p[1], []byte("wake-up!"))
			}
			time.Sleep(time.Millisecond) // pacing between signals, not synchronisation
		}
	}()
	err = r.Wait(1)
	close(waitDone)
	require.NoError(t, err)
	c := r.Reap(nil)
	require.Len(t, c, 1)
	require.Equal(t, int32(8), c[0].Res)
	require.Equal(t, "wake-up!", string(buf))
	require.Positive(t, r.Stats().EINTR, "no EINTR seen: the signals did not interrupt io_uring_enter")
}
