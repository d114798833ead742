package node

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/crc32c"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/wire"
)

// rawData opens a data connection to endpoint by hand (hellos exchanged),
// for a test to play a misbehaving client on.
func rawData(t *testing.T, endpoint string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	hi := [wire.HelloLen]byte{wire.DataMagic[0], wire.DataMagic[1], wire.DataMagic[2], wire.DataMagic[3], wire.DataVersion}
	if _, err := c.Write(hi[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, hi[:]); err != nil {
		t.Fatal(err)
	}
	return c.(*net.TCPConn)
}

// writeHead sends the header and metadata of a write of payloadLen bytes
// announced with crc; the payload is the caller's to send (or not).
func writeHead(t *testing.T, c net.Conn, seg string, off int64, token uint64, key string, payloadLen int, crc uint32) {
	t.Helper()
	meta := (&wire.Request{Op: wire.OpWrite, Segment: seg, Offset: uint64(off), Token: token, Key: []byte(key)}).AppendMeta(nil)
	b := make([]byte, wire.HeaderLen, wire.HeaderLen+len(meta))
	(&wire.Header{Op: wire.OpWrite, ID: 1, Flags: wire.FlagCRC, CRC: crc, MetaLen: uint32(len(meta)), PayloadLen: uint64(payloadLen)}).Encode(b)
	if _, err := c.Write(append(b, meta...)); err != nil {
		t.Fatal(err)
	}
}

// recorded reports whether the node recorded a complete write of token
// at off (what re-registration would publish).
func recorded(n *Node, off int64, token uint64) bool {
	n.ha.recMu.Lock()
	defer n.ha.recMu.Unlock()
	r, ok := n.ha.records[off]
	return ok && r.token == token
}

// Issue 12: a put's bytes are received straight into the segment, so a
// write that fails must neither be recorded (published at a new master)
// nor touch a byte outside its own range. Each misbehaviour over the real
// data plane: a wrong CRC32C, a payload shorter than announced (the next
// bytes taken as its tail), a disconnect mid-payload, a payload longer
// than announced. The neighbours' bytes and records stay intact, and a
// correct write of the range still succeeds afterwards.
func TestDataPlanePutFailuresLeaveNothing(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	n := startTestNode(t, m, "127.0.0.1:0", nil)
	ctx := context.Background()
	seg := n.SegmentName()
	const S = 1<<20 + 4093 // several socket reads; not chunk-aligned
	left, right := rnd(S), rnd(S)
	dc, err := wire.DialData(ctx, n.Endpoint(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	put := func(off int64, v []byte, crc uint32, token uint64, key string) error {
		return dc.Write(wire.WithObject(ctx, wire.Object{Key: key}), seg, off, v, crc, token)
	}
	if err := put(0, left, crc32c.Checksum(left), 1, "left"); err != nil {
		t.Fatal(err)
	}
	if err := put(2*S, right, crc32c.Checksum(right), 2, "right"); err != nil {
		t.Fatal(err)
	}
	intact := func(what string) {
		t.Helper()
		for _, nb := range []struct {
			off   int64
			val   []byte
			token uint64
		}{{0, left, 1}, {2 * S, right, 2}} {
			got, err := n.ReadRange(ctx, seg, nb.off, S)
			if err != nil || !bytes.Equal(got, nb.val) || !recorded(n, nb.off, nb.token) {
				t.Fatalf("%s: the neighbour at %d changed (%v)", what, nb.off, err)
			}
		}
	}
	val := rnd(S)
	crc := crc32c.Checksum(val)

	// A wrong CRC32C: refused, the connection kept.
	if err := put(S, val, crc^1, 3, "mid"); !errors.Is(err, errcode.ErrChecksumMismatch) || dc.Broken() {
		t.Fatalf("wrong CRC: %v (broken %v)", err, dc.Broken())
	}
	if recorded(n, S, 3) {
		t.Fatal("wrong CRC: the write was recorded")
	}
	intact("wrong CRC")

	// Shorter than announced: half the value, then other bytes the node
	// takes as the rest (and a junk frame after).
	c := rawData(t, n.Endpoint())
	writeHead(t, c, seg, S, 4, "mid", S, crc)
	_, _ = c.Write(val[:S/2])
	_, _ = c.Write(bytes.Repeat([]byte{0xEE}, S-S/2+64))
	_ = c.CloseWrite()
	h, msg, err := wire.ReadFrameHead(c, make([]byte, wire.HeaderLen), nil)
	if err != nil || h.Status != errcode.ChecksumMismatch {
		t.Fatalf("short payload: reply %+v %q %v, want CHECKSUM_MISMATCH", h, msg, err)
	}
	if _, err := io.Copy(io.Discard, c); err != nil { // the node hangs up on the junk frame
		t.Fatal(err)
	}
	if recorded(n, S, 4) {
		t.Fatal("short payload: the write was recorded")
	}
	intact("short payload")

	// A disconnect mid-payload: no reply, nothing recorded.
	c = rawData(t, n.Endpoint())
	writeHead(t, c, seg, S, 5, "mid", S, crc)
	_, _ = c.Write(val[:S/3])
	_ = c.CloseWrite()
	if got, err := io.ReadAll(c); err != nil || len(got) != 0 {
		t.Fatalf("disconnect mid-payload: %d reply bytes, %v", len(got), err)
	}
	if recorded(n, S, 5) {
		t.Fatal("disconnect mid-payload: the write was recorded")
	}
	intact("disconnect mid-payload")

	// Longer than announced: the announced bytes are the write (stored
	// and recorded), the rest is no payload of it: taken as a frame,
	// refused, the connection closed; the neighbour is untouched.
	c = rawData(t, n.Endpoint())
	writeHead(t, c, seg, S, 6, "mid", S, crc)
	_, _ = c.Write(val)
	_, _ = c.Write(bytes.Repeat([]byte{0xEE}, 4096))
	_ = c.CloseWrite()
	h, msg, err = wire.ReadFrameHead(c, make([]byte, wire.HeaderLen), nil)
	if err != nil || h.Status != errcode.OK {
		t.Fatalf("longer payload: first reply %+v %q %v", h, msg, err)
	}
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Fatal(err)
	}
	intact("longer payload")

	// The range is still writable by a newer put, over the pooled conn.
	if err := put(S, val, crc, 7, "mid"); err != nil {
		t.Fatalf("a correct write after the failures: %v", err)
	}
	if got, err := n.ReadRange(ctx, seg, S, S); err != nil || !bytes.Equal(got, val) || !recorded(n, S, 7) {
		t.Fatalf("the correct write: %v", err)
	}
	intact("correct write")
}

// Invariant 8 on the in-place receive: a data-plane write whose range a
// newer put claims between two chunks lands no further chunk (Fill refuses
// without calling fill), and its Commit records nothing; the newer bytes
// stay intact.
func TestRangeWriteOvertakenBetweenChunks(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	n := startTestNode(t, m, "", nil)
	ctx := wire.WithObject(context.Background(), wire.Object{Key: "old"})
	seg := n.SegmentName()
	old, newer := rnd(2<<20), rnd(2<<20)
	w, err := n.beginWrite(ctx, seg, 4096, int64(len(old)), 1)
	if err != nil {
		t.Fatal(err)
	}
	k, err := w.Fill(0, func(dst []byte) (int, error) { return copy(dst, old[:1<<20]), nil })
	if err != nil || k != 1<<20 {
		t.Fatalf("first chunk: %d %v", k, err)
	}
	if err := n.WriteRange(wire.WithObject(context.Background(), wire.Object{Key: "new"}), seg, 4096, newer, crc32c.Checksum(newer), 2); err != nil {
		t.Fatal(err)
	}
	called := false
	_, err = w.Fill(1<<20, func(dst []byte) (int, error) { called = true; return copy(dst, old[1<<20:]), nil })
	if !errors.Is(err, errcode.ErrInvalidParams) || !strings.Contains(err.Error(), "write refused") || called {
		t.Fatalf("fill after a newer claim: %v (fill called: %v)", err, called)
	}
	w.Commit(crc32c.Checksum(old))
	if recorded(n, 4096, 1) || !recorded(n, 4096, 2) {
		t.Fatal("the overtaken write was recorded over the newer one")
	}
	got, err := n.ReadRange(context.Background(), seg, 4096, int64(len(newer)))
	if err != nil || !bytes.Equal(got, newer) {
		t.Fatalf("the newer put's bytes were overwritten (%v)", err)
	}
}

// A put whose write the node refuses publishes nothing: the client revokes
// it, and the key reads as never stored.
func TestRefusedPutPublishesNothing(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	n := startTestNode(t, m, "127.0.0.1:0", nil)
	c := newTestClient(t, client.Config{MasterAddr: serveMaster(t, m)})
	ctx := context.Background()
	// A put far in the future owns the whole segment: every write of the
	// master's tokens is refused at the node.
	if err := n.claimRange(0, n.seg.Size(), ^uint64(0)); err != nil {
		t.Fatal(err)
	}
	err := c.Put(ctx, "k", rnd(300<<10))
	if !errors.Is(err, errcode.ErrInvalidParams) || !strings.Contains(err.Error(), "write refused") {
		t.Fatalf("put into a range another put owns: %v", err)
	}
	if _, err := c.Get(ctx, "k"); !errors.Is(err, errcode.ErrObjectNotFound) {
		t.Fatalf("get after the refused put: %v, want OBJECT_NOT_FOUND", err)
	}
}

// A batch read pipelines the remote DRAM reads (wire.ReadRanges); an item
// whose bytes fail their CRC32C there goes through the single-read path
// (fallback, report) and fails alone with CHECKSUM_MISMATCH, never with
// wrong bytes; the others are read, nothing beyond any buffer.
func TestBatchGetPipelinedWithCorruptItem(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	n := startTestNode(t, m, "127.0.0.1:0", nil)
	c := newTestClient(t, client.Config{MasterAddr: serveMaster(t, m)})
	ctx := context.Background()
	keys := []string{"a", "b", "c", "d", "e"}
	vals := make([][]byte, len(keys))
	for i, k := range keys {
		vals[i] = rnd(100<<10 + i)
		if err := c.Put(ctx, k, vals[i]); err != nil {
			t.Fatal(err)
		}
	}
	info, err := m.GetReplicaList(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.seg.WriteAt([]byte("garbage"), info.Replicas[0].Offset+99); err != nil {
		t.Fatal(err)
	}
	bufs := make([][]byte, len(keys))
	guards := make([]func(), len(keys))
	for i := range keys {
		bufs[i], guards[i] = guardedBuf(t, len(vals[i]))
	}
	ns, errs := c.BatchGetInto(ctx, keys, bufs)
	for i := range keys {
		guards[i]()
		if keys[i] == "c" {
			if !errors.Is(errs[i], errcode.ErrChecksumMismatch) || ns[i] != 0 {
				t.Fatalf("corrupt item: %d %v", ns[i], errs[i])
			}
			continue
		}
		if errs[i] != nil || ns[i] != len(vals[i]) || !bytes.Equal(bufs[i], vals[i]) {
			t.Fatalf("item %s: %d %v", keys[i], ns[i], errs[i])
		}
	}
	if rs := c.ReadStats(); rs.RemoteDRAM != 4 || rs.ChecksumFailures != 1 || rs.BadReplicasReported != 1 {
		t.Fatalf("read stats %+v", rs)
	}
	// Five pipelined reads, then the corrupt item once more on its own.
	if st := n.Stats(); st.PeerReadsDRAM != 6 {
		t.Fatalf("node served %d DRAM reads, want 6", st.PeerReadsDRAM)
	}
}
