package wire

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/tlsconf"
)

// tlsPair returns both ends of a loopback TCP connection through a mutual
// TLS 1.3 handshake (certificates of a throwaway CA) and the hellos, as a
// data connection has them before its first frame: the client's end first.
func tlsPair(tb testing.TB) (*tlsConn, *tlsConn) {
	tb.Helper()
	srv, cli := testSources(tb)
	return tlsPairWith(tb, srv.ServerConfig(), cli.ClientConfig(tlsconf.Node), nil)
}

// tlsPairWith is tlsPair with configurations of the caller's; wrap, when
// not nil, wraps both sockets before TLS takes them.
func tlsPairWith(tb testing.TB, scfg, ccfg *tls.Config, wrap func(net.Conn) net.Conn) (*tlsConn, *tlsConn) {
	if wrap == nil {
		wrap = func(c net.Conn) net.Conn { return c }
	}
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer lis.Close()
	type res struct {
		c   *tlsConn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := lis.Accept()
		if err != nil {
			ch <- res{nil, err}
			return
		}
		tc := tlsDataServer(wrap(c), scfg)
		if err := tc.Handshake(); err != nil {
			c.Close()
			ch <- res{nil, err}
			return
		}
		var got [HelloLen]byte
		if _, err := io.ReadFull(tc, got[:]); err != nil {
			c.Close()
			ch <- res{nil, err}
			return
		}
		h := hello()
		_, err = tc.Write(h[:])
		ch <- res{tc, err}
	}()
	c, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	cc := tlsDataClient(wrap(c), ccfg)
	if err := cc.Handshake(); err != nil {
		tb.Fatal(err)
	}
	h := hello()
	if _, err := cc.Write(h[:]); err != nil {
		tb.Fatal(err)
	}
	var got [HelloLen]byte
	if _, err := io.ReadFull(cc, got[:]); err != nil {
		tb.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		tb.Fatal(r.err)
	}
	tb.Cleanup(func() { cc.g.Conn.Close(); r.c.g.Conn.Close() })
	return cc, r.c
}

// BenchmarkRecordLayer moves 1 MiB replies one way over loopback, as a
// node answers a get from its segment (64 MiB of it, in turn, so that the
// bytes are cold as a random get's are) and a client reads them into one
// buffer with its CRC32C: plaintext, crypto/tls (the data plane's TLS
// connection of data plane 4: gathered writes, a 128 KiB read buffer),
// and the record layer of data plane 5 inside the same TLS session. Both
// ends in this process, on the same cores, as in `go run ./bench tls`.
// cpu-us/MiB is the process's user+system CPU per MiB moved.
func BenchmarkRecordLayer(b *testing.B) {
	const size = 1 << 20
	src := rnd(64 << 20)
	modes := []string{"plain", "tls", "records"}
	if m := os.Getenv("RECMODES"); m != "" {
		modes = strings.Split(m, ",")
	}
	if v, err := strconv.Atoi(os.Getenv("RECSIZE")); err == nil {
		recSize = v
	}
	if v, err := strconv.Atoi(os.Getenv("RECFLUSH")); err == nil {
		recFlushAt = v
	}
	for _, mode := range modes {
		b.Run(mode, func(b *testing.B) {
			var w, r net.Conn
			switch mode {
			case "plain":
				lis, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					b.Fatal(err)
				}
				acc := make(chan net.Conn, 1)
				go func() { c, _ := lis.Accept(); acc <- c }()
				r, err = net.Dial("tcp", lis.Addr().String())
				if err != nil {
					b.Fatal(err)
				}
				w = <-acc
				lis.Close()
				b.Cleanup(func() { w.Close(); r.Close() })
			case "tls":
				// Data plane 4: crypto/tls's records, gathered (tlsConn),
				// the socket read through a 128 KiB buffer.
				ca, err := tlsconf.NewCA("record bench ca", time.Hour)
				if err != nil {
					b.Fatal(err)
				}
				srv, err := ca.Source(b.TempDir(), "node", []tlsconf.Role{tlsconf.Node})
				if err != nil {
					b.Fatal(err)
				}
				cli, err := ca.Source(b.TempDir(), "client", []tlsconf.Role{tlsconf.Client})
				if err != nil {
					b.Fatal(err)
				}
				cc, sc := tlsPairWith(b, srv.ServerConfig(), cli.ClientConfig(tlsconf.Node), func(c net.Conn) net.Conn {
					return &bufConn{Conn: c, br: bufio.NewReaderSize(c, 128<<10)}
				})
				w, r = sc, cc
			case "records", "records-f64k", "records-r16k", "records-r32k":
				recSize, recFlushAt = maxRecord, recStage
				switch mode {
				case "records-f64k":
					recFlushAt = maxRecord + recHdrLen + tagLen
				case "records-r16k":
					recSize = 16 << 10
				case "records-r32k":
					recSize = 32 << 10
				}
				cc, sc := tlsPair(b)
				var err error
				if r, err = newRecordConn(cc, true); err != nil {
					b.Fatal(err)
				}
				if w, err = newRecordConn(sc, false); err != nil {
					b.Fatal(err)
				}
			}
			done := make(chan error, 1)
			n := b.N
			// The writer answers each 1-byte request with a frame of 1 MiB
			// (a get's round trip: the reply cannot start before it is
			// asked for).
			go func() {
				hdr := make([]byte, HeaderLen)
				req := make([]byte, 1)
				off := 0
				for range n {
					if _, err := io.ReadFull(w, req); err != nil {
						done <- err
						return
					}
					if off+size > len(src) {
						off = 0
					}
					if _, err := writeFrame(w, net.Buffers{hdr, src[off : off+size]}); err != nil {
						done <- err
						return
					}
					off += size
				}
				done <- nil
			}()
			br := bufio.NewReaderSize(r, 16<<10)
			hb := make([]byte, HeaderLen)
			dst := make([]byte, size)
			var ru0, ru1 syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
			b.SetBytes(size)
			b.ResetTimer()
			for range n {
				if _, err := r.Write([]byte{1}); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(br, hb); err != nil {
					b.Fatal(err)
				}
				if _, err := readPartsBuffered(br, [][]byte{dst}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			cpu := time.Duration(syscall.TimevalToNsec(ru1.Utime) - syscall.TimevalToNsec(ru0.Utime) +
				syscall.TimevalToNsec(ru1.Stime) - syscall.TimevalToNsec(ru0.Stime))
			b.ReportMetric(float64(cpu.Microseconds())/float64(n), "cpu-us/MiB")
		})
	}
}

// bufConn reads its socket through br (data plane 4's TLS read buffer).
type bufConn struct {
	net.Conn
	br *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.br.Read(p) }
