package wire

import (
	"crypto/tls"
	"net"
	"sync"
)

// TLS on the data plane. A data connection over TLS takes the TLS 1.3
// handshake and the two hellos through crypto/tls, then switches to the
// data plane's own record layer on the socket (record.go, data plane 5).
// Until then it runs over a gatherConn: crypto/tls turns every Write into
// records of at most 16 KiB and hands each to the socket as its own
// write(2); while a frame is written (tlsConn.Write, writeFrame) they are
// gathered and go to the socket in writes of up to tlsGather bytes.
const tlsGather = 256 << 10

// gatherConn is the socket under a data connection's tls.Conn.
type gatherConn struct {
	net.Conn

	// mu protects corked and out; it is held across the socket writes, so
	// that what crypto/tls writes outside a frame (an alert) cannot pass
	// gathered bytes.
	mu     sync.Mutex
	corked bool
	out    []byte
}

func newGatherConn(c net.Conn) *gatherConn { return &gatherConn{Conn: c} }

// Write takes one TLS record (or handshake message): gathered while
// corked, written through otherwise.
func (g *gatherConn) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.corked {
		return g.Conn.Write(p)
	}
	if len(g.out)+len(p) > tlsGather && len(g.out) > 0 {
		if err := g.flushLocked(); err != nil {
			return 0, err
		}
	}
	if len(p) >= tlsGather {
		return g.Conn.Write(p)
	}
	g.out = append(g.out, p...)
	return len(p), nil
}

func (g *gatherConn) cork() {
	g.mu.Lock()
	if g.out == nil {
		g.out = make([]byte, 0, tlsGather)
	}
	g.corked = true
	g.mu.Unlock()
}

// uncork writes what was gathered and stops gathering.
func (g *gatherConn) uncork() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.corked = false
	return g.flushLocked()
}

func (g *gatherConn) flushLocked() error {
	b := g.out
	g.out = g.out[:0]
	if len(b) == 0 {
		return nil
	}
	// A net.Conn's Write writes all of b or returns an error.
	_, err := g.Conn.Write(b)
	return err
}

// tlsConn is a data connection over TLS until its hellos are exchanged: a
// tls.Conn (its ConnectionState, deadlines and Close) over a gatherConn.
type tlsConn struct {
	*tls.Conn
	g *gatherConn
}

// tlsDataClient and tlsDataServer wrap c for a data connection over TLS
// with cfg; the handshake is the caller's.
func tlsDataClient(c net.Conn, cfg *tls.Config) *tlsConn {
	g := newGatherConn(c)
	return &tlsConn{Conn: tls.Client(g, cfg), g: g}
}

func tlsDataServer(c net.Conn, cfg *tls.Config) *tlsConn {
	g := newGatherConn(c)
	return &tlsConn{Conn: tls.Server(g, cfg), g: g}
}

// Write encrypts p and hands its records to the socket gathered.
func (c *tlsConn) Write(p []byte) (int, error) {
	c.g.cork()
	n, err := c.Conn.Write(p)
	if ferr := c.g.uncork(); err == nil {
		err = ferr
	}
	return n, err
}

// writeBuffers writes v's parts in order, their records gathered.
func (c *tlsConn) writeBuffers(v net.Buffers) (int64, error) {
	c.g.cork()
	var n int64
	var err error
	for _, p := range v {
		if len(p) == 0 {
			continue
		}
		var m int
		m, err = c.Conn.Write(p)
		n += int64(m)
		if err != nil {
			break
		}
	}
	if ferr := c.g.uncork(); err == nil {
		err = ferr
	}
	return n, err
}

// writeFrame writes v to c: over TLS as records of the data plane's
// record layer (record.go), over a tls.Conn not yet switched to it as one
// gathered write, otherwise with writev (net.Buffers).
func writeFrame(c net.Conn, v net.Buffers) (int64, error) {
	switch tc := c.(type) {
	case *recordConn:
		return tc.writeBuffers(v)
	case *tlsConn:
		return tc.writeBuffers(v)
	}
	return v.WriteTo(c)
}
