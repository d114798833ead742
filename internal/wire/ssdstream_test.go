package wire

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/crc32c"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/testkit"
)

// An SSD value is streamed in pieces behind one header that carries the
// node's CRC32C; the client reads it straight into its buffer and checks
// it once.
func TestSSDStreamPieces(t *testing.T) {
	h := newMemHandler(1 << 20)
	dc := dial(t, serveMem(t, h))
	ctx := context.Background()
	for _, n := range []int{0, 1, ssdPiece, 5*ssdPiece + 17} {
		val := rnd(n)
		key := strings.Repeat("k", n%7+1) + string(rune('a'+n%26))
		h.setSSD(key, val)
		h.locked(func() { h.ssdCRC[key] = crc32c.Checksum(val) })
		buf, guard := guarded(t, n)
		if err := dc.ReadSSD(ctx, []byte(key), buf, crc32c.Checksum(val)); err != nil || !bytes.Equal(buf, val) {
			t.Fatalf("%d bytes: %v", n, err)
		}
		guard()
	}
	if h.verified.Load() != 0 {
		t.Fatalf("%d verified reads for good copies", h.verified.Load())
	}
}

// A piece that fails mid-stream breaks the connection: the client gets a
// short-frame TRANSFER_FAIL naming the SSD read, nothing lands beyond its
// buffer, the value is closed, and a new connection reads again. A
// failure before the first piece is an error reply on a connection that
// stays usable.
func TestSSDStreamMidStreamFailure(t *testing.T) {
	h := newMemHandler(1 << 20)
	addr := serveMem(t, h)
	// A node that kept the connection open would leave the read waiting.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	val := rnd(4*ssdPiece + 100)
	h.setSSD("k", val)
	h.locked(func() { h.ssdCRC["k"] = crc32c.Checksum(val) })
	h.locked(func() { h.ssdFailAfter["k"] = 2 })
	dc := dial(t, addr)
	buf, guard := guarded(t, len(val))
	err := dc.ReadSSD(ctx, []byte("k"), buf, crc32c.Checksum(val))
	if !errors.Is(err, ErrShortFrame) || !errors.Is(err, errcode.ErrTransferFail) || !strings.Contains(err.Error(), "broke off its SSD read") || ctx.Err() != nil {
		t.Fatalf("mid-stream failure: %v", err)
	}
	guard()
	<-dc.readerDone // the call ends before its reader marks the connection broken
	if !dc.Broken() {
		t.Fatal("the connection survived a broken-off stream")
	}
	if h.verified.Load() != 0 {
		t.Fatal("a transport failure was retried as a bad checksum")
	}

	h.mu.Lock()
	h.ssdFailAfter["k"] = 0
	h.mu.Unlock()
	dc2 := dial(t, addr)
	err = dc2.ReadSSD(ctx, []byte("k"), buf, crc32c.Checksum(val))
	if !errors.Is(err, errcode.ErrInternal) || dc2.Broken() {
		t.Fatalf("failure before the first piece: %v (broken %v)", err, dc2.Broken())
	}
	h.mu.Lock()
	delete(h.ssdFailAfter, "k")
	h.mu.Unlock()
	if err := dc2.ReadSSD(ctx, []byte("k"), buf, crc32c.Checksum(val)); err != nil || !bytes.Equal(buf, val) {
		t.Fatalf("read after the failures: %v", err)
	}
	guard()
	testkit.Eventually(t, "every value closed", func() bool { return h.closes.Load() == 3 })
}

// A value whose pieces hold more than it announced is cut off before the
// excess reaches the socket: the reader's buffer holds only its bytes.
func TestSSDStreamPiecesBeyondSize(t *testing.T) {
	h := newMemHandler(1 << 20)
	addr := serveMem(t, h)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		size int
	}{{"first piece", ssdPiece / 2}, {"later piece", 3*ssdPiece + 10}} {
		val := rnd(tc.size)
		h.setSSD(tc.name, val)
		h.locked(func() { h.ssdCRC[tc.name] = crc32c.Checksum(val) })
		h.locked(func() { h.ssdLie[tc.name] = 5 })
		dc := dial(t, addr)
		buf, guard := guarded(t, tc.size-5)
		err := dc.ReadSSD(ctx, []byte(tc.name), buf, crc32c.Checksum(val[:tc.size-5]))
		if errors.Is(err, errcode.ErrTransferFail) {
			<-dc.readerDone // the call ends before its reader marks the connection broken
		}
		if !errors.Is(err, errcode.ErrTransferFail) || !dc.Broken() {
			t.Fatalf("%s: %v (broken %v)", tc.name, err, dc.Broken())
		}
		guard()
	}
}

// Bytes that fail the client's check while the node announced the
// object's CRC are asked again with FlagVerify: a corrupt copy is dropped
// by the node exactly once and answered CHECKSUM_MISMATCH; damage on the
// way is healed by the verified read. A node whose copy is another
// version (its CRC differs) is not asked again.
func TestSSDStreamVerifyRetry(t *testing.T) {
	h := newMemHandler(1 << 20)
	dc := dial(t, serveMem(t, h))
	ctx := context.Background()
	val := rnd(3*ssdPiece + 5)
	bad := bytes.Clone(val)
	bad[100] ^= 1

	h.setSSD("corrupt", bad)
	h.locked(func() { h.ssdCRC["corrupt"] = crc32c.Checksum(val) })
	buf := make([]byte, len(val))
	err := dc.ReadSSD(ctx, []byte("corrupt"), buf, crc32c.Checksum(val))
	if !errors.Is(err, errcode.ErrChecksumMismatch) || h.verified.Load() != 1 || h.drops.Load() != 1 {
		t.Fatalf("corrupt copy: %v (verified %d, dropped %d)", err, h.verified.Load(), h.drops.Load())
	}

	h.setSSD("glitch", val)
	h.locked(func() { h.ssdCRC["glitch"] = crc32c.Checksum(val) })
	h.locked(func() { h.ssdGlitch["glitch"] = true })
	if err := dc.ReadSSD(ctx, []byte("glitch"), buf, crc32c.Checksum(val)); err != nil || !bytes.Equal(buf, val) {
		t.Fatalf("damage on the way: %v", err)
	}
	if h.verified.Load() != 2 || h.drops.Load() != 1 {
		t.Fatalf("after the glitch: verified %d, dropped %d", h.verified.Load(), h.drops.Load())
	}

	other := rnd(len(val))
	h.setSSD("version", other)
	h.locked(func() { h.ssdCRC["version"] = crc32c.Checksum(other) })
	err = dc.ReadSSD(ctx, []byte("version"), buf, crc32c.Checksum(val))
	if !errors.Is(err, ErrBadChecksum) || h.verified.Load() != 2 {
		t.Fatalf("another version: %v (verified %d)", err, h.verified.Load())
	}
	if dc.Broken() {
		t.Fatal("a checksum failure broke the connection")
	}
}
