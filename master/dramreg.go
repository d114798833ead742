package master

import (
	"context"

	"github.com/tierstore/tierstore/internal/errcode"
	pb "github.com/tierstore/tierstore/internal/rpcpb"
	"github.com/tierstore/tierstore/masterapi"
)

// Rebuild of DRAM metadata (docs/ha.md). A master that does not know a
// node's objects (a new leader after a failover, a restarted master) learns
// them from the node: the node mounts its segment with HoldAllocation, so
// nothing is allocated in it, then re-registers every complete object it
// recorded (key, range, CRC32C, put token, pins) with
// ReRegisterDRAMObjects, the last call with done set. Each object gets a
// complete DRAM replica and its range is marked allocated; a range that
// is not free, or an object that conflicts with what the master knows, is
// refused per item (the node forgets that record). Only then does the
// segment take new puts: no put is ever given the range of a live object.

// ReRegisterDRAMObjects implements API.
func (s *Service) ReRegisterDRAMObjects(ctx context.Context, nodeID, segName string, objs []masterapi.DRAMObject, done bool) ([]error, error) {
	if err := s.gate(ctx); err != nil {
		return nil, err
	}
	s.noteReRegistration()
	n := s.lookupNode(nodeID)
	if n == nil {
		return nil, s.observe(errcode.Errorf(errcode.NeedRemount, "master: re_register_dram: unknown node %q", nodeID))
	}
	now := s.now()
	n.lastPing.Store(now)
	s.nodesMu.RLock()
	g := n.segments[segName]
	s.nodesMu.RUnlock()
	if g == nil {
		return nil, s.observe(errcode.Errorf(errcode.SegmentNotFound, "master: re_register_dram: segment %q of node %q", segName, nodeID))
	}
	out := make([]error, len(objs))
	kept := 0
	for i, m := range objs {
		if out[i] = s.observe(s.registerDRAM(g, m, now)); out[i] == nil {
			kept++
		}
	}
	if done && g.held.Swap(false) {
		s.room.signal()
	}
	if len(objs) > 0 || done {
		s.log.Info("DRAM objects re-registered", "node", nodeID, "segment", segName, "objects", len(objs), "kept", kept, "done", done)
	}
	return out, nil
}

// holdSegment marks a segment just mounted with HoldAllocation.
func (s *Service) holdSegment(g *segment, hold bool) {
	if hold {
		g.held.Store(true)
	}
}

// registerDRAM records m as a complete DRAM replica in g.
func (s *Service) registerDRAM(g *segment, m masterapi.DRAMObject, now int64) error {
	if err := validKey(m.Key); err != nil {
		return err
	}
	if m.Length <= 0 || m.Offset < 0 || m.Offset%allocAlign != 0 || m.Offset > g.size-m.Length || m.PutToken == 0 {
		return errcode.Errorf(errcode.InvalidParams, "master: re_register_dram: bad range [%d, +%d) or token %d in a segment of %d bytes",
			m.Offset, m.Length, m.PutToken, g.size)
	}
	s.tokens.observe(m.PutToken)
	if err := s.removedDRAM(m); err != nil {
		return err
	}
	sh := s.shardOf(m.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	o := s.obj(sh, m.Key)
	if o != nil {
		if i := o.dramOn(g.node); i >= 0 && o.dramAt(i).seg == g && o.dramAt(i).off == m.Offset && o.dramAt(i).token == m.PutToken {
			return nil // registered already (a call sent again)
		}
	}
	if err := s.dramConflict(o, g.node, m); err != nil {
		return err
	}
	g.mu.Lock()
	ok := g.alloc.reserve(m.Offset, m.Length)
	g.mu.Unlock()
	if !ok {
		return errcode.Errorf(errcode.InvalidParams, "master: re_register_dram: range [%d, +%d) of segment %q is not free", m.Offset, m.Length, g.name)
	}
	if o == nil {
		o = &object{}
		sh.putObj(m.Key, o)
		s.cnt.objects.Add(1)
	} else if o.dram.seg != nil && o.dram.token != m.PutToken {
		s.dropDRAMAndTask(m.Key, o, errcode.ObjectNotFound) // an older put of the key
	}
	if o.size != m.Length || o.crc != m.CRC {
		s.dropAllSSD(m.Key, o) // an older value's copies (dramConflict allowed it)
	}
	o.size, o.crc, o.token = m.Length, m.CRC, m.PutToken
	// The first, or another node's replica of the same put.
	o.addDRAM(dramReplica{seg: g, off: m.Offset, len: m.Length, token: m.PutToken, complete: true})
	sh.noteDRAM(m.Key, o)
	o.lastUse = now
	o.hardPin, o.softPin = o.hardPin || m.HardPin, o.softPin || m.SoftPin
	if o.softPin {
		o.softPinUntil = max(o.softPinUntil, now+s.cfg.DefaultKVSoftPinTTL.Nanoseconds())
	}
	s.countDRAM(g.node, 1, m.Length)
	s.rebuiltLease(o, now)
	return nil
}

// dramConflict decides whether m, held by node n, may become one of o's
// DRAM replicas. Two DRAM copies of a key from different puts: the newer
// put (larger token) wins, whatever the bytes. Copies of one put (one
// token) on different nodes are its replicas, all kept (they must agree
// on the bytes); two on one node are refused. A DRAM copy with other bytes
// than an SSD copy the master knows: the first registered wins (nothing
// tells which is newer), the other is refused with CHECKSUM_CONFLICT.
// Caller holds the shard lock.
func (s *Service) dramConflict(o *object, n *node, m masterapi.DRAMObject) error {
	live := o != nil && (o.readableDRAM() || o.putInProgress()) // a replica on a live segment
	switch {
	case o == nil:
		return nil
	case live && !o.dram.complete:
		return errcode.Errorf(errcode.ObjectExists, "master: re_register_dram: a put of the key is in progress")
	case live && o.dram.token > m.PutToken:
		return errcode.Errorf(errcode.ObjectExists, "master: re_register_dram: a newer put of the key (token %d > %d) is registered", o.dram.token, m.PutToken)
	case o.dram.seg != nil && o.dram.token == m.PutToken && (o.size != m.Length || o.crc != m.CRC):
		return errcode.Errorf(errcode.ChecksumConflict, "master: re_register_dram: put %d has size %d crc %08x on another node, this copy size %d crc %08x",
			m.PutToken, o.size, o.crc, m.Length, m.CRC)
	case o.dram.seg != nil && o.dram.token == m.PutToken && o.dramOn(n) >= 0:
		return errcode.Errorf(errcode.InvalidParams, "master: re_register_dram: put %d already has a replica on node %q", m.PutToken, n.id)
	case !live && (o.size != m.Length || o.crc != m.CRC) && len(o.ssd) > 0:
		return errcode.Errorf(errcode.ChecksumConflict, "master: re_register_dram: size %d crc %08x, the SSD copies have size %d crc %08x",
			m.Length, m.CRC, o.size, o.crc)
	}
	return nil
}

// observe raises the token source to at least t, so every put token issued
// later is larger than any re-registered one (invariant 8), whatever the
// clocks of the masters.
func (t *tokenSource) observe(v uint64) {
	for {
		last := t.last.Load()
		if v <= last || t.last.CompareAndSwap(last, v) {
			return
		}
	}
}

// reserve marks [off, off+n) (n rounded up to allocAlign) allocated if all
// of it is free, and reports whether it did. Re-registration reserves in
// ascending offsets, so the range is normally in the extent ending at the
// segment's end (found at once); otherwise every extent is searched.
func (a *allocator) reserve(off, n int64) bool {
	if n <= 0 || off < 0 || off%allocAlign != 0 {
		return false
	}
	n = alignUp(n)
	start, length := int64(-1), int64(0)
	if s, ok := a.byEnd[a.size]; ok && s <= off && off+n <= a.size {
		start, length = s, a.size-s
	} else {
		for s, l := range a.byStart {
			if s <= off && off+n <= s+l {
				start, length = s, l
				break
			}
		}
	}
	if start < 0 {
		return false
	}
	a.removeFree(start, length)
	if off > start {
		a.addFree(start, off-start)
	}
	if end := start + length; end > off+n {
		a.addFree(off+n, end-off-n)
	}
	a.used += n
	return true
}

// ReRegisterDRAMObjects serves the gRPC call.
func (s *Server) ReRegisterDRAMObjects(ctx context.Context, r *pb.RegisterDRAMObjectsRequest) (*pb.KeyResults, error) {
	errs, err := s.api.ReRegisterDRAMObjects(ctx, r.GetNode(), r.GetSegment(), dramObjectsFromPB(r.GetObjects()), r.GetDone())
	if err != nil {
		return nil, toStatus(err)
	}
	return keyResults(errs), nil
}
