package client_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/wire"
	"github.com/tierstore/tierstore/master"
	"github.com/tierstore/tierstore/masterapi"
)

var quiet = slog.New(slog.DiscardHandler)

// badNode is a store node that speaks the data plane at the frame level:
// it accepts every write (dropping the bytes) and answers every memory
// read with misbehave, which plays a broken or lying peer on the raw
// connection. It is mounted at an in-process master like a real node.
type badNode struct {
	lis       net.Listener
	misbehave func(c net.Conn, h wire.Header, req wire.Request)
	wg        sync.WaitGroup
}

func startBadNode(t *testing.T, m *master.Service, misbehave func(c net.Conn, h wire.Header, req wire.Request)) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &badNode{lis: lis, misbehave: misbehave}
	b.wg.Add(1)
	go b.accept()
	t.Cleanup(func() { lis.Close(); b.wg.Wait() })
	err = m.MountSegment(context.Background(), masterapi.MountRequest{Node: "bad", Endpoint: lis.Addr().String(), Segment: "seg", Size: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
}

func (b *badNode) accept() {
	defer b.wg.Done()
	for {
		c, err := b.lis.Accept()
		if err != nil {
			return
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			defer c.Close()
			b.serve(c)
		}()
	}
}

func (b *badNode) serve(c net.Conn) {
	var hi [wire.HelloLen]byte
	if _, err := io.ReadFull(c, hi[:]); err != nil {
		return
	}
	c.Write(hi[:]) // the same hello back
	hb := make([]byte, wire.HeaderLen)
	for {
		h, meta, err := wire.ReadFrameHead(c, hb, nil)
		if err != nil {
			return
		}
		req, _ := wire.ParseRequest(h.Op, meta)
		if h.Op == wire.OpWrite {
			io.CopyN(io.Discard, c, int64(h.PayloadLen))
			c.Write(reply(h, 0))
			continue
		}
		b.misbehave(c, h, req)
		return
	}
}

func reply(req wire.Header, payload uint64) []byte {
	b := make([]byte, wire.HeaderLen)
	(&wire.Header{Op: req.Op | wire.ReplyBit, ID: req.ID, PayloadLen: payload}).Encode(b)
	return b
}

// Through the client API, against a node that misbehaves on the wire: a
// Get fails with a clear error (the only replica is bad), never returns
// wrong bytes, and writes nothing beyond the caller's buffer. A single
// get's transfer goes on a connection of its own, whose reply its
// goroutine reads (wire.WithCallerReads), or on the caller's thread
// (wire.WithCallerThread).
func TestGetIntoFromMisbehavingNode(t *testing.T) {
	for _, thread := range []bool{false, true} {
		t.Run(map[bool]string{false: "goroutine", true: "caller thread"}[thread], func(t *testing.T) {
			testGetIntoFromMisbehavingNode(t, thread)
		})
	}
}

func testGetIntoFromMisbehavingNode(t *testing.T, thread bool) {
	const n = 200 << 10
	val := bytes.Repeat([]byte("tierstore"), n/9+1)[:n]
	for _, tc := range []struct {
		name string
		play func(c net.Conn, h wire.Header, req wire.Request)
		want error
	}{
		{"disconnect mid-stream", func(c net.Conn, h wire.Header, _ wire.Request) {
			c.Write(reply(h, n))
			c.Write(val[:n/2])
		}, client.ErrTransferFail},
		{"short frame", func(c net.Conn, h wire.Header, _ wire.Request) {
			c.Write(reply(h, n)[:wire.HeaderLen-3])
		}, client.ErrTransferFail},
		{"wrong checksum", func(c net.Conn, h wire.Header, _ wire.Request) {
			c.Write(reply(h, n))
			bad := bytes.Clone(val)
			bad[7] ^= 1
			c.Write(bad)
			io.Copy(io.Discard, c)
		}, client.ErrChecksumMismatch},
		{"value larger than announced", func(c net.Conn, h wire.Header, _ wire.Request) {
			r := reply(h, n+4096)
			c.Write(r)
			c.Write(val)
			c.Write(make([]byte, 4096))
			io.Copy(io.Discard, c)
		}, client.ErrTransferFail},
		{"node's CRC is another object's", func(c net.Conn, h wire.Header, _ wire.Request) {
			r := reply(h, n)
			r[3] = wire.FlagCRC
			binary.LittleEndian.PutUint32(r[12:], 0x12345678)
			c.Write(r)
			c.Write(val)
			io.Copy(io.Discard, c)
		}, client.ErrChecksumMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mc := master.DefaultConfig()
			mc.MonitorInterval, mc.Logger = 0, quiet
			m, err := master.New(mc)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			startBadNode(t, m, tc.play)
			c, err := client.New(context.Background(), client.Config{Master: m, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			if thread {
				ctx = wire.WithCallerThread(ctx)
			}
			// A batch put's writes share the pool's connections (unless
			// on the caller's thread), so the get below is what dials one.
			if errs := c.BatchPut(ctx, []string{"k"}, [][]byte{val}); errs[0] != nil {
				t.Fatal(errs[0])
			}
			if dials := c.ReadStats().OwnConns; !thread && dials != 0 {
				t.Fatalf("a batch put dialled %d connections of its own", dials)
			}
			full := bytes.Repeat([]byte{0x77}, n+512)
			got, err := c.GetInto(ctx, "k", full[:n])
			if !errors.Is(err, tc.want) || got != 0 {
				t.Fatalf("GetInto: %d, %v; want %v", got, err, tc.want)
			}
			if bytes.IndexFunc(full[n:], func(r rune) bool { return r != 0x77 }) >= 0 {
				t.Fatal("bytes written beyond the caller's buffer")
			}
			if tc.want == client.ErrChecksumMismatch && c.ReadStats().BadReplicasReported != 1 {
				t.Fatalf("a replica failing its checksum was not reported: %+v", c.ReadStats())
			}
			if dials := c.ReadStats().OwnConns; dials == 0 {
				t.Fatal("a single get dialled no connection of its own")
			}
		})
	}
}
