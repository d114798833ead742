// Package admission decides which objects deserve the SSD tier: when the
// master queues an offload task for an object. The master calls a Policy at
// three moments — the end of a put, a demand lookup, and the choice of an
// object as a DRAM eviction victim — and queues a task when it answers true.
//
// Policies shipped:
//   - Eager (the default with enable_offload): every object at PutEnd.
//   - OnEvict (offload_on_evict): an object only when DRAM eviction picks it;
//     it is offloaded instead of dropped.
//   - ReadThreshold (offload_read_admission_threshold=N): after N demand
//     lookups of a DRAM-resident object.
//
// Counting rules of ReadThreshold (the master applies the first two, the
// policy the rest): a key looked up several times in one batch counts once;
// lookups made by the offload path do not count; an object already on SSD or
// already queued is skipped and its count is not advanced; the count lives in
// the object's metadata (Object.Reads) and is reset when the object leaves
// DRAM.
//
// Invariants: a Policy never queues an object that is already on SSD or
// already queued (every policy checks OnDisk and Queued).
//
// Concurrency: the shipped policies are stateless values, safe for concurrent
// use; the master calls OnLookup with the object's shard lock held, so the
// *Object it passes is owned by the call.
package admission
