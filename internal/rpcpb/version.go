package rpcpb

import (
	"context"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tierstore/tierstore/internal/errcode"
)

// Protocol versions of the services in this directory (docs/design.md,
// "Format and protocol versions"). A build speaks exactly one version of
// each; a caller and a server of different versions refuse each other with
// errcode.ErrVersionMismatch, naming both. A change the other side of the
// previous version could misread bumps the version.
const (
	// MasterProtocol is the version of master.proto's Master service. 2:
	// removal log entries of kinds 4 and 5 (DRAM evictions), which a node
	// of version 1 would ignore, re-registering the evicted copies. 3: the
	// heartbeat carries the admission sketch in chunks (SketchChunk)
	// instead of whole, which a node of version 2 would read as no sketch.
	// 4: ReRegisterSSDObjects carries objects in columns
	// (SSDObjectColumns) and answers only the refused ones, which a peer
	// of version 3 would read as no objects and every object recorded.
	// 5: the proto package is tierstore.master.v1 (was tierstore.rpc), so
	// every method has a new name on the wire; a master refuses calls to
	// the former name with VERSION_MISMATCH (FormerService). 6: the
	// tiers are DRAM and SSD in every name: ReplicaKind MEMORY/LOCAL_DISK
	// are DRAM/SSD, the methods EvictMemory, ReRegisterDiskObjects,
	// EvictDiskReplica and ReRegisterMemoryObjects are EvictDRAM,
	// ReRegisterSSDObjects, EvictSSDReplica and ReRegisterDRAMObjects (new
	// names on the wire: a peer of version 5 would find them unknown), and
	// their messages and the Stats fields are renamed to match (numbers
	// kept). 7: a lookup's Replica carries the read grant (field 9,
	// docs/security.md), which a node with --grant_secret_file requires
	// and a client of version 6 would not pass on. 8: PutStart's Replica
	// (and its batch's) carries the write grant of its range (the same
	// field 9), which a node with --grant_secret_file requires on the
	// write and a client of version 7 would not pass on. 9: a reconcile
	// digest (ReconcileBeginRequest) has up to 2^18 slots
	// (masterapi.MaxReconcileSlots; 2^14 before), which a master of
	// version 8 would refuse as INVALID_PARAMS. 10: Touch, a client's
	// report of the keys it read from its replica-location cache (counted
	// as lookups for recency and admission), which a master of version 9
	// does not have.
	MasterProtocol = 10
	// NodeProtocol is the version of node.proto's NodePeer service.
	NodeProtocol = 1
)

// VersionHeader is the request metadata key in which a caller names the
// protocol version it speaks (decimal).
const VersionHeader = "tierstore-protocol"

// WithVersion is the dial option of a caller of a service of protocol
// version: every unary call names it in VersionHeader.
func WithVersion(version int) grpc.DialOption {
	v := strconv.Itoa(version)
	return grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return invoker(metadata.AppendToOutgoingContext(ctx, VersionHeader, v), method, req, reply, cc, opts...)
	})
}

// VersionCheck is the server interceptor of service (for messages: "master",
// "node") of protocol version: a call that names another version in
// VersionHeader is refused with errcode.ErrVersionMismatch before it is
// served. A call that names none (a hand-made client, grpcurl) is served.
func VersionCheck(service string, version int) grpc.UnaryServerInterceptor {
	want := strconv.Itoa(version)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		// One header looked up, not the call's metadata copied
		// (FromIncomingContext copies every header: 4% of a master's CPU
		// under puts).
		if got := metadata.ValueFromIncomingContext(ctx, VersionHeader); len(got) > 0 && got[0] != want {
			return nil, errcode.ToStatus(errcode.Errorf(errcode.VersionMismatch,
				"%s speaks protocol version %s, the caller version %s: run the same tierstore release on both sides", service, want, got[0]))
		}
		return handler(ctx, req)
	}
}

// FormerService is the server option of service (for messages: "master")
// of protocol version whose methods an earlier version served under another
// service name, former (the master's were tierstore.rpc.Master up to
// protocol 5): a call to a method of former is refused with
// errcode.ErrVersionMismatch naming both sides, as VersionCheck refuses,
// instead of gRPC's UNIMPLEMENTED "unknown service". A call to any other
// unknown service stays UNIMPLEMENTED, unless its caller names another
// version in VersionHeader: then it is refused the same way (a method an
// earlier version had under another name, such as the master's
// EvictDiskReplica before protocol 6, is unknown here).
func FormerService(service string, version int, former string) grpc.ServerOption {
	prefix := "/" + former + "/"
	want := strconv.Itoa(version)
	return grpc.UnknownServiceHandler(func(_ any, st grpc.ServerStream) error {
		method, _ := grpc.MethodFromServerStream(st)
		md, _ := metadata.FromIncomingContext(st.Context())
		named := md.Get(VersionHeader)
		if !strings.HasPrefix(method, prefix) && (len(named) == 0 || named[0] == want) {
			return status.Errorf(codes.Unimplemented, "unknown service or method %s", method)
		}
		caller := "an earlier version"
		if len(named) > 0 {
			caller = "version " + named[0]
		}
		return errcode.ToStatus(errcode.Errorf(errcode.VersionMismatch,
			"%s speaks protocol version %d, the caller %s (it called %s, a method of an earlier protocol): run the same tierstore release on both sides",
			service, version, caller, method))
	})
}
