package wire

import (
	"cmp"
	"context"
	"crypto/tls"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
)

// DefaultConnsPerNode is how many data connections a DataPool keeps to one
// node when not told otherwise: calls are spread over them round-robin,
// and each carries several calls at once.
const DefaultConnsPerNode = 2

// DefaultDialTimeout bounds dialling a data connection and its hello.
const DefaultDialTimeout = 5 * time.Second

// DataPool keeps up to ConnsPerNode data connections per node endpoint,
// dialled on first use and replaced once broken. The zero DataPool is
// ready; Close closes every connection and refuses later Gets. Safe for
// concurrent use.
type DataPool struct {
	// ConnsPerNode: connections per endpoint (default DefaultConnsPerNode).
	// Set before first use.
	ConnsPerNode int
	// DialTimeout bounds a dial and its hello (default DefaultDialTimeout).
	DialTimeout time.Duration
	// TLS, when not nil, is the client configuration of every data
	// connection (DialDataTLS). Set before first use.
	TLS *tls.Config

	// mu protects nodes, own and closed.
	mu     sync.Mutex
	nodes  map[string]*dataNode
	own    map[string][]*DataConn // idle own connections, by endpoint (Acquire)
	closed bool

	ownDials atomic.Int64 // own connections dialled (OwnDials)
	ownBusy  atomic.Int64 // own connections handed out and not given back
}

// OwnIdle is how many idle own connections (Acquire) a DataPool keeps per
// endpoint; more are closed when given back.
const OwnIdle = 8

// OwnBusy bounds the own connections of a pool in use at once for calls
// marked WithCallerReads (WithCallerThread calls are never refused one):
// beyond it they share.
const OwnBusy = OwnIdle

// dataNode is the connections to one endpoint.
type dataNode struct {
	next atomic.Uint32
	// mu protects slots.
	mu    sync.Mutex
	slots []slot
}

// slot is one connection of a node, or the dial that will make it.
type slot struct {
	c       *DataConn
	dialing *dialing // non-nil while a dial for this slot is in progress
}

// dialing is one dial in progress; done is closed when err is set.
type dialing struct {
	done    chan struct{}
	err     error
	waiters int // callers waiting for it (dataNode.mu)
}

// Conns is the number of connections the pool keeps per endpoint.
func (p *DataPool) Conns() int {
	if p.ConnsPerNode > 0 {
		return p.ConnsPerNode
	}
	return DefaultConnsPerNode
}

// Get returns a usable data connection to endpoint. When the chosen slot
// is empty or broken one caller dials it while the others wait for that
// dial (or their context), and share its connection or its error.
//
// A connection from Get may be retired (its TLS keys spent, RetireBytes)
// and closed under a later caller's feet: callers that make calls use
// Acquire, which holds it until their Release.
func (p *DataPool) Get(ctx context.Context, endpoint string) (*DataConn, error) {
	return p.get(ctx, endpoint, false)
}

// get is Get; hold counts the returned connection's user (DataConn.users)
// under the node's lock, before a retirement could see it unused.
func (p *DataPool) get(ctx context.Context, endpoint string, hold bool) (*DataConn, error) {
	n, err := p.node(endpoint)
	if err != nil {
		return nil, err
	}
	s := &n.slots[int(n.next.Add(1))%len(n.slots)]
	n.mu.Lock()
	for s.dialing != nil {
		d := s.dialing
		d.waiters++
		n.mu.Unlock()
		var cerr error
		select {
		case <-d.done:
		case <-ctx.Done():
			cerr = errcode.Errorf(errcode.ContextCanceled, "wire: waiting for a data connection to %s: %v", endpoint, ctx.Err())
		}
		n.mu.Lock()
		d.waiters--
		if cerr == nil {
			cerr = d.err
		}
		if cerr != nil {
			n.mu.Unlock()
			return nil, cerr
		}
	}
	if s.c != nil && !s.c.Broken() && !s.c.spent() {
		c := s.c
		if hold {
			c.users.Add(1)
		}
		n.mu.Unlock()
		return c, nil
	}
	old := s.c
	d := &dialing{done: make(chan struct{})}
	s.c, s.dialing = nil, d
	n.mu.Unlock()
	if old != nil {
		old.retire() // closed now, or by the last call holding it
	}
	c, err := DialDataTLS(ctx, endpoint, cmp.Or(p.DialTimeout, DefaultDialTimeout), p.TLS)
	n.mu.Lock()
	// Checked under n.mu: a Close that has not seen this slot yet will.
	if err == nil && p.isClosed() {
		c.Close()
		c, err = nil, ErrClosed
	}
	s.c, s.dialing, d.err = c, nil, err
	if err == nil && hold {
		c.users.Add(1)
	}
	n.mu.Unlock()
	close(d.done)
	return c, err
}

// Acquire returns a data connection to endpoint for one call; the caller
// gives it back with DataConn.Release once the call returned. When ctx carries
// WithCallerThread and the pool is plaintext, the connection is the
// caller's alone until then (an idle one, or a new dial): its caller
// reads its own reply, waiting on its own thread (ownconn.go). The same
// with WithCallerReads, waiting through the runtime's poller, while fewer
// than OwnBusy own connections of the pool are in use. Otherwise
// it is one of the shared connections, held until release: a connection
// whose TLS keys are spent (RetireBytes) is replaced for later callers and
// closed by the last Release.
func (p *DataPool) Acquire(ctx context.Context, endpoint string) (dc *DataConn, err error) {
	thread := callerThread(ctx)
	if !thread && !callerReads(ctx) || p.TLS != nil || !ownSupported {
		return p.get(ctx, endpoint, true)
	}
	if busy := p.ownBusy.Add(1); !thread && busy > OwnBusy {
		p.ownBusy.Add(-1)
		return p.get(ctx, endpoint, true)
	}
	defer func() {
		if err != nil {
			p.ownBusy.Add(-1)
		}
	}()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	for idle := p.own[endpoint]; len(idle) > 0; idle = p.own[endpoint] {
		dc = idle[len(idle)-1]
		p.own[endpoint] = idle[:len(idle)-1]
		if !dc.idleDead() {
			break
		}
		p.mu.Unlock()
		dc.Close()
		dc = nil
		p.mu.Lock()
	}
	p.mu.Unlock()
	if dc == nil {
		if dc, err = dialData(ctx, endpoint, cmp.Or(p.DialTimeout, DefaultDialTimeout), nil, true); err != nil {
			return nil, err
		}
		dc.pool = p
		p.ownDials.Add(1)
	}
	return dc, nil
}

// OwnDials is how many own connections (Acquire) the pool has dialled.
func (p *DataPool) OwnDials() int64 { return p.ownDials.Load() }

// giveBack keeps an own connection for the next Acquire, or closes it
// (broken, the pool closed, OwnIdle kept already).
func (p *DataPool) giveBack(dc *DataConn) {
	p.ownBusy.Add(-1)
	p.mu.Lock()
	if !p.closed && !dc.Broken() && len(p.own[dc.endpoint]) < OwnIdle {
		if p.own == nil {
			p.own = map[string][]*DataConn{}
		}
		p.own[dc.endpoint] = append(p.own[dc.endpoint], dc)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	dc.Close()
}

// node returns endpoint's connections, created empty on first use.
func (p *DataPool) node(endpoint string) (*dataNode, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	n := p.nodes[endpoint]
	if n == nil {
		n = &dataNode{slots: make([]slot, cmp.Or(max(p.ConnsPerNode, 0), DefaultConnsPerNode))}
		if p.nodes == nil {
			p.nodes = map[string]*dataNode{}
		}
		p.nodes[endpoint] = n
	}
	return n, nil
}

func (p *DataPool) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// Close closes every connection of the pool; a dial in progress closes
// its connection when it completes, an own connection in use (Acquire)
// when it is given back.
func (p *DataPool) Close() {
	p.mu.Lock()
	p.closed = true
	nodes, own := p.nodes, p.own
	p.nodes, p.own = nil, nil
	p.mu.Unlock()
	for _, idle := range own {
		for _, dc := range idle {
			dc.Close()
		}
	}
	for _, n := range nodes {
		n.mu.Lock()
		var open []*DataConn
		for i := range n.slots {
			if c := n.slots[i].c; c != nil {
				open = append(open, c)
				n.slots[i].c = nil
			}
		}
		n.mu.Unlock()
		for _, c := range open {
			c.Close()
		}
	}
}
