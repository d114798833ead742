package master

import (
	"context"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
)

// ReportBadReplica implements API.
func (s *Service) ReportBadReplica(ctx context.Context, key string, crc uint32, r masterapi.Replica) error {
	if err := s.gate(ctx); err != nil {
		return err
	}
	now := s.now()
	sh, err := s.lockKey(key)
	if err != nil {
		return s.observe(err)
	}
	defer sh.mu.Unlock()
	o := s.obj(sh, key)
	if o == nil {
		return s.observe(errcode.Errorf(errcode.ObjectNotFound, "master: report_bad_replica"))
	}
	if o.crc != crc {
		return s.observe(errcode.Errorf(errcode.ReplicaNotFound, "master: report_bad_replica: the object now has CRC32C %08x, the report is about %08x", o.crc, crc))
	}
	switch r.Kind {
	case masterapi.DRAM:
		i := dramReported(o, r)
		if i < 0 {
			return s.observe(errcode.Errorf(errcode.ReplicaNotFound, "master: report_bad_replica: no such DRAM replica on node %q", r.Node))
		}
		s.dropDRAMReplica(key, o, i, errcode.ReplicaNotFound) // the others stay
		s.settleEmpty(sh, key, o, now)
	case masterapi.SSD:
		if !s.dropSSD(sh, key, o, r.Node, now) {
			return s.observe(errcode.Errorf(errcode.ReplicaNotFound, "master: report_bad_replica: no SSD replica on node %q", r.Node))
		}
	default:
		return s.observe(errcode.Errorf(errcode.InvalidParams, "master: report_bad_replica: replica kind %v", r.Kind))
	}
	s.cnt.badReplicas.Add(1)
	s.log.Warn("replica dropped: a reader found it fails its checksum or its node does not hold it", "kind", r.Kind, "node", r.Node)
	return nil
}

// dramReported returns the index of o's complete DRAM replica that r
// describes (node, segment, range and, when given, put token), or -1.
// Caller holds the shard lock.
func dramReported(o *object, r masterapi.Replica) int {
	for i, m := range o.drams() {
		if m.complete && m.seg.node.id == r.Node && m.seg.name == r.Segment && m.off == r.Offset && m.len == r.Length &&
			(r.PutToken == 0 || r.PutToken == m.token) {
			return i
		}
	}
	return -1
}

// dropDRAMReplica removes o's i-th DRAM replica alone. If it is the source
// of o's offload task, the task goes too (its range an orphan when the
// node fetched it, see dropDRAMAndTask). Caller holds the shard lock.
func (s *Service) dropDRAMReplica(key string, o *object, i int, code errcode.Code) {
	n := o.offload
	if n == nil || o.dramAt(i).seg.node != n {
		s.dropDRAMAt(o, i)
		return
	}
	s.forgetDRAMAt(o, i, s.releaseTask(key, o, code) != i) // an orphan holds the range
	s.requeueElsewhere(key, o, n, "its source replica was dropped")
}
