package pwrite_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"testing"

	"pgregory.net/rapid"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/backend/backendtest"
	"github.com/tierstore/tierstore/backend/mem"
	"github.com/tierstore/tierstore/backend/pwrite"
)

// class maps an error to the backend sentinel it matches ("" for nil).
func class(err error) string {
	if err == nil {
		return ""
	}
	for _, s := range []error{backend.ErrNotFound, backend.ErrExists, backend.ErrUnaligned,
		backend.ErrShortRead, backend.ErrBadRange, backend.ErrClosed, backend.ErrNoSpace} {
		if errors.Is(err, s) {
			return s.Error()
		}
	}
	return "other: " + err.Error()
}

// TestModelAgainstMem runs random sequences of WriteBucket, Read, Delete,
// List, Allocated and close-and-reopen on pwrite (buffered and O_DIRECT) and
// on the mem backend as the model; every result (bytes and error class) must
// match, and List must match after every step.
func TestModelAgainstMem(t *testing.T) {
	// Every step fsyncs: keep the default run short (-rapid.checks=N
	// overrides).
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == f.DefValue {
		f.Value.Set("25")
		defer f.Value.Set(f.DefValue)
	}
	for _, direct := range []bool{false, true} {
		t.Run(fmt.Sprintf("direct=%v", direct), func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) {
				dir := realDiskDir(t)
				opts := pwrite.Options{Direct: direct, Logger: slog.New(slog.DiscardHandler)}
				b, err := pwrite.Open(dir, opts)
				if err != nil {
					rt.Fatal(err)
				}
				defer func() { b.Close() }()
				model := mem.New()
				ctx := context.Background()
				id := rapid.Uint64Range(0, 5)
				rt.Repeat(map[string]func(*rapid.T){
					"write": func(rt *rapid.T) {
						i := id.Draw(rt, "id")
						n := rapid.IntRange(0, 24).Draw(rt, "blocks") * backend.Alignment
						if rapid.IntRange(0, 9).Draw(rt, "unaligned") == 0 {
							n += rapid.IntRange(1, backend.Alignment-1).Draw(rt, "extra")
						}
						data := backendtest.Pattern(rapid.Uint64().Draw(rt, "seed"), n)
						split := rapid.SliceOfN(rapid.IntRange(0, 70_000), 1, 4).Draw(rt, "split")
						if split[0] == 0 {
							split[0] = 1
						}
						got := b.WriteBucket(ctx, i, backendtest.Split(data, split))
						want := model.WriteBucket(ctx, i, backendtest.Split(data, split))
						if class(got) != class(want) {
							rt.Fatalf("WriteBucket(%d, %d bytes) = %v, model %v", i, n, got, want)
						}
					},
					"read": func(rt *rapid.T) {
						i := id.Draw(rt, "id")
						nops := rapid.IntRange(1, 6).Draw(rt, "nops")
						ops := make([]backend.ReadOp, nops)
						for k := range ops {
							ops[k] = backend.ReadOp{
								Off: rapid.Int64Range(-1, 25*backend.Alignment).Draw(rt, "off"),
								Len: rapid.IntRange(-1, 3*backend.Alignment).Draw(rt, "len"),
							}
						}
						mops := append([]backend.ReadOp(nil), ops...)
						got, want := backend.ReadFile(ctx, b, i, ops), backend.ReadFile(ctx, model, i, mops)
						if class(got) != class(want) {
							rt.Fatalf("Read(%d) = %v, model %v", i, got, want)
						}
						for k := range ops {
							if class(ops[k].Err) != class(mops[k].Err) || !bytes.Equal(ops[k].Data, mops[k].Data) {
								rt.Fatalf("Read(%d) op [%d,+%d): err %v, %d bytes; model err %v, %d bytes; bytes equal: %v",
									i, ops[k].Off, ops[k].Len, ops[k].Err, len(ops[k].Data), mops[k].Err, len(mops[k].Data),
									bytes.Equal(ops[k].Data, mops[k].Data))
							}
						}
					},
					"delete": func(rt *rapid.T) {
						i := id.Draw(rt, "id")
						if got, want := b.Delete(i), model.Delete(i); class(got) != class(want) {
							rt.Fatalf("Delete(%d) = %v, model %v", i, got, want)
						}
					},
					"allocated": func(rt *rapid.T) {
						got, err := b.Allocated()
						if err != nil {
							rt.Fatal(err)
						}
						want, _ := model.Allocated()
						// A real file system may allocate more than the
						// bytes (metadata blocks) but never less.
						if got < want || (want == 0) != (got == 0) {
							rt.Fatalf("Allocated = %d, model %d", got, want)
						}
					},
					"reopen": func(rt *rapid.T) {
						if err := b.Close(); err != nil {
							rt.Fatal(err)
						}
						if b, err = pwrite.Open(dir, opts); err != nil {
							rt.Fatal(err)
						}
					},
					"": func(rt *rapid.T) {
						got, err := b.List()
						if err != nil {
							rt.Fatal(err)
						}
						want, _ := model.List()
						if fmt.Sprint(got) != fmt.Sprint(want) {
							rt.Fatalf("List = %v, model %v", got, want)
						}
					},
				})
			})
		})
	}
}
