// Package trace produces the access traces that the churn benchmark replays:
// synthetic generators modelled on what an LLM KV-cache pool sees, and a
// reader for user-supplied trace files.
//
// A trace is a sequence of Requests, each a key and an object size in bytes.
// Replay semantics (shared by every consumer): a request is a lookup of the
// key; on a miss the object is stored with the given size. The first request
// of a key is therefore always a (compulsory) miss.
//
// Generators:
//
//   - Scan: repeated sequential passes over a fixed working set. With a
//     working set about twice the cache capacity, recency-based eviction gets
//     no hits at all (Mooncake #4740).
//   - Conversations: multi-turn chat sessions. Every prompt starts with a
//     system prefix shared by all sessions, followed by the session's own
//     history; each turn appends new blocks. Sessions are chosen with a Zipf
//     popularity and restart as new conversations after a number of turns.
//   - Mixed: Conversations interleaved with one-hit wonders: bursts of blocks
//     that are requested exactly once (one-off documents, batch jobs).
//   - Loop: Scan under its own name, sized by the benchmark a little larger
//     than the whole cache (DRAM and SSD), where LRU keeps nothing of it
//     and Belady's MIN keeps a fixed part.
//   - ZipfBursts: a Zipf-popular key set interrupted at regular intervals
//     by bursts of keys requested once; a cache that admits the bursts
//     loses the popular keys they push out.
//
// Every generator is deterministic for a given Config (seeded PCG), so two
// runs, and the Belady bound computed from a trace, see the same requests.
//
// Trace file format (ReadFile, Read): one request per line, "key size", the
// size in bytes as a decimal integer, separated by blanks or a tab. Blank
// lines and lines starting with '#' are ignored. Keys cannot contain blanks.
//
// Concurrency: the package has no shared state; a Trace is a plain value that
// is safe for concurrent reads once built.
package trace
