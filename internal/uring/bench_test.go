package uring

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkRingRandRead measures the bare ring: continuous O_DIRECT random
// reads at a fixed queue depth from one file, no copies, no allocation per
// read, the same access pattern as fio --rw=randread --direct=1
// --ioengine=io_uring. The file is TIERSTORE_BENCH_FILE (at least 64 MiB;
// skipped when unset).
func BenchmarkRingRandRead(b *testing.B) {
	path := os.Getenv("TIERSTORE_BENCH_FILE")
	if path == "" {
		b.Skip("TIERSTORE_BENCH_FILE not set")
	}
	for _, bs := range []int{64 << 10, 1 << 20} {
		for _, qd := range []int{4, 32} {
			for _, fixed := range []bool{false, true} {
				b.Run(fmt.Sprintf("bs=%dKiB/qd=%d/fixed=%v", bs>>10, qd, fixed), func(b *testing.B) {
					benchRandRead(b, path, bs, qd, fixed)
				})
			}
		}
	}
}

func benchRandRead(b *testing.B, path string, bs, qd int, fixed bool) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		b.Fatal(err)
	}
	blocks := int(st.Size) / bs
	r, err := New(Config{Entries: uint32(qd)})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	mem, err := NewBuffer(qd * bs)
	if err != nil {
		b.Fatal(err)
	}
	defer mem.Free()
	op := OpRead
	if fixed {
		if err := r.RegisterBuffers([]*Buffer{mem}); err != nil {
			b.Fatal(err)
		}
		op = OpReadFixed
	}
	rng := rand.New(rand.NewPCG(1, 2))
	submit := func(slot int) {
		if _, err := r.Prepare(Op{Opcode: op, Fd: fd, Off: int64(rng.IntN(blocks) * bs), Buf: mem.Bytes()[slot*bs : (slot+1)*bs], Tag: slot}); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(bs))
	var comps []Completion
	issued := 0
	for slot := 0; slot < qd && issued < b.N; slot++ {
		submit(slot)
		issued++
	}
	done := 0
	for done < b.N {
		if err := r.Wait(1); err != nil {
			b.Fatal(err)
		}
		comps = r.Reap(comps[:0])
		for _, c := range comps {
			if c.Res != int32(bs) {
				b.Fatalf("read: res %d: %v", c.Res, c.Err())
			}
			done++
			if issued < b.N {
				submit(c.Tag.(int))
				issued++
			}
		}
	}
}
