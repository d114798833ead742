package master

import (
	"context"

	"github.com/tierstore/tierstore/internal/codes"
)

// ReportBadReplica implements API.
func (s *Service) ReportBadReplica(ctx context.Context, key string, crc uint32, r Replica) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	now := s.now()
	sh, err := s.lockKey(key)
	if err != nil {
		return s.observe(err)
	}
	defer sh.mu.Unlock()
	o := sh.objs[key]
	if o == nil {
		return s.observe(codes.Errorf(codes.ObjectNotFound, "master: report_bad_replica"))
	}
	if o.crc != crc {
		return s.observe(codes.Errorf(codes.ReplicaNotFound, "master: report_bad_replica: the object now has CRC32C %08x, the report is about %08x", o.crc, crc))
	}
	switch r.Kind {
	case Memory:
		m := o.mem
		if m.seg == nil || !m.complete || m.seg.node.id != r.Node || m.seg.name != r.Segment || m.off != r.Offset || m.len != r.Length ||
			(r.PutToken != 0 && r.PutToken != m.token) {
			return s.observe(codes.Errorf(codes.ReplicaNotFound, "master: report_bad_replica: no such MEMORY replica on node %q", r.Node))
		}
		s.dropMemAndTask(key, o, codes.ReplicaNotFound)
		s.settleEmpty(sh, key, o, now)
	case LocalDisk:
		if !s.dropDisk(sh, key, o, r.Node, now) {
			return s.observe(codes.Errorf(codes.ReplicaNotFound, "master: report_bad_replica: no LOCAL_DISK replica on node %q", r.Node))
		}
	default:
		return s.observe(codes.Errorf(codes.InvalidParams, "master: report_bad_replica: replica kind %v", r.Kind))
	}
	s.cnt.badReplicas.Add(1)
	s.log.Warn("replica dropped: a reader found it fails its checksum or its node does not hold it", "kind", r.Kind, "node", r.Node)
	return nil
}
