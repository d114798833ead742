package master

import (
	"context"

	"github.com/tierstore/tierstore/admission"
	"github.com/tierstore/tierstore/internal/codes"
)

// evictRounds bounds the evict-and-retry rounds of one allocation.
const evictRounds = 4

// PutStart implements API.
func (s *Service) PutStart(ctx context.Context, req PutStartRequest) (Replica, error) {
	if err := s.check(ctx); err != nil {
		return Replica{}, err
	}
	r, err := s.putStart(req)
	return r, s.observe(err)
}

func (s *Service) putStart(req PutStartRequest) (Replica, error) {
	if err := validKey(req.Key); err != nil {
		return Replica{}, err
	}
	if req.Size <= 0 {
		return Replica{}, codes.Errorf(codes.InvalidParams, "master: put_start: size must be > 0, got %d", req.Size)
	}
	sh := s.shardOf(req.Key)
	// Cheap pre-check so that a duplicate put neither allocates nor evicts.
	sh.mu.Lock()
	if o := sh.objs[req.Key]; o != nil && s.blocksPut(o) {
		sh.mu.Unlock()
		return Replica{}, codes.Errorf(codes.ObjectExists, "master: put_start")
	}
	sh.mu.Unlock()

	seg, off, err := s.allocate(req.Size, req.PreferredNode)
	if err != nil {
		return Replica{}, err
	}
	now := s.now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	o := sh.objs[req.Key]
	if o != nil && s.blocksPut(o) {
		seg.mu.Lock()
		seg.alloc.Free(off, req.Size)
		seg.mu.Unlock()
		return Replica{}, codes.Errorf(codes.ObjectExists, "master: put_start")
	}
	if o == nil {
		o = &object{}
		sh.objs[req.Key] = o
		s.cnt.objects.Add(1)
	} else {
		// Only unreadable leftovers (replicas of dead nodes): start over.
		s.dropMem(o)
		s.dropAllDisk(o)
		o.gone = false
	}
	o.size, o.crc = req.Size, req.CRC
	o.mem = memReplica{seg: seg, off: off, len: req.Size}
	o.putStart = now
	o.softPin, o.hardPin = req.SoftPin, req.HardPin
	s.processing.Add(1)
	s.countMem(seg.node, 1, req.Size)
	return s.memDescriptor(o), nil
}

// blocksPut reports whether o prevents a new put of its key: it is readable,
// or a put is in progress on a live segment.
func (s *Service) blocksPut(o *object) bool {
	if o.readable() {
		return true
	}
	return o.mem.seg != nil && !o.mem.complete && o.mem.seg.live()
}

func (s *Service) memDescriptor(o *object) Replica {
	st := Processing
	if o.mem.complete {
		st = Complete
	}
	return Replica{Kind: Memory, Status: st, Node: o.mem.seg.node.id, Endpoint: o.mem.seg.node.endpoint,
		Segment: o.mem.seg.name, Offset: o.mem.off, Length: o.mem.len}
}

// allocate reserves size bytes in some live segment, evicting when nothing
// has room.
func (s *Service) allocate(size int64, preferred string) (*segment, int64, error) {
	for round := 0; ; round++ {
		gen := s.evictGen.Load()
		if seg, off, ok := s.tryAllocate(size, preferred); ok {
			if float64(seg.used()) > s.cfg.EvictionHighWatermarkRatio*float64(seg.size) {
				select {
				case s.evictCh <- struct{}{}:
				default:
				}
			}
			return seg, off, nil
		}
		if round == evictRounds {
			break
		}
		if !s.evictAfter(gen, size) {
			break
		}
	}
	if s.segmentCount() == 0 {
		return nil, 0, codes.Errorf(codes.NoAvailableHandle, "master: put_start: no segment mounted")
	}
	return nil, 0, codes.Errorf(codes.NoAvailableHandle, "master: put_start: no segment has %d free bytes", size)
}

// used returns the bytes allocated in g.
func (g *segment) used() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.alloc.used
}

func (s *Service) segmentCount() int {
	s.nodesMu.RLock()
	defer s.nodesMu.RUnlock()
	n := 0
	for _, nd := range s.nodes {
		n += len(nd.segments)
	}
	return n
}

// tryAllocate picks a segment (the preferred node's if it has room, else
// the one with the most free bytes whose largest extent fits) and allocates.
func (s *Service) tryAllocate(size int64, preferred string) (*segment, int64, bool) {
	need := alignUp(size)
	s.nodesMu.RLock()
	defer s.nodesMu.RUnlock()
	if n := s.nodes[preferred]; n != nil {
		for _, g := range n.segments {
			g.mu.Lock()
			off, ok := g.alloc.Alloc(size)
			g.mu.Unlock()
			if ok {
				return g, off, true
			}
		}
	}
	for attempt := 0; attempt < 2; attempt++ {
		var best *segment
		var bestFree int64 = -1
		for _, n := range s.nodes {
			for _, g := range n.segments {
				g.mu.Lock()
				free, largest := g.alloc.FreeBytes(), g.alloc.Largest()
				g.mu.Unlock()
				if largest >= need && free > bestFree {
					best, bestFree = g, free
				}
			}
		}
		if best == nil {
			return nil, 0, false
		}
		best.mu.Lock()
		off, ok := best.alloc.Alloc(size)
		best.mu.Unlock()
		if ok {
			return best, off, true
		}
	}
	return nil, 0, false
}

// PutEnd implements API.
func (s *Service) PutEnd(ctx context.Context, key string) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	return s.observe(s.putEnd(key))
}

func (s *Service) putEnd(key string) error {
	if err := validKey(key); err != nil {
		return err
	}
	now := s.now()
	sh := s.shardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	o := sh.objs[key]
	if o == nil || o.mem.seg == nil {
		return codes.Errorf(codes.ObjectNotFound, "master: put_end: no put in progress")
	}
	if !o.mem.seg.live() {
		return codes.Errorf(codes.ReplicaIsGone, "master: put_end: segment %q of node %q is gone", o.mem.seg.name, o.mem.seg.node.id)
	}
	if o.mem.complete {
		return nil // repeated PutEnd
	}
	o.mem.complete = true
	s.processing.Add(-1)
	if o.softPin {
		o.softPinUntil = now + s.cfg.DefaultKVSoftPinTTL.Nanoseconds()
	}
	if s.policy.AtPutEnd(s.admissionView(key, o)) {
		s.enqueue(key, o)
	}
	return nil
}

// PutRevoke implements API.
func (s *Service) PutRevoke(ctx context.Context, key string) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	return s.observe(s.putRevoke(key))
}

func (s *Service) putRevoke(key string) error {
	if err := validKey(key); err != nil {
		return err
	}
	sh := s.shardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	o := sh.objs[key]
	if o == nil || o.mem.seg == nil {
		return codes.Errorf(codes.ObjectNotFound, "master: put_revoke: no put in progress")
	}
	if o.mem.complete {
		return codes.Errorf(codes.InvalidParams, "master: put_revoke: put already ended")
	}
	s.dropMem(o)
	if o.empty() {
		s.deleteObj(sh, key, o)
	}
	return nil
}

// BatchPutStart implements API.
func (s *Service) BatchPutStart(ctx context.Context, reqs []PutStartRequest) ([]PutStartResult, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	out := make([]PutStartResult, len(reqs))
	for i, r := range reqs {
		out[i].Replica, out[i].Err = s.putStart(r)
		s.observe(out[i].Err)
	}
	return out, nil
}

// BatchPutEnd implements API.
func (s *Service) BatchPutEnd(ctx context.Context, keys []string) ([]error, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	out := make([]error, len(keys))
	for i, k := range keys {
		out[i] = s.observe(s.putEnd(k))
	}
	return out, nil
}

// BatchPutRevoke implements API.
func (s *Service) BatchPutRevoke(ctx context.Context, keys []string) ([]error, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	out := make([]error, len(keys))
	for i, k := range keys {
		out[i] = s.observe(s.putRevoke(k))
	}
	return out, nil
}

// admissionView builds the policy's view of o. Caller holds the shard lock.
func (s *Service) admissionView(key string, o *object) admission.Object {
	return admission.Object{
		Key:    key,
		Size:   o.size,
		InDRAM: o.readableMem(),
		OnDisk: len(o.disk) > 0 && o.readableDisk(),
		Queued: o.offload != nil,
		Reads:  o.reads,
		Node:   memNode(o),
	}
}
