// Package bucket defines the on-disk format of tierstore bucket files and the
// grouping of offload tasks into buckets.
//
// A bucket file holds many objects (KV-cache blocks) written once, append
// only, and never modified. Its layout is documented in docs/format/bucket.md:
// a one-block header, the object data (a large object's stored bytes start on
// an Align boundary; objects smaller than a block are packed without crossing
// one, so any object can be read with O_DIRECT through the blocks that hold
// it alone), a trailer that lists every object (key, lengths, codec, CRC32C,
// offset) and a fixed-size footer at the very end of the file that locates
// and checksums the trailer. It is format version 2 (Version); a file of
// another version is refused.
// The trailer lets recovery rebuild the index from the file alone.
//
// # Invariants
//
//   - Every object carries the CRC32C (Castagnoli) of its original value;
//     DecodeValue verifies it on every read and never returns bytes that fail
//     it (ErrChecksum).
//   - Every length and offset read from a file is validated before use;
//     inconsistencies are reported as *CorruptionError wrapping ErrCorrupt,
//     never as a panic or an out-of-range slice (the decoder is fuzz tested).
//   - Encode copies no value: the iovecs it returns reference the callers'
//     values (or their lz4 compression) plus shared zero padding, and the
//     total length is a multiple of Align.
//   - Group emits every non-empty group, including the partial last one, in
//     the same call (Mooncake #4740): nothing is carried across calls. Objects
//     that cannot fit in an empty bucket are refused (TooLarge), and duplicate
//     keys within one call are folded onto their first occurrence.
//
// # Concurrency
//
// The package has no shared mutable state except the read-only zero padding
// block; every function is safe for concurrent use. The iovecs returned by
// Encode must be treated as read-only by writers (the padding is shared).
package bucket
