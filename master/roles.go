package master

import (
	"github.com/tierstore/tierstore/internal/tlsconf"
)

const svc = "/tierstore.master.v1.Master/"

// Roles gives every method of the master service the roles that may call
// it when the master runs with mutual TLS (docs/security.md): the node's
// calls (its segment, offload heartbeat and notifications, re-registration,
// reconciliation, the removal log) only a node; the object calls only a
// client; Stats both. No call is a master's own: masters do not call each
// other over this service (HA followers answer nothing, cmd/tierstore-master).
// The table test fails for a method without an entry.
var Roles = tlsconf.Table{
	svc + "MountSegment":          nodeOnly,
	svc + "UnmountSegment":        nodeOnly,
	svc + "LeaveNode":             nodeOnly,
	svc + "Ping":                  nodeOnly,
	svc + "OffloadHeartbeat":      nodeOnly,
	svc + "NotifyOffloadSuccess":  nodeOnly,
	svc + "ReRegisterSSDObjects":  nodeOnly,
	svc + "EvictSSDReplica":       nodeOnly,
	svc + "PromoteEnd":            nodeOnly,
	svc + "ReconcileBegin":        nodeOnly,
	svc + "ReconcileKeys":         nodeOnly,
	svc + "ReconcileEnd":          nodeOnly,
	svc + "ReRegisterDRAMObjects": nodeOnly,
	svc + "PullRemovals":          nodeOnly,
	svc + "WaitOffload":           nodeOnly,

	svc + "PutStart":            clientOnly,
	svc + "PutEnd":              clientOnly,
	svc + "PutRevoke":           clientOnly,
	svc + "BatchPutStart":       clientOnly,
	svc + "BatchPutEnd":         clientOnly,
	svc + "BatchPutRevoke":      clientOnly,
	svc + "ExistKey":            clientOnly,
	svc + "BatchExistKey":       clientOnly,
	svc + "GetReplicaList":      clientOnly,
	svc + "BatchGetReplicaList": clientOnly,
	svc + "Remove":              clientOnly,
	svc + "RemoveAll":           clientOnly,
	svc + "RemoveByRegex":       clientOnly,
	svc + "EvictDRAM":           clientOnly,
	svc + "ReportBadReplica":    clientOnly,
	svc + "Prefetch":            clientOnly,
	svc + "Touch":               clientOnly,

	svc + "Stats": {tlsconf.Client, tlsconf.Node, tlsconf.Master},
}

var (
	nodeOnly   = []tlsconf.Role{tlsconf.Node}
	clientOnly = []tlsconf.Role{tlsconf.Client}
)
