package wire

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/crc32c"
	"github.com/tierstore/tierstore/internal/tlsconf"
)

// countingListener counts the writes on the connections it accepts.
type countingListener struct {
	net.Listener
	writes *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{Conn: c, writes: l.writes}, nil
}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// testSources makes a throwaway CA and the certificates of a node and of
// a client from it.
func testSources(tb testing.TB) (node, client *tlsconf.Source) {
	tb.Helper()
	ca, err := tlsconf.NewCA("wire test ca", time.Hour)
	if err != nil {
		tb.Fatal(err)
	}
	dir := tb.TempDir()
	node, err = ca.Source(dir, "node", []tlsconf.Role{tlsconf.Node})
	if err != nil {
		tb.Fatal(err)
	}
	client, err = ca.Source(dir, "client", []tlsconf.Role{tlsconf.Client})
	if err != nil {
		tb.Fatal(err)
	}
	return node, client
}

// serveTLS starts a data server over mutual TLS whose socket writes are
// counted; it returns its address, the counter and a client TLS config.
func serveTLS(t *testing.T, h DataHandler) (string, *atomic.Int64, *DataPool) {
	t.Helper()
	srv, cli := testSources(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	writes := new(atomic.Int64)
	m := NewMuxWith(countingListener{lis, writes}, NewDataServer(h, DataServerOptions{Logger: quiet}), MuxOptions{TLS: srv.ServerConfig()})
	t.Cleanup(func() { m.Close() })
	p := &DataPool{TLS: cli.ClientConfig(tlsconf.Node)}
	t.Cleanup(p.Close)
	return lis.Addr().String(), writes, p
}

// Over TLS a reply's records (the data plane's own, record.go) reach the
// socket gathered: a 1 MiB read (a head record and 16 records of 64 KiB)
// in 4 writes, a 4 KiB read (a head record and a payload record) in one.
// Writes and reads of both sizes round-trip with the right bytes.
func TestTLSFrameGathered(t *testing.T) {
	h := newMemHandler(4 << 20)
	addr, writes, pool := serveTLS(t, h)
	ctx := context.Background()
	dc, err := pool.Get(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{4 << 10, 1 << 20} {
		val := rnd(size)
		if err := dc.Write(ctx, "seg", 0, val, crc32c.Checksum(val), 1); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, size)
		before := writes.Load()
		if err := dc.ReadRange(ctx, "seg", 0, buf, crc32c.Checksum(val)); err != nil {
			t.Fatal(err)
		}
		got := writes.Load() - before
		if !bytes.Equal(buf, val) {
			t.Fatalf("%d bytes: read back other bytes", size)
		}
		// The staging buffer holds a head record and four records of
		// 64 KiB: 1 MiB is 4 writes.
		if want := int64(size/(4*maxRecord) + min(1, size%(4*maxRecord))); got > want {
			t.Errorf("a %d-byte read reply took %d socket writes, want at most %d (records not gathered)", size, got, want)
		}
	}
}

// Over TLS, one connection carries concurrent writes, memory reads and
// SSD reads (the node answers those from their own goroutines, each a
// gathered reply) and every call gets its own bytes: gathered records of
// different frames never interleave.
func TestTLSConcurrentFrames(t *testing.T) {
	h := newMemHandler(8 << 20)
	const k = 8
	vals := make([][]byte, k)
	for i := range vals {
		vals[i] = rnd(300<<10 + i*1000) // over a gathered write each
		h.setSSD(fmt.Sprint(i), vals[i])
	}
	addr, _, pool := serveTLS(t, h)
	ctx := context.Background()
	dc, err := pool.Get(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errc := make(chan error, 3*k)
	for i := range k {
		off := int64(i) << 20
		wg.Go(func() {
			v := rnd(512<<10 + i)
			if err := dc.Write(ctx, "seg", off, v, crc32c.Checksum(v), uint64(i+1)); err != nil {
				errc <- err
				return
			}
			buf := make([]byte, len(v))
			if err := dc.ReadRange(ctx, "seg", off, buf, crc32c.Checksum(v)); err != nil {
				errc <- err
			} else if !bytes.Equal(buf, v) {
				errc <- fmt.Errorf("range %d: other bytes", i)
			}
		})
		wg.Go(func() {
			buf := make([]byte, len(vals[i]))
			if err := dc.ReadSSD(ctx, []byte(fmt.Sprint(i)), buf, crc32c.Checksum(vals[i])); err != nil {
				errc <- err
			} else if !bytes.Equal(buf, vals[i]) {
				errc <- fmt.Errorf("ssd %d: other bytes", i)
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}
