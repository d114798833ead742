package master

import (
	"context"
	"fmt"
	"time"

	"github.com/tierstore/tierstore/admission"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/grant"
	"github.com/tierstore/tierstore/internal/keyspec"
	"github.com/tierstore/tierstore/masterapi"
)

// PutStart implements API.
func (s *Service) PutStart(ctx context.Context, req masterapi.PutStartRequest) (masterapi.PutStartReply, error) {
	if err := s.gate(ctx); err != nil {
		return masterapi.PutStartReply{}, err
	}
	r, err := s.putStart(ctx, req)
	return r, s.observe(err)
}

func (s *Service) putStart(ctx context.Context, req masterapi.PutStartRequest) (masterapi.PutStartReply, error) {
	if err := validKey(req.Key); err != nil {
		return masterapi.PutStartReply{}, err
	}
	if req.Size <= 0 {
		return masterapi.PutStartReply{}, errcode.Errorf(errcode.InvalidParams, "master: put_start: size must be > 0, got %d", req.Size)
	}
	want, err := validReplicas(req.Replicas)
	if err != nil {
		return masterapi.PutStartReply{}, err
	}
	// A removal of the key still being made durable goes first.
	if err := s.rlog.waitKey(ctx, req.Key); err != nil {
		return masterapi.PutStartReply{}, err
	}
	sh := s.shardOf(req.Key)
	// A forced removal of the key that waits for its holders goes first
	// (removewait.go): a put acknowledged before it answers would be
	// followed by cached reads of the removed object.
	sh.mu.Lock()
	for ch := s.keyWaits.of(req.Key); ch != nil; ch = s.keyWaits.of(req.Key) {
		sh.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return masterapi.PutStartReply{}, errcode.Errorf(errcode.ContextCanceled, "master: put_start: waiting for a forced removal of the key to reach its holders: %v", ctx.Err())
		}
		sh.mu.Lock()
	}
	// Cheap pre-check so that a duplicate put neither allocates nor evicts.
	if o := s.obj(sh, req.Key); o != nil && s.blocksPut(o) {
		sh.mu.Unlock()
		return masterapi.PutStartReply{}, errcode.Errorf(errcode.ObjectExists, "master: put_start")
	}
	sh.mu.Unlock()

	places, err := s.placeReplicas(ctx, req.Size, req.PreferredNode, want, req.AllowFewer)
	if err != nil {
		return masterapi.PutStartReply{}, err
	}
	now := s.now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	o := s.obj(sh, req.Key)
	if o != nil && s.blocksPut(o) {
		for _, p := range places {
			s.freeRange(p.seg, p.off, req.Size)
		}
		return masterapi.PutStartReply{}, errcode.Errorf(errcode.ObjectExists, "master: put_start")
	}
	if o == nil {
		o = &object{}
		sh.putObj(req.Key, o)
		s.cnt.objects.Add(1)
	} else {
		// Only unreadable leftovers (replicas of dead nodes): start over.
		s.dropDRAM(o)
		s.dropAllSSD(req.Key, o)
		o.offloadFails, o.offloadGaveUp = 0, offloadOK
	}
	o.size, o.crc = req.Size, req.CRC
	// The token is taken after the allocation, under the shard lock that
	// publishes the put: any earlier owner of an overlapping range got its
	// token before that range could be freed, so tokens grow along a
	// range's owners (invariant 8). One token for all the put's replicas.
	token := s.tokens.next(now)
	o.token = token
	for _, p := range places {
		o.addDRAM(dramReplica{seg: p.seg, off: p.off, len: req.Size, token: token})
		sh.noteDRAM(req.Key, o)
		s.processing.Add(1)
		s.countDRAM(p.seg.node, 1, req.Size)
	}
	o.putStart = now
	o.softPin, o.hardPin = req.SoftPin, req.HardPin
	rep := s.putReply(o)
	if s.cfg.Grants != nil {
		s.signWriteGrants(req.Key, &rep, time.Unix(0, now+s.cfg.PutStartDiscardTimeout.Nanoseconds()))
	}
	return rep, nil
}

// signWriteGrants gives each replica of rep, the answer of key's PutStart,
// the write grant of its range (package internal/grant): the node, the
// segment, offset and length, the put token and the key, until expires:
// the put's discard deadline (put_start_discard_timeout after PutStart),
// after which the master reclaims the range (the node allows its clock's
// skew beyond that, grant.Verifier.Skew).
func (s *Service) signWriteGrants(key string, rep *masterapi.PutStartReply, expires time.Time) {
	sign := func(r *masterapi.Replica) {
		g := s.cfg.Grants.Sign(grant.Scope{Kind: grant.Write, Node: r.Node, Key: []byte(key),
			Segment: r.Segment, Offset: uint64(r.Offset), Length: uint64(r.Length), Token: r.PutToken}, expires)
		r.Grant = string(g[:])
	}
	sign(&rep.Replica)
	for i := range rep.More {
		sign(&rep.More[i])
	}
}

// putReply describes the DRAM replicas of o's put. Caller holds the shard
// lock.
func (s *Service) putReply(o *object) masterapi.PutStartReply {
	var out masterapi.PutStartReply
	for i, m := range o.drams() {
		if i == 0 {
			out.Replica = s.memDescriptor(m)
		} else {
			out.More = append(out.More, s.memDescriptor(m))
		}
	}
	return out
}

// blocksPut reports whether o prevents a new put of its key: it is readable,
// or a put is in progress on a live segment.
func (s *Service) blocksPut(o *object) bool {
	return o.readable() || o.putInProgress()
}

// memDescriptor describes DRAM replica m. Caller holds the shard lock.
func (s *Service) memDescriptor(m *dramReplica) masterapi.Replica {
	st := masterapi.Processing
	if m.complete {
		st = masterapi.Complete
	}
	return masterapi.Replica{Kind: masterapi.DRAM, Status: st, Node: m.seg.node.id, Endpoint: m.seg.node.endpoint,
		Segment: m.seg.name, Offset: m.off, Length: m.len, PutToken: m.token}
}

// PutEnd implements API.
func (s *Service) PutEnd(ctx context.Context, key string, token uint64) error {
	if err := s.gate(ctx); err != nil {
		return err
	}
	return s.observe(s.putEnd(key, token))
}

// ownPut returns key's object when token is its current put (in progress
// or, for a repeated PutEnd, completed). Otherwise it answers ErrStalePut,
// and frees the range of a put a forced Remove parked: its writer is done.
// Caller holds the shard lock.
func (s *Service) ownPut(sh *shard, op, key string, token uint64) (*object, error) {
	if token == 0 {
		return nil, errcode.Errorf(errcode.InvalidParams, "master: %s: no put token; pass the token PutStart answered", op)
	}
	o := sh.objs[key] // a compact object has no put in progress
	if o != nil && o.dram.seg != nil && o.dram.token == token {
		return o, nil
	}
	if s.unpark(token) {
		return nil, fmt.Errorf("master: %s: put %d was removed by a forced Remove while in progress; its range is freed: %w", op, token, masterapi.ErrStalePut)
	}
	cur := uint64(0)
	if o != nil && o.dram.seg != nil {
		cur = o.dram.token
	}
	return nil, fmt.Errorf("master: %s: put %d is not the key's current put (current: %d; 0 = none): revoked, reclaimed after put_start_discard_timeout, removed, or put again: %w",
		op, token, cur, masterapi.ErrStalePut)
}

func (s *Service) putEnd(key string, token uint64) error {
	now := s.now()
	sh, err := s.lockKey(key)
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	o, err := s.ownPut(sh, "put_end", key, token)
	if err != nil {
		return err
	}
	for _, m := range o.drams() {
		if !m.seg.live() {
			return errcode.Errorf(errcode.ReplicaIsGone, "master: put_end: segment %q of node %q (replica %d of %d) is gone; nothing is published",
				m.seg.name, m.seg.node.id, o.dramOn(m.seg.node)+1, o.dramCount())
		}
	}
	if o.dram.complete {
		return nil // repeated PutEnd
	}
	// Every replica at once, under the shard lock: a lookup sees all of
	// them or none.
	for _, m := range o.drams() {
		m.complete = true
		s.processing.Add(-1)
	}
	o.lastUse = now
	if o.softPin {
		o.softPinUntil = now + s.cfg.DefaultKVSoftPinTTL.Nanoseconds()
	}
	s.admitToSSD(key, o, s.policy.AtPutEnd, true)
	o.lastUse = s.putUse(key, o, now)
	if s.victimOK(o, now) {
		// The object may be evicted now. One that is not (queued for
		// offload, pinned) becomes evictable at a later ring (its offload
		// answered, a Tick): ringing now would only wake the puts that wait
		// for room to find none.
		s.room.signal()
	}
	return nil
}

// PutRevoke implements API.
func (s *Service) PutRevoke(ctx context.Context, key string, token uint64) error {
	if err := s.gate(ctx); err != nil {
		return err
	}
	return s.observe(s.putRevoke(key, token))
}

func (s *Service) putRevoke(key string, token uint64) error {
	sh, err := s.lockKey(key)
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	o, err := s.ownPut(sh, "put_revoke", key, token)
	if err != nil {
		return err
	}
	if o.dram.complete {
		return errcode.Errorf(errcode.InvalidParams, "master: put_revoke: put %d already ended", token)
	}
	s.dropDRAM(o)
	if o.empty() {
		s.deleteObj(sh, key, o)
	}
	return nil
}

// BatchPutStart implements API.
func (s *Service) BatchPutStart(ctx context.Context, reqs []masterapi.PutStartRequest) ([]masterapi.PutStartResult, error) {
	if err := s.gate(ctx); err != nil {
		return nil, err
	}
	out := make([]masterapi.PutStartResult, len(reqs))
	for i, r := range reqs {
		out[i].PutStartReply, out[i].Err = s.putStart(ctx, r)
		s.observe(out[i].Err)
	}
	return out, nil
}

// BatchPutEnd implements API.
func (s *Service) BatchPutEnd(ctx context.Context, puts []masterapi.PutRef) ([]error, error) {
	if err := s.gate(ctx); err != nil {
		return nil, err
	}
	out := make([]error, len(puts))
	for i, p := range puts {
		out[i] = s.observe(s.putEnd(p.Key, p.Token))
	}
	return out, nil
}

// BatchPutRevoke implements API.
func (s *Service) BatchPutRevoke(ctx context.Context, puts []masterapi.PutRef) ([]error, error) {
	if err := s.gate(ctx); err != nil {
		return nil, err
	}
	out := make([]error, len(puts))
	for i, p := range puts {
		out[i] = s.observe(s.putRevoke(p.Key, p.Token))
	}
	return out, nil
}

// park keeps the ranges of o's put in progress allocated after its object
// is deleted (a forced Remove): the writer may still write to them until
// its PutEnd or PutRevoke, or the discard deadline (invariant 8). It
// reports whether it parked (false: no put in progress on a live segment).
// Caller holds the shard lock and forgets the DRAM replicas without
// freeing them (forgetDRAM(o, keepAll)).
func (s *Service) park(key string, o *object) bool {
	if !o.putInProgress() {
		return false
	}
	deadline := o.putStart + s.cfg.PutStartDiscardTimeout.Nanoseconds()
	var ps []parkedPut
	for _, m := range o.drams() {
		ps = append(ps, parkedPut{key: key, seg: m.seg, off: m.off, len: m.len, deadline: deadline})
	}
	s.parkMu.Lock()
	s.parked[o.dram.token] = ps
	s.parkMu.Unlock()
	s.log.Info("put in progress removed by force; its ranges stay allocated until the put ends or its discard deadline",
		"key", keyspec.Show(key), "node", o.dram.seg.node.id, "segment", o.dram.seg.name, "offset", o.dram.off, "replicas", len(ps))
	return true
}

// keepAll is forgetDRAM's kept for ranges handed on whole (parked).
func keepAll(*dramReplica) bool { return true }

// unpark frees the ranges of the parked put token and reports whether there
// was one.
func (s *Service) unpark(token uint64) bool {
	s.parkMu.Lock()
	ps, ok := s.parked[token]
	delete(s.parked, token)
	s.parkMu.Unlock()
	for _, p := range ps {
		s.freeRange(p.seg, p.off, p.len)
	}
	return ok
}

// reclaimParked frees the parked ranges whose discard deadline passed and
// forgets those of dead segments.
func (s *Service) reclaimParked(now int64) {
	s.parkMu.Lock()
	var due []parkedPut
	for t, ps := range s.parked {
		kept := ps[:0]
		for _, p := range ps {
			if p.deadline < now || !p.seg.live() {
				due = append(due, p)
			} else {
				kept = append(kept, p)
			}
		}
		if len(kept) == 0 {
			delete(s.parked, t)
		} else {
			s.parked[t] = kept
		}
	}
	s.parkMu.Unlock()
	for _, p := range due {
		s.freeRange(p.seg, p.off, p.len)
	}
}

// parkedList returns a copy of the parked ranges (Check).
func (s *Service) parkedList() []parkedPut {
	s.parkMu.Lock()
	defer s.parkMu.Unlock()
	var out []parkedPut
	for _, ps := range s.parked {
		out = append(out, ps...)
	}
	return out
}

// admissionView builds the policy's view of o. Caller holds the shard lock.
func (s *Service) admissionView(key string, o *object) admission.Object {
	return admission.Object{
		Key:    key,
		Size:   o.size,
		InDRAM: o.readableDRAM(),
		OnSSD:  len(o.ssd) > 0 && o.readableSSD(),
		Queued: o.offload != nil,
		Reads:  o.reads,
		Node:   dramNode(o),
	}
}
