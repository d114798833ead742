package master

import (
	"context"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
)

func (s *Service) lookupNode(id string) *node {
	s.nodesMu.RLock()
	n := s.nodes[id]
	s.nodesMu.RUnlock()
	return n
}

// MountSegment implements API.
func (s *Service) MountSegment(ctx context.Context, req masterapi.MountRequest) error {
	if err := s.gate(ctx); err != nil {
		return err
	}
	switch {
	case req.Node == "":
		return s.observe(errcode.Errorf(errcode.InvalidParams, "master: mount: empty node id"))
	case req.Segment == "":
		return s.observe(errcode.Errorf(errcode.InvalidParams, "master: mount: empty segment name"))
	case req.Size < allocAlign:
		return s.observe(errcode.Errorf(errcode.InvalidParams, "master: mount: segment size %d below %d bytes", req.Size, allocAlign))
	}
	now := s.now()
	s.nodesMu.Lock()
	n := s.nodes[req.Node]
	replaced := false
	if n != nil && ((req.Incarnation != "" && req.Incarnation != n.incarnation) ||
		(req.Endpoint != "" && req.Endpoint != n.endpoint)) {
		// The node restarted (new process, empty DRAM) before it was
		// expired: retire the old incarnation as if it had expired.
		s.retireLocked(n)
		n, replaced = nil, true
	}
	if n == nil {
		n = &node{id: req.Node, endpoint: req.Endpoint, incarnation: req.Incarnation, segments: map[string]*segment{}, dig: s.digestOf(req.Node)}
		n.box.init()
		s.addInc(n)
		s.nodes[req.Node] = n
		s.log.Info("node joined", "node", req.Node, "endpoint", req.Endpoint, "incarnation", req.Incarnation, "replaced_old", replaced)
	}
	n.lastPing.Store(now)
	err := s.mountLocked(n, req)
	s.nodesMu.Unlock()
	if replaced {
		s.sweepDirty.Store(true)
		s.sweep(now)
	}
	return s.observe(err)
}

// mountLocked adds req's segment to n. Caller holds nodesMu.
func (s *Service) mountLocked(n *node, req masterapi.MountRequest) error {
	if g, ok := n.segments[req.Segment]; ok {
		if g.size != req.Size {
			return errcode.Errorf(errcode.SegmentExists, "master: segment %q of node %q is mounted with size %d, not %d", req.Segment, req.Node, g.size, req.Size)
		}
		return nil
	}
	g := &segment{node: n, name: req.Segment, size: req.Size, alloc: newAllocator(req.Size)}
	s.holdSegment(g, req.HoldAllocation)
	n.segments[req.Segment] = g
	s.room.signal()
	s.log.Info("segment mounted", "node", req.Node, "segment", req.Segment, "size", req.Size)
	return nil
}

// UnmountSegment implements API.
func (s *Service) UnmountSegment(ctx context.Context, nodeID, seg string) error {
	n, err := s.lockNode(ctx, nodeID, "unmount")
	if err != nil {
		return err
	}
	g := n.segments[seg]
	if g == nil {
		s.nodesMu.Unlock()
		return s.observe(errcode.Errorf(errcode.SegmentNotFound, "master: unmount: segment %q of node %q", seg, nodeID))
	}
	delete(n.segments, seg)
	g.dead.Store(true)
	s.nodesMu.Unlock()
	s.sweepDirty.Store(true)
	s.log.Info("segment unmounted", "node", nodeID, "segment", seg)
	s.sweep(s.now())
	return nil
}

// lockNode takes nodesMu and returns node nodeID with it held, for a
// node's call (named in the error): ErrClientNotFound, nodesMu released,
// when the master does not know the node.
func (s *Service) lockNode(ctx context.Context, nodeID, call string) (*node, error) {
	if err := s.gate(ctx); err != nil {
		return nil, err
	}
	s.nodesMu.Lock()
	n := s.nodes[nodeID]
	if n == nil {
		s.nodesMu.Unlock()
		return nil, s.observe(errcode.Errorf(errcode.ClientNotFound, "master: %s: node %q", call, nodeID))
	}
	return n, nil
}

// LeaveNode implements API.
func (s *Service) LeaveNode(ctx context.Context, nodeID, incarnation string) error {
	n, err := s.lockNode(ctx, nodeID, "leave")
	if err != nil {
		return err
	}
	if incarnation != "" && incarnation != n.incarnation {
		s.nodesMu.Unlock()
		s.log.Info("leave of an earlier incarnation ignored", "node", nodeID, "incarnation", incarnation, "current", n.incarnation)
		return nil
	}
	s.retireLocked(n)
	s.nodesMu.Unlock()
	s.log.Info("node left", "node", nodeID, "incarnation", incarnation)
	s.sweepDirty.Store(true)
	s.sweep(s.now())
	return nil
}

// Ping implements API.
func (s *Service) Ping(ctx context.Context, nodeID string) (masterapi.PingReply, error) {
	if err := s.gate(ctx); err != nil {
		return masterapi.PingReply{}, err
	}
	r := masterapi.PingReply{Status: masterapi.NeedRemount, ClientTTL: s.cfg.ClientTTL, Term: s.cfg.HA.Term}
	if n := s.lookupNode(nodeID); n != nil {
		n.lastPing.Store(s.now())
		r.Status = masterapi.NodeOK
	}
	return r, nil
}

// retireLocked removes node n: it is marked dead with its segments, so its
// replicas are unreadable at once; the caller runs the lease-aware sweep
// after releasing nodesMu. Caller holds nodesMu.
func (s *Service) retireLocked(n *node) {
	delete(s.nodes, n.id)
	s.pruneRetiredLocked()
	s.retired = append(s.retired, n)
	n.dead.Store(true)
	for _, g := range n.segments {
		g.dead.Store(true)
	}
	s.cnt.expiredNodes.Add(1)
}

// expireNodes expires every node silent for longer than client_ttl.
func (s *Service) expireNodes(now int64) {
	ttl := s.cfg.ClientTTL.Nanoseconds()
	var dead []*node
	s.nodesMu.Lock()
	for _, n := range s.nodes {
		if now-n.lastPing.Load() > ttl {
			s.retireLocked(n)
			dead = append(dead, n)
		}
	}
	s.nodesMu.Unlock()
	if len(dead) == 0 {
		return
	}
	for _, n := range dead {
		s.log.Warn("node expired", "node", n.id, "client_ttl", s.cfg.ClientTTL)
	}
	s.sweepDirty.Store(true)
	s.sweep(now)
}

// ExpireNode expires nodeID now, as if it had been silent for client_ttl
// (tests and operators). It reports whether the node was known.
func (s *Service) ExpireNode(nodeID string) bool {
	s.nodesMu.Lock()
	n := s.nodes[nodeID]
	if n == nil {
		s.nodesMu.Unlock()
		return false
	}
	s.retireLocked(n)
	s.nodesMu.Unlock()
	s.log.Warn("node expired by request", "node", nodeID)
	s.sweepDirty.Store(true)
	s.sweep(s.now())
	return true
}
