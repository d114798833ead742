// Package masterapi is the master's contract, as its callers see it and
// its implementations provide it (in the manner of database/sql/driver):
// the request and reply types, ClientAPI (what a client needs), NodeAPI
// (what a store node needs, its side of SSD admission and promotion
// included: the heartbeat with the SSD report and the admission sketch,
// PromoteEnd; admission.go), their errors (ErrStalePut, ErrBadColumns, and
// the sentinels of internal/errcode), the re-registration columns
// (columns.go), the reconcile digest both sides compute (reconcile.go)
// and the removal log's entries (removal.go). It holds no implementation
// and no transport: *master.Service implements API in-process, and
// package mastergrpc over gRPC (mastergrpc.Dial, host:port; etcd://...
// for the elected leader when package ha is linked into the program).
// Importing it links no gRPC client (only internal/errcode with its gRPC
// status mapping), no etcd, pebble or SSD tier
// (docs/design.md, package map).
//
// # Invariants
//
//   - One contract, two implementations: a caller cannot tell the
//     in-process master from the gRPC one by results or by errors. Errors
//     wrap the sentinels of internal/errcode (and this package's) and are
//     checked with errors.Is, whichever implementation answered.
//   - Batch calls return one result per input, in input order; their own
//     error is reserved for failures of the whole call.
//   - Computations both sides must agree on live here and only here:
//     KeyHash and DigestAddend (the reconcile digest's slot and addend of
//     a key), SlotDigest's arithmetic, SSDColumns.Check, and which keys a
//     removal entry covers (Removal.Matcher, RemovalSet.Latest and
//     LatestDRAM). A change to any of them is a change of the master
//     protocol (its version and compatibility window are in
//     docs/design.md).
//
// # Concurrency
//
// The package has no package-level state and no locks. Its values
// (requests, replies, SlotDigest, SSDColumns, RemovalSet) are plain data
// owned by whoever made them: a caller must not change a request while a
// call that was handed it runs, and an implementation does not keep a
// request's slices after the call returns (mastergrpc encodes them;
// master.Service copies what it keeps). A SlotDigest, SSDColumns or
// RemovalSet is not safe for concurrent writes; its owner serialises
// them. Every implementation of ClientAPI, NodeAPI and API is safe for
// concurrent use.
package masterapi
