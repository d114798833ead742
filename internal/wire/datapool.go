package wire

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
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

	// mu protects nodes and closed.
	mu     sync.Mutex
	nodes  map[string]*dataNode
	closed bool
}

// dataNode is the connections to one endpoint.
type dataNode struct {
	next atomic.Uint32
	// mu protects conns; it is held while a slot is dialled, so that
	// concurrent callers do not dial the same slot twice.
	mu    sync.Mutex
	conns []*DataConn
}

// Get returns a usable data connection to endpoint, dialling one if the
// chosen slot is empty or broken.
func (p *DataPool) Get(ctx context.Context, endpoint string) (*DataConn, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	n := p.nodes[endpoint]
	if n == nil {
		k := p.ConnsPerNode
		if k <= 0 {
			k = DefaultConnsPerNode
		}
		n = &dataNode{conns: make([]*DataConn, k)}
		if p.nodes == nil {
			p.nodes = map[string]*dataNode{}
		}
		p.nodes[endpoint] = n
	}
	p.mu.Unlock()

	slot := int(n.next.Add(1)) % len(n.conns)
	n.mu.Lock()
	defer n.mu.Unlock()
	if c := n.conns[slot]; c != nil && !c.Broken() {
		return c, nil
	} else if c != nil {
		c.Close()
	}
	timeout := p.DialTimeout
	if timeout <= 0 {
		timeout = DefaultDialTimeout
	}
	c, err := DialData(ctx, endpoint, timeout)
	if err != nil {
		n.conns[slot] = nil
		return nil, err
	}
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		c.Close()
		return nil, ErrClosed
	}
	n.conns[slot] = c
	return c, nil
}

// Close closes every connection of the pool.
func (p *DataPool) Close() {
	p.mu.Lock()
	p.closed = true
	nodes := p.nodes
	p.nodes = nil
	p.mu.Unlock()
	for _, n := range nodes {
		n.mu.Lock()
		for i, c := range n.conns {
			if c != nil {
				c.Close()
				n.conns[i] = nil
			}
		}
		n.mu.Unlock()
	}
}
