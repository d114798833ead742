package peerlimit

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/units"
)

// Defaults of Limits (and of the flags).
const (
	// DefaultConnsPerPeer: a client process keeps a few connections to a
	// master (one gRPC channel) and to each node (wire.DefaultConnsPerNode
	// shared data connections, and up to wire.OwnIdle idle own ones for
	// Python calls that run on their caller's thread: one or two unless
	// many threads call at once with TIERSTORE_CALLS=direct); 128 lets
	// dozens of client processes share one
	// address (one inference host) while bounding a flood to a few MiB of
	// buffers.
	DefaultConnsPerPeer = 128
	// DefaultStreamsPerConn bounds the gRPC calls in flight on one
	// connection (a client's further calls wait for a free stream).
	DefaultStreamsPerConn = 256
	// DefaultHandshakeTimeout bounds the TLS handshake (or, in
	// plaintext, the first bytes) of a new connection.
	DefaultHandshakeTimeout = 10 * time.Second
	// DefaultPeerBuffer bounds the bytes one address's requests hold on
	// a node at once (node.Config may derive a larger one).
	DefaultPeerBuffer = 1 << 30
)

// Labels of tierstore_peer_refusals_total, one per limit.
const (
	LimitConnsPerPeer     = "conns_per_peer"
	LimitPeerBuffer       = "peer_buffer"
	LimitHandshakeTimeout = "handshake_timeout"
	LimitFrameTimeout     = "frame_timeout"
)

// Sentinel errors, each also wrapping errcode.ErrPeerLimit
// (PEER_LIMIT_EXCEEDED) where a peer is told.
var (
	// ErrConnsPerPeer: a connection beyond --max_conns_per_peer from one
	// address; it is closed at once (the peer sees the connection end
	// before or during its handshake).
	ErrConnsPerPeer = errors.New("peerlimit: too many connections from one address (--max_conns_per_peer)")
	// ErrPeerBuffer: a request would make the process hold more bytes
	// for its peer's address than --max_peer_buffer.
	ErrPeerBuffer = errors.New("peerlimit: the peer's requests would hold more bytes than --max_peer_buffer")
	// ErrHandshakeTimeout: a new connection did not finish its TLS
	// handshake (or send its first bytes) within --tls_handshake_timeout.
	ErrHandshakeTimeout = errors.New("peerlimit: handshake not done within --tls_handshake_timeout")
)

// Limits are one process's bounds per peer.
type Limits struct {
	// ConnsPerPeer bounds the connections open from one address
	// [--max_conns_per_peer].
	ConnsPerPeer int
	// StreamsPerConn bounds the gRPC streams (calls) in flight on one
	// connection [--max_streams_per_conn].
	StreamsPerConn int
	// HandshakeTimeout bounds a new connection's TLS handshake, or its
	// first bytes in plaintext [--tls_handshake_timeout].
	HandshakeTimeout time.Duration
	// PeerBuffer bounds the bytes one address's requests hold at once
	// (a node's SSD reads) [--max_peer_buffer].
	PeerBuffer int64
}

// Defaults returns Limits holding every default.
func Defaults() Limits {
	return Limits{ConnsPerPeer: DefaultConnsPerPeer, StreamsPerConn: DefaultStreamsPerConn,
		HandshakeTimeout: DefaultHandshakeTimeout, PeerBuffer: DefaultPeerBuffer}
}

// Register adds the flags of the limits a server of kind has to fs
// (withBuffer: --max_peer_buffer too, a node's), their defaults l's.
func (l *Limits) Register(fs *flag.FlagSet, withBuffer bool) {
	fs.IntVar(&l.ConnsPerPeer, "max_conns_per_peer", l.ConnsPerPeer, "most connections open from one peer IP address; one more is closed as soon as it is accepted (counted in tierstore_peer_refusals_total)")
	fs.IntVar(&l.StreamsPerConn, "max_streams_per_conn", l.StreamsPerConn, "most gRPC calls in flight on one connection (HTTP/2 concurrent streams; a client's further calls wait)")
	fs.DurationVar(&l.HandshakeTimeout, "tls_handshake_timeout", l.HandshakeTimeout, "a new connection must finish its TLS handshake (plaintext: send its first bytes) within this, or it is closed")
	if withBuffer {
		fs.Var(sizeValue{&l.PeerBuffer}, "max_peer_buffer", "most bytes one peer IP address's data-plane reads may hold on the node at once (an SSD read holds up to 1 MiB, or its value's size when checked whole); a read beyond is answered PEER_LIMIT_EXCEEDED (0: 1GiB, or twice --bucket_size_limit when more)")
	}
}

// Check returns an error naming the flag of a limit that is not
// positive.
func (l Limits) Check() error {
	switch {
	case l.ConnsPerPeer <= 0:
		return fmt.Errorf("--max_conns_per_peer: must be positive, got %d", l.ConnsPerPeer)
	case l.StreamsPerConn <= 0 || int64(l.StreamsPerConn) > math.MaxUint32:
		return fmt.Errorf("--max_streams_per_conn: must be positive, got %d", l.StreamsPerConn)
	case l.HandshakeTimeout <= 0:
		return fmt.Errorf("--tls_handshake_timeout: must be positive, got %v", l.HandshakeTimeout)
	case l.PeerBuffer <= 0:
		return fmt.Errorf("--max_peer_buffer: must be positive, got %d", l.PeerBuffer)
	}
	return nil
}

// sizeValue is a flag.Value of a byte size ("1GiB").
type sizeValue struct{ p *int64 }

func (s sizeValue) String() string {
	if s.p == nil {
		return ""
	}
	return units.Format(*s.p)
}

func (s sizeValue) Set(v string) error {
	n, err := units.Parse(v)
	if err != nil {
		return err
	}
	*s.p = n
	return nil
}

// Guard enforces one process's Limits. Safe for concurrent use.
type Guard struct {
	lim      Limits
	log      *slog.Logger
	refusals *prometheus.CounterVec
	counts   map[string]*atomic.Int64 // the same counts, for Refusals; keys fixed by New

	// mu protects peers and logged.
	mu     sync.Mutex
	peers  map[string]*peer     // by IP address; dropped when empty
	logged map[string]time.Time // limit label -> last refusal logged
}

// peer is what one address holds.
type peer struct {
	conns int   // connections accepted through Listener, not closed
	held  int64 // bytes of Hold not released
}

// New returns a Guard of l (zero fields take the defaults); log (nil:
// slog.Default()) gets the refusals, one line a second per limit at most.
func New(l Limits, log *slog.Logger) *Guard {
	d := Defaults()
	if l.ConnsPerPeer <= 0 {
		l.ConnsPerPeer = d.ConnsPerPeer
	}
	if l.StreamsPerConn <= 0 {
		l.StreamsPerConn = d.StreamsPerConn
	}
	if l.HandshakeTimeout <= 0 {
		l.HandshakeTimeout = d.HandshakeTimeout
	}
	if l.PeerBuffer <= 0 {
		l.PeerBuffer = d.PeerBuffer
	}
	if log == nil {
		log = slog.Default()
	}
	g := &Guard{lim: l, log: log, peers: map[string]*peer{}, logged: map[string]time.Time{},
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tierstore", Subsystem: "peer", Name: "refusals_total",
			Help: "Connections and requests refused by a bound per peer, by limit (conns_per_peer, peer_buffer, handshake_timeout, frame_timeout; docs/security.md)."},
			[]string{"limit"})}
	g.counts = map[string]*atomic.Int64{}
	for _, l := range []string{LimitConnsPerPeer, LimitPeerBuffer, LimitHandshakeTimeout, LimitFrameTimeout} {
		g.refusals.WithLabelValues(l) // exported at 0 from the start
		g.counts[l] = new(atomic.Int64)
	}
	return g
}

// Limits returns the limits the Guard enforces.
func (g *Guard) Limits() Limits { return g.lim }

// Collector is tierstore_peer_refusals_total, to register with the
// process's metrics.
func (g *Guard) Collector() prometheus.Collector { return g.refusals }

// Refusals returns how many refusals limit has counted.
func (g *Guard) Refusals(limit string) int64 {
	if c := g.counts[limit]; c != nil {
		return c.Load()
	}
	return 0
}

// Count counts (and logs, rate-limited) one refusal by limit of the peer
// at from, for err.
func (g *Guard) Count(limit string, from net.Addr, err error) {
	g.refusals.WithLabelValues(limit).Inc()
	if c := g.counts[limit]; c != nil {
		c.Add(1)
	}
	now := time.Now()
	g.mu.Lock()
	log := now.Sub(g.logged[limit]) >= time.Second
	if log {
		g.logged[limit] = now
	}
	g.mu.Unlock()
	if log {
		peer := "?"
		if from != nil {
			peer = from.String()
		}
		g.log.Warn("peer limit: refused (further refusals of this limit within a second are counted, not logged)", "limit", limit, "peer", peer, "err", err)
	}
}

// GRPCOptions are the gRPC server options of the limits: concurrent
// streams per connection and the handshake timeout (grpc's
// ConnectionTimeout, which covers the TLS handshake and the HTTP/2
// preface).
func (g *Guard) GRPCOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.MaxConcurrentStreams(uint32(g.lim.StreamsPerConn)), grpc.ConnectionTimeout(g.lim.HandshakeTimeout)}
}

// HandshakeRefused is given the refused handshakes of a server (its TLS
// credentials, a node's Mux): a timeout is counted as
// handshake_timeout. It reports whether err was one.
func (g *Guard) HandshakeRefused(from net.Addr, err error) bool {
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		return false
	}
	g.Count(LimitHandshakeTimeout, from, fmt.Errorf("%w (%v): %w", ErrHandshakeTimeout, g.lim.HandshakeTimeout, err))
	return true
}

// host is the address a peer is counted by: the IP of addr.
func host(addr net.Addr) string {
	if addr == nil {
		return ""
	}
	if ta, ok := addr.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	s := addr.String()
	if h, _, err := net.SplitHostPort(s); err == nil {
		return h
	}
	return s
}

// Hold reserves n bytes of from's budget (PeerBuffer) for a request,
// until release is called (once). Beyond the budget it returns an error
// wrapping ErrPeerBuffer and errcode.ErrPeerLimit, counted.
func (g *Guard) Hold(from net.Addr, n int64) (release func(), err error) {
	h := host(from)
	g.mu.Lock()
	p := g.peers[h]
	if p == nil {
		p = &peer{}
		g.peers[h] = p
	}
	if n > g.lim.PeerBuffer-p.held {
		held := p.held
		g.dropIfIdle(h, p)
		g.mu.Unlock()
		err := fmt.Errorf("a read of %d bytes while %s holds %d of its %d: %w: %w", n, h, held, g.lim.PeerBuffer, ErrPeerBuffer, errcode.ErrPeerLimit)
		g.Count(LimitPeerBuffer, from, err)
		return nil, err
	}
	p.held += n
	g.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			p.held -= n
			g.dropIfIdle(h, p)
			g.mu.Unlock()
		})
	}, nil
}

// dropIfIdle forgets p when it holds nothing. Called with mu held.
func (g *Guard) dropIfIdle(h string, p *peer) {
	if p.conns == 0 && p.held == 0 {
		delete(g.peers, h)
	}
}

// Held returns the bytes from's address holds and its connections.
func (g *Guard) Held(from net.Addr) (bytes int64, conns int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if p := g.peers[host(from)]; p != nil {
		return p.held, p.conns
	}
	return 0, 0
}

// Listener wraps l: a connection from an address that already has
// ConnsPerPeer open is closed as soon as accepted (counted
// conns_per_peer), and Accept goes on to the next. The connections it
// returns release their slot when closed; a *net.TCPConn keeps its
// methods (SyscallConn, CloseRead, CloseWrite, writev).
func (g *Guard) Listener(l net.Listener) net.Listener { return &listener{Listener: l, g: g} }

type listener struct {
	net.Listener
	g *Guard
}

func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if gc, ok := l.g.admit(c); ok {
			return gc, nil
		}
	}
}

// admit counts c for its address, or refuses and closes it.
func (g *Guard) admit(c net.Conn) (net.Conn, bool) {
	h := host(c.RemoteAddr())
	g.mu.Lock()
	p := g.peers[h]
	if p == nil {
		p = &peer{}
		g.peers[h] = p
	}
	if p.conns >= g.lim.ConnsPerPeer {
		g.mu.Unlock()
		g.Count(LimitConnsPerPeer, c.RemoteAddr(), fmt.Errorf("%s has %d connections open: %w", h, g.lim.ConnsPerPeer, ErrConnsPerPeer))
		c.Close() // after the count: a peer that sees the close sees it counted
		return nil, false
	}
	p.conns++
	g.mu.Unlock()
	rel := &slot{g: g, h: h, p: p}
	if tc, ok := c.(*net.TCPConn); ok {
		return &tcpConn{TCPConn: tc, slot: rel}, true
	}
	return &otherConn{Conn: c, slot: rel}, true
}

// slot is one admitted connection's place in its address's count.
type slot struct {
	g    *Guard
	h    string
	p    *peer
	once sync.Once
}

func (s *slot) release() {
	s.once.Do(func() {
		s.g.mu.Lock()
		s.p.conns--
		s.g.dropIfIdle(s.h, s.p)
		s.g.mu.Unlock()
	})
}

// tcpConn is an admitted TCP connection: every method of *net.TCPConn,
// with Close releasing the slot.
type tcpConn struct {
	*net.TCPConn
	slot *slot
}

func (c *tcpConn) Close() error {
	err := c.TCPConn.Close()
	c.slot.release()
	return err
}

type otherConn struct {
	net.Conn
	slot *slot
}

func (c *otherConn) Close() error {
	err := c.Conn.Close()
	c.slot.release()
	return err
}
