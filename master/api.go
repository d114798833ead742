package master

import (
	"context"
	"time"

	"github.com/tierstore/tierstore/masterapi"
)

// The master's request and reply types are those of package masterapi (the
// light package its callers import); these aliases are their names inside
// this package, one type each.
type (
	API               = masterapi.API
	ClientAPI         = masterapi.ClientAPI
	NodeAPI           = masterapi.NodeAPI
	ReplicaKind       = masterapi.ReplicaKind
	ReplicaStatus     = masterapi.ReplicaStatus
	Replica           = masterapi.Replica
	ObjectInfo        = masterapi.ObjectInfo
	NodeStatus        = masterapi.NodeStatus
	MountRequest      = masterapi.MountRequest
	PingReply         = masterapi.PingReply
	PutStartRequest   = masterapi.PutStartRequest
	PutStartReply     = masterapi.PutStartReply
	PutStartResult    = masterapi.PutStartResult
	PutRef            = masterapi.PutRef
	ExistResult       = masterapi.ExistResult
	ReplicaListResult = masterapi.ReplicaListResult
	OffloadTask       = masterapi.OffloadTask
	DiskObject        = masterapi.DiskObject
	OffloadFailure    = masterapi.OffloadFailure
	NotifyRequest     = masterapi.NotifyRequest
	EvictResult       = masterapi.EvictResult
	EvictMemoryResult = masterapi.EvictMemoryResult
	Stats             = masterapi.Stats
	NodeStats         = masterapi.NodeStats
)

// Constants of package masterapi used throughout this package.
const (
	MaxKeyLen   = masterapi.MaxKeyLen
	Memory      = masterapi.Memory
	LocalDisk   = masterapi.LocalDisk
	Processing  = masterapi.Processing
	Complete    = masterapi.Complete
	NodeOK      = masterapi.NodeOK
	NeedRemount = masterapi.NeedRemount
)

// IsOffloadPath reports whether ctx was marked by masterapi.WithOffloadPath.
func IsOffloadPath(ctx context.Context) bool { return masterapi.IsOffloadPath(ctx) }

// Clock is the master's time source; tests inject a manual clock so that
// lease and TTL tests need no sleeps.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }
