package master

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"

	"github.com/tierstore/tierstore/masterapi"
	"github.com/tierstore/tierstore/mastergrpc"
)

// frameCounter counts the HTTP/2 PING frames that are not acks in one
// direction of a connection, from the bytes as they pass.
type frameCounter struct {
	mu      sync.Mutex // protects the fields below
	skip    int        // preface bytes still to pass (the client's 24)
	head    []byte     // the frame header read so far
	payload int        // payload bytes of the current frame still to pass
	pings   int
}

func (f *frameCounter) add(b []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(b) > 0 {
		switch {
		case f.skip > 0:
			n := min(f.skip, len(b))
			f.skip, b = f.skip-n, b[n:]
		case f.payload > 0:
			n := min(f.payload, len(b))
			f.payload, b = f.payload-n, b[n:]
		default:
			n := min(9-len(f.head), len(b))
			f.head, b = append(f.head, b[:n]...), b[n:]
			if len(f.head) == 9 {
				const ping, ack = 0x6, 0x1
				if f.head[3] == ping && f.head[4]&ack == 0 {
					f.pings++
				}
				f.payload = int(binary.BigEndian.Uint32(append([]byte{0}, f.head[:3]...)))
				f.head = f.head[:0]
			}
		}
	}
}

func (f *frameCounter) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pings
}

// countingConn counts the PINGs a client sends (its writes) and receives
// (its reads).
type countingConn struct {
	net.Conn
	sent, received *frameCounter
}

func (c countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.received.add(b[:n])
	return n, err
}

func (c countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.sent.add(b[:n])
	return n, err
}

// TestMasterCallsSendNoPings: a sequence of master calls over gRPC sends no
// PING either way. With gRPC's dynamic flow-control windows (no
// mastergrpc.FlowWindow on the client's or the server's side), each end
// sends a window update and a PING (bandwidth-delay estimation) on a
// message received while none of its PINGs is outstanding: with one call
// at a time, on every call, a wake-up and a write of each process more
// per call.
func TestMasterCallsSendNoPings(t *testing.T) {
	s, _ := testService(t, nil)
	mount(t, s, "n1", 1<<30)
	sent, received := &frameCounter{skip: 24}, &frameCounter{}
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c, sent, received}, nil
	}
	r, err := mastergrpc.Dial(bg, serveGRPC(t, s), grpc.WithContextDialer(dial))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	const puts = 50
	for i := range puts {
		key := fmt.Sprintf("k%d", i)
		rep, err := r.PutStart(bg, masterapi.PutStartRequest{Key: key, Size: 4096, CRC: crcOf(key)})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.PutEnd(bg, key, rep.PutToken); err != nil {
			t.Fatal(err)
		}
	}
	if n, m := sent.count(), received.count(); n != 0 || m != 0 {
		t.Fatalf("%d puts (%d master calls): the client sent %d PINGs, the master %d; want none", puts, 2*puts, n, m)
	}
}
