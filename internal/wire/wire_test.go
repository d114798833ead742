package wire

import (
	"bytes"
	"context"
	"errors"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tierstore/tierstore/internal/codes"
	"github.com/tierstore/tierstore/internal/rpcpb"
)

// liar is a node peer service that streams whatever its script says.
type liar struct {
	rpcpb.UnimplementedNodePeerServer
	script func(send func(*rpcpb.PeerDataChunk) error) error
}

func (l *liar) ReadRange(_ *rpcpb.PeerReadRangeRequest, st grpc.ServerStreamingServer[rpcpb.PeerDataChunk]) error {
	return l.script(st.Send)
}

func (l *liar) ReadSSD(_ *rpcpb.PeerReadSSDRequest, st grpc.ServerStreamingServer[rpcpb.PeerDataChunk]) error {
	return l.script(st.Send)
}

// serveLiar serves l on loopback over real gRPC and returns a Peer of it
// and a function that stops the server (dropping its connections).
func serveLiar(t *testing.T, l *liar) (Peer, func()) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(ServerOptions()...)
	rpcpb.RegisterNodePeerServer(srv, l)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	var pool Pool
	t.Cleanup(pool.Close)
	p, err := pool.Get(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return p, srv.Stop
}

// Issue 9 item 7: a peer that lies about a value's length, or breaks off,
// gets a clear TRANSFER_FAIL (or RPC_FAIL for a dropped connection) naming
// the byte counts, and the reader never allocates beyond what it expects
// (the object's size) nor returns bytes.
func TestRecvValueRefusesLyingPeers(t *testing.T) {
	const want = 3*MaxChunk + 100 // the object's size, what the reader expects
	val := bytes.Repeat([]byte{7}, want)
	chunks := func(v []byte, total uint64) func(send func(*rpcpb.PeerDataChunk) error) error {
		return func(send func(*rpcpb.PeerDataChunk) error) error {
			v := v
			first := true
			for first || len(v) > 0 {
				n := min(len(v), MaxChunk)
				c := &rpcpb.PeerDataChunk{Data: v[:n]}
				if first {
					c.TotalLen, first = total, false
				}
				if err := send(c); err != nil {
					return err
				}
				v = v[n:]
			}
			return nil
		}
	}
	var stop func()
	cases := []struct {
		name   string
		script func(send func(*rpcpb.PeerDataChunk) error) error
		code   error
		text   string
	}{
		{"announces far more than the object", chunks(val[:10], 1<<40), codes.ErrTransferFail, "peer announced 1099511627776 bytes, at most 3145828 expected"},
		{"announces one byte more than the object", chunks(val[:10], want+1), codes.ErrTransferFail, "at most 3145828 expected"},
		{"sends more than it announced", chunks(val, want-MaxChunk), codes.ErrTransferFail, "more than the 2097252 bytes it announced"},
		{"sends fewer than it announced", chunks(val[:want-1], want), codes.ErrTransferFail, "peer sent 3145827 of 3145828 bytes"},
		{"sends nothing", func(func(*rpcpb.PeerDataChunk) error) error { return nil }, codes.ErrTransferFail, "no data"},
		{"disconnects mid-stream", func(send func(*rpcpb.PeerDataChunk) error) error {
			if err := send(&rpcpb.PeerDataChunk{TotalLen: want, Data: val[:MaxChunk]}); err != nil {
				return err
			}
			stop() // the node goes away: every connection drops
			<-time.After(time.Second)
			return nil
		}, codes.ErrRPCFail, "wire: peer stream broke"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var p Peer
			p, stop = serveLiar(t, &liar{script: c.script})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for _, read := range []struct {
				name string
				do   func() ([]byte, error)
			}{
				{"ReadRange", func() ([]byte, error) { return p.ReadRange(ctx, "seg", 0, want) }},
				{"ReadSSD", func() ([]byte, error) { return p.ReadSSD(ctx, []byte("k"), want) }},
			} {
				var ms0, ms1 runtime.MemStats
				runtime.ReadMemStats(&ms0)
				v, err := read.do()
				runtime.ReadMemStats(&ms1)
				if v != nil || !errors.Is(err, c.code) || !strings.Contains(err.Error(), c.text) {
					t.Errorf("%s: %d bytes, error %v; want %v with %q", read.name, len(v), err, c.code, c.text)
				}
				// gRPC buffers a few chunks; the value itself is at most want.
				if grown := ms1.TotalAlloc - ms0.TotalAlloc; grown > 4*want+16*MaxChunk {
					t.Errorf("%s: %d bytes allocated for a %d-byte object", read.name, grown, want)
				}
				if c.name == "disconnects mid-stream" {
					break // the server is gone after the first read
				}
			}
		})
	}
}

// Issue 9 item 7: a stream that breaks after some chunks names how many
// bytes had arrived, and returns none of them.
func TestRecvValueStreamBreaksMidway(t *testing.T) {
	sent := 0
	recv := func() (*rpcpb.PeerDataChunk, error) {
		sent++
		if sent == 1 {
			return &rpcpb.PeerDataChunk{TotalLen: 3 * MaxChunk, Data: make([]byte, MaxChunk)}, nil
		}
		return nil, status.Error(grpccodes.Unavailable, "connection reset by peer")
	}
	v, _, _, err := RecvValue(recv, 3*MaxChunk)
	if v != nil || !errors.Is(err, codes.ErrRPCFail) || !strings.Contains(err.Error(), "after 1048576 of 3145728 bytes") {
		t.Fatalf("%d bytes, %v", len(v), err)
	}
}
