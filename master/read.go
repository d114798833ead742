package master

import (
	"context"
	"time"

	"github.com/tierstore/tierstore/admission"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/grant"
	"github.com/tierstore/tierstore/masterapi"
)

// grantLease extends o's read lease (and its soft pin) to now + ttl. Caller
// holds the shard lock.
func (s *Service) grantLease(o *object, now int64) {
	o.lastUse = now
	if d := now + s.cfg.DefaultKVLeaseTTL.Nanoseconds(); d > o.leaseUntil {
		o.leaseUntil = d
	}
	if o.softPin {
		if d := now + s.cfg.DefaultKVSoftPinTTL.Nanoseconds(); d > o.softPinUntil {
			o.softPinUntil = d
		}
	}
}

// countLookup applies read admission to one demand lookup. Caller holds the
// shard lock.
func (s *Service) countLookup(key string, o *object) {
	v := s.admissionView(key, o)
	q := s.policy.OnLookup(&v)
	o.reads = v.Reads
	if q {
		s.enqueue(key, o)
	}
}

// exist answers one ExistKey. count says whether it is a counted demand
// lookup. It agrees with replicaList: false where GetReplicaList answers
// OBJECT_NOT_FOUND or REPLICA_IS_NOT_READY (a put in progress), true where
// it answers replicas, and the same REPLICA_IS_GONE error where every
// replica was lost inside the lease (Mooncake #4508): "exists: false" next
// to "get: replica is gone" would tell an operator two stories.
func (s *Service) exist(key string, now int64, count bool) (bool, error) {
	sh, err := s.lockKey(key)
	if err != nil {
		return false, err
	}
	defer sh.mu.Unlock()
	o, r := s.lookup(sh, key)
	if r >= 0 {
		if ok, err, done := s.existRec(sh, key, r, now, count); done {
			return ok, err
		}
		o = s.thaw(sh, r)
	}
	s.observeLookup(key, o, count, true)
	switch {
	case o == nil:
		return false, nil
	case o.readable():
	case o.putInProgress():
		return false, nil
	default:
		return false, errcode.Errorf(errcode.ReplicaIsGone, "master: exist_key: every replica was lost inside the lease")
	}
	s.grantLease(o, now)
	if count {
		s.countLookup(key, o)
	}
	return true, nil
}

// replicaList answers one GetReplicaList.
// slab, when not nil, is a shared backing array for the Replicas of a batch
// (one allocation per batch instead of one per key).
func (s *Service) replicaList(key string, now int64, count bool, slab *[]masterapi.Replica) (masterapi.ObjectInfo, error) {
	sh, err := s.lockKey(key)
	if err != nil {
		return masterapi.ObjectInfo{}, err
	}
	defer sh.mu.Unlock()
	o, r := s.lookup(sh, key)
	if r >= 0 {
		if info, err, done := s.replicaListRec(sh, key, r, now, count, slab); done {
			return info, err
		}
		o = s.thaw(sh, r)
	}
	s.observeLookup(key, o, count, false)
	if o == nil {
		return masterapi.ObjectInfo{}, errcode.Errorf(errcode.ObjectNotFound, "master: get_replica_list")
	}
	info := masterapi.ObjectInfo{Key: key, Size: o.size, CRC: o.crc}
	n := 0
	for _, m := range o.drams() {
		if m.complete && m.seg.live() {
			n++
		}
	}
	for _, d := range o.ssd {
		if !d.node.dead.Load() {
			n++
		}
	}
	if n == 0 {
		if o.putInProgress() {
			return masterapi.ObjectInfo{}, errcode.Errorf(errcode.ReplicaNotReady, "master: get_replica_list: put in progress")
		}
		// Every replica is on a dead node or was dropped while the object
		// was leased: it existed, it is gone (Mooncake #4508).
		return masterapi.ObjectInfo{}, errcode.Errorf(errcode.ReplicaIsGone, "master: get_replica_list")
	}
	if slab != nil && cap(*slab)-len(*slab) >= n {
		l := len(*slab)
		info.Replicas = (*slab)[l : l : l+n]
		*slab = (*slab)[:l+n]
	} else {
		info.Replicas = make([]masterapi.Replica, 0, n)
	}
	for _, m := range o.drams() { // the put's first (preferred) replica first
		if m.complete && m.seg.live() {
			info.Replicas = append(info.Replicas, s.memDescriptor(m))
		}
	}
	for _, d := range o.ssd {
		if !d.node.dead.Load() {
			info.Replicas = append(info.Replicas, masterapi.Replica{Kind: masterapi.SSD, Status: masterapi.Complete, Node: d.node.id, Endpoint: d.node.endpoint})
		}
	}
	s.grantLease(o, now)
	if len(info.Replicas) > 0 && info.Replicas[len(info.Replicas)-1].Kind != masterapi.SSD {
		// This reader has only DRAM replicas to read: keep them for the
		// lease (invariant 4).
		o.dramLeaseUntil = o.leaseUntil
	}
	info.LeaseDeadline = time.Unix(0, o.leaseUntil)
	if s.cfg.Grants != nil {
		s.signGrants(&info)
	}
	if count {
		s.countLookup(key, o)
	}
	return info, nil
}

// existRec is exist of key held as compact record r, answered on the
// record in place: the read lease is written into it (crec.lease), and it
// stays a record unless the admission policy's count of the lookup needs
// an *object (countLookupRec). done is false, with nothing changed, when
// the lease cannot be written into a record (recLeaseOf): the caller
// thaws it. Caller holds sh.mu.
func (s *Service) existRec(sh *shard, key string, r int32, now int64, count bool) (ok bool, err error, done bool) {
	x, n, lease, fits := s.lookupRec(key, r, now, count, true)
	if !fits {
		return false, nil, false
	}
	if n.dead.Load() {
		return false, errcode.Errorf(errcode.ReplicaIsGone, "master: exist_key: every replica was lost inside the lease"), true
	}
	x.lease = max(x.lease, lease)
	if count {
		s.countLookupRec(sh, key, r)
	}
	return true, nil, true
}

// lookupRec is what a lookup of compact record r does first: the
// record's lease for a lookup at now (fits false, with nothing done, when
// it cannot be written into a record: the caller thaws it), the record,
// the node incarnation holding its replica, and the lookup observed by
// the admission policy (pre: an ExistKey). Caller holds the shard lock.
func (s *Service) lookupRec(key string, r int32, now int64, count, pre bool) (x *crec, n *node, lease uint32, fits bool) {
	lease, fits = s.recLeaseOf(now + s.cfg.DefaultKVLeaseTTL.Nanoseconds())
	if !fits {
		return nil, nil, 0, false
	}
	x = s.cst.rec(r)
	n = s.incAt(x.node)
	s.observeLookupRec(key, x, n, count, pre)
	return x, n, lease, true
}

// replicaListRec is replicaList of key held as compact record r, in place
// as existRec. Caller holds sh.mu.
func (s *Service) replicaListRec(sh *shard, key string, r int32, now int64, count bool, slab *[]masterapi.Replica) (info masterapi.ObjectInfo, err error, done bool) {
	x, n, lease, fits := s.lookupRec(key, r, now, count, false)
	if !fits {
		return info, nil, false
	}
	if n.dead.Load() {
		// Its one replica is on a dead node: it existed, it is gone
		// (Mooncake #4508).
		return info, errcode.Errorf(errcode.ReplicaIsGone, "master: get_replica_list"), true
	}
	info = masterapi.ObjectInfo{Key: key, Size: int64(x.size), CRC: x.crc}
	if slab != nil && cap(*slab)-len(*slab) >= 1 {
		l := len(*slab)
		info.Replicas = (*slab)[l : l : l+1]
		*slab = (*slab)[:l+1]
	} else {
		info.Replicas = make([]masterapi.Replica, 0, 1)
	}
	info.Replicas = append(info.Replicas, masterapi.Replica{Kind: masterapi.SSD, Status: masterapi.Complete, Node: n.id, Endpoint: n.endpoint})
	x.lease = max(x.lease, lease)
	// The lease the record honours: the read lease rounded up to
	// leaseUnit, or the rebuild lease when that ends later.
	deadline := s.recLeaseEnd(x)
	if s.rebuiltLeased(x, now) {
		deadline = max(deadline, s.rebuild.until+s.cfg.DefaultKVLeaseTTL.Nanoseconds())
	}
	info.LeaseDeadline = time.Unix(0, deadline)
	if s.cfg.Grants != nil {
		s.signGrants(&info)
	}
	if count {
		s.countLookupRec(sh, key, r)
	}
	return info, nil, true
}

// observeLookupRec is observeLookup of compact record x, whose replica
// is on n: a promotion it queues leaves the record as it is. Caller holds
// the shard lock.
func (s *Service) observeLookupRec(key string, x *crec, n *node, count, pre bool) {
	if !count {
		return
	}
	ob, ok := s.policy.(lookupObserver)
	if !ok {
		return
	}
	if n.dead.Load() {
		ob.ObserveLookup(key, admission.Miss, 0)
		return
	}
	ob.ObserveLookup(key, admission.SSDHit, int64(x.size))
	if !pre || s.cfg.PrefetchBudget > 0 { // prefetch_budget 0: a lookup does not prefetch
		s.considerPromotionFrom(key, n, int64(x.size), pre)
	}
}

// countLookupRec is countLookup of compact record r (a readable SSD-only
// object, no read counted): a policy that counts a read of it or queues
// it gets the *object it needs, thawed with the lease just granted.
// Caller holds sh.mu.
func (s *Service) countLookupRec(sh *shard, key string, r int32) {
	x := s.cst.rec(r)
	v := admission.Object{Key: key, Size: int64(x.size), OnSSD: true}
	q := s.policy.OnLookup(&v)
	if !q && v.Reads == 0 {
		return
	}
	o := s.thaw(sh, r)
	o.reads = v.Reads
	if q {
		s.enqueue(key, o)
	}
}

// signGrants gives each replica of info the read grant of that read
// (package internal/grant): the node, the key and the DRAM range, or the
// SSD length, until the lookup's read lease ends (the node allows its
// clock's skew beyond that, grant.Verifier.Skew).
func (s *Service) signGrants(info *masterapi.ObjectInfo) {
	key := []byte(info.Key)
	for i := range info.Replicas {
		r := &info.Replicas[i]
		sc := grant.Scope{Node: r.Node, Key: key, Length: uint64(info.Size)}
		if r.Kind == masterapi.DRAM {
			sc.Segment, sc.Offset, sc.Length = r.Segment, uint64(r.Offset), uint64(r.Length)
		}
		g := s.cfg.Grants.Sign(sc, info.LeaseDeadline)
		r.Grant = string(g[:])
	}
}

// ExistKey implements API.
func (s *Service) ExistKey(ctx context.Context, key string) (bool, error) {
	if err := s.gate(ctx); err != nil {
		return false, err
	}
	ok, err := s.exist(key, s.now(), s.countLookups && !masterapi.IsOffloadPath(ctx))
	return ok, s.observe(err)
}

// GetReplicaList implements API.
func (s *Service) GetReplicaList(ctx context.Context, key string) (masterapi.ObjectInfo, error) {
	if err := s.gate(ctx); err != nil {
		return masterapi.ObjectInfo{}, err
	}
	info, err := s.replicaList(key, s.now(), s.countLookups && !masterapi.IsOffloadPath(ctx), nil)
	return info, s.observe(err)
}

// batchCounter returns a function that says whether the i-th key of a batch
// is a counted demand lookup: only when the policy counts lookups, the
// caller is not the offload path, and the key did not occur earlier in the
// batch.
func (s *Service) batchCounter(ctx context.Context, keys []string) func(string) bool {
	if !s.countLookups || masterapi.IsOffloadPath(ctx) {
		return func(string) bool { return false }
	}
	seen := make(map[string]struct{}, len(keys))
	return func(k string) bool {
		if _, dup := seen[k]; dup {
			return false
		}
		seen[k] = struct{}{}
		return true
	}
}

// BatchExistKey implements API.
func (s *Service) BatchExistKey(ctx context.Context, keys []string) ([]masterapi.ExistResult, error) {
	if err := s.gate(ctx); err != nil {
		return nil, err
	}
	now := s.now()
	count := s.batchCounter(ctx, keys)
	out := make([]masterapi.ExistResult, len(keys))
	for i, k := range keys {
		out[i].Exists, out[i].Err = s.exist(k, now, count(k))
		s.observe(out[i].Err)
	}
	return out, nil
}

// BatchGetReplicaList implements API.
func (s *Service) BatchGetReplicaList(ctx context.Context, keys []string) ([]masterapi.ReplicaListResult, error) {
	if err := s.gate(ctx); err != nil {
		return nil, err
	}
	now := s.now()
	count := s.batchCounter(ctx, keys)
	out := make([]masterapi.ReplicaListResult, len(keys))
	slab := make([]masterapi.Replica, 0, 2*len(keys))
	for i, k := range keys {
		out[i].Info, out[i].Err = s.replicaList(k, now, count(k), &slab)
		s.observe(out[i].Err)
	}
	return out, nil
}
