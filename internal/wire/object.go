package wire

import "context"

// Object names the object a write stores: the put's key and pins (its size
// and CRC32C travel with the write anyway). A store node records, per
// range, the object its last complete write stored, so that it can
// re-register its DRAM objects at a new master after a failover
// (docs/ha.md). It travels in the write request's metadata (its key and
// pin bits, docs/format/dataplane.md); a write without one is not recorded.
type Object struct {
	Key              string
	SoftPin, HardPin bool
}

type objectKey struct{}

// WithObject attaches o to the context of a write (DataConn.Write, or a
// store node's in-process WriteRange): the object the written bytes are.
// The write's signature stays that of a raw range write; the object is
// metadata that rides along, read with ObjectOf.
func WithObject(ctx context.Context, o Object) context.Context {
	return context.WithValue(ctx, objectKey{}, o)
}

// ObjectOf returns the object attached by WithObject; ok is false when
// there is none (or its key is empty).
func ObjectOf(ctx context.Context) (o Object, ok bool) {
	o, ok = ctx.Value(objectKey{}).(Object)
	return o, ok && o.Key != ""
}
