package wire

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// DefaultHandshakeTimeout bounds how long an accepted connection may take
// to finish its TLS handshake and send its first four bytes
// (MuxOptions.HandshakeTimeout).
const DefaultHandshakeTimeout = 10 * time.Second

// MuxOptions tune a Mux; zero values take the defaults.
type MuxOptions struct {
	// TLS, when not nil, is taken first on every connection.
	TLS *tls.Config
	// HandshakeTimeout bounds an accepted connection's TLS handshake and
	// first four bytes together (default DefaultHandshakeTimeout); a
	// connection that takes longer is closed and passed to Refused.
	HandshakeTimeout time.Duration
	// Refused, when not nil, is told each connection dropped before it
	// was routed: a refused TLS handshake, or one that did not finish (or
	// send its first bytes) in time (a net.Error whose Timeout is true).
	Refused func(from net.Addr, err error)
}

// Mux shares one listener between a node's gRPC peer service and its data
// plane: a connection that opens with DataMagic is a data connection, any
// other (gRPC opens with the HTTP/2 preface) goes to the gRPC server
// through Listener. The node's endpoint, as the master announces it, thus
// serves both; the master API is unchanged.
type Mux struct {
	base    net.Listener
	data    *DataServer
	grpc    chan net.Conn
	tls     *tls.Config           // nil: plaintext
	refused func(net.Addr, error) // connections dropped before routing; may be nil
	timeout time.Duration         // of the handshake and first bytes

	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup // the accept loop and connections being sniffed

	// mu protects sniffing: connections whose first bytes are awaited
	// (Close closes them).
	mu       sync.Mutex
	sniffing map[net.Conn]struct{}
}

// NewMux starts accepting on base. Close (or closing Listener) stops it,
// closes base and the data server.
func NewMux(base net.Listener, data *DataServer) *Mux {
	return NewMuxTLS(base, data, nil, nil)
}

// NewMuxTLS is NewMux with TLS first (cfg nil: plaintext): each accepted
// connection goes through the TLS handshake with cfg (within the sniff
// timeout), then its first bytes inside choose the data plane or gRPC.
// The connections handed on are *tls.Conn (the data plane) or forward
// ConnectionState (gRPC: serve it with tlsconf.Handshaken credentials). A
// refused handshake is passed to refused (nil: dropped silently).
func NewMuxTLS(base net.Listener, data *DataServer, cfg *tls.Config, refused func(from net.Addr, err error)) *Mux {
	return NewMuxWith(base, data, MuxOptions{TLS: cfg, Refused: refused})
}

// NewMuxWith is NewMux with opts.
func NewMuxWith(base net.Listener, data *DataServer, opts MuxOptions) *Mux {
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = DefaultHandshakeTimeout
	}
	m := &Mux{base: base, data: data, grpc: make(chan net.Conn), done: make(chan struct{}),
		sniffing: map[net.Conn]struct{}{}, tls: opts.TLS, refused: opts.Refused, timeout: opts.HandshakeTimeout}
	m.wg.Add(1)
	go m.acceptLoop()
	return m
}

// Listener is the listener to give the gRPC server. Closing it closes the
// Mux.
func (m *Mux) Listener() net.Listener { return muxListener{m} }

// Close stops accepting, closes the data server (waiting for requests in
// progress) and the base listener.
func (m *Mux) Close() error {
	var err error
	m.closeOnce.Do(func() {
		close(m.done)
		err = m.base.Close()
		m.mu.Lock()
		for c := range m.sniffing {
			c.Close()
		}
		m.mu.Unlock()
		m.wg.Wait()
		m.data.Close()
	})
	return err
}

func (m *Mux) acceptLoop() {
	defer m.wg.Done()
	backoff := time.Millisecond
	for {
		c, err := m.base.Accept()
		if err != nil {
			select {
			case <-m.done:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(backoff)
				backoff = min(2*backoff, time.Second)
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(backoff) // EMFILE and friends: wait, then go on
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = time.Millisecond
		m.mu.Lock()
		select {
		case <-m.done:
			m.mu.Unlock()
			c.Close()
			return
		default:
		}
		m.sniffing[c] = struct{}{}
		m.wg.Add(1)
		m.mu.Unlock()
		go m.sniff(c)
	}
}

// sniff reads a connection's first bytes and routes it.
func (m *Mux) sniff(c net.Conn) {
	var b [len(DataMagic)]byte
	raw := c
	_ = c.SetDeadline(time.Now().Add(m.timeout))
	var err error
	if m.tls != nil {
		tc := tlsDataServer(c, m.tls)
		if err = tc.Handshake(); err != nil {
			if m.refused != nil {
				m.refused(c.RemoteAddr(), err)
			}
			if !isTimeout(err) {
				linger(c)
			}
		}
		c = tc
		if err == nil {
			if _, err = io.ReadFull(c, b[:]); err != nil && isTimeout(err) && m.refused != nil {
				m.refused(c.RemoteAddr(), err)
			}
		}
	} else if _, err = io.ReadFull(c, b[:]); err != nil && isTimeout(err) && m.refused != nil {
		m.refused(c.RemoteAddr(), err)
	}
	_ = c.SetDeadline(time.Time{})
	m.mu.Lock()
	delete(m.sniffing, raw)
	m.mu.Unlock()
	if err != nil {
		m.wg.Done()
		c.Close()
		return
	}
	if string(b[:]) == DataMagic {
		m.wg.Done() // the data server tracks it from here
		m.data.ServeConn(c, b[:])
		return
	}
	defer m.wg.Done()
	select {
	case m.grpc <- &prefixConn{Conn: c, prefix: b[:]}:
	case <-m.done:
		c.Close()
	}
}

// muxListener hands the gRPC server its connections.
type muxListener struct{ m *Mux }

func (l muxListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.m.grpc:
		return c, nil
	case <-l.m.done:
		return nil, net.ErrClosed
	}
}

func (l muxListener) Close() error   { return l.m.Close() }
func (l muxListener) Addr() net.Addr { return l.m.base.Addr() }

// prefixConn replays the bytes the Mux read before handing c on.
type prefixConn struct {
	net.Conn
	prefix []byte
}

// ConnectionState is the TLS state of the connection (zero without TLS):
// the gRPC server's credentials read the peer's certificate from it.
func (c *prefixConn) ConnectionState() tls.ConnectionState {
	if tc, ok := c.Conn.(interface{ ConnectionState() tls.ConnectionState }); ok {
		return tc.ConnectionState()
	}
	return tls.ConnectionState{}
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// linger is called on a connection whose TLS handshake was refused, before
// it is closed: the TLS 1.3 client, whose handshake finished before the
// server checked its certificate, has already sent its first bytes; closing
// with them unread would reset the connection, and the client would see
// "connection reset" instead of the alert that names the reason. So the
// Mux half-closes, then reads and drops what the client sent (at most
// 64 KiB, for at most a second) until the client closes.
func linger(c net.Conn) {
	if hc, ok := c.(interface{ CloseWrite() error }); ok {
		_ = hc.CloseWrite()
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	_, _ = io.CopyN(io.Discard, c, 64<<10)
}

// isTimeout reports whether err is a deadline's.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
