// Package history records what clients did to a tierstore cluster and
// checks it: every operation with its start, end and result, and the hash
// of the value it wrote or read.
//
// A client process appends one JSON line per operation (Recorder, safe for
// concurrent use: Recorder.mu orders the lines); Read merges the files of
// every client of a run; Check verifies over the whole run:
//
//   - wrong bytes: a get returns bytes that no put of its key wrote, or
//     that a put which failed before writing wrote, or that a put which
//     started after the get ended wrote;
//   - stale reads: a get returns the bytes of put P although a write W of
//     the same key (another put, or a remove) was acknowledged before the
//     get began and began after P was acknowledged; an exists answers true
//     although every put of the key was followed, in that way, by a
//     remove;
//   - lost: the final read of a key (after the last heal) finds nothing,
//     although its latest write is an acknowledged put whose object the
//     master was seen to list on SSD, and no other write of the key could
//     have come after it;
//   - past deadline: a call returned later than its deadline plus a slack;
//   - recovery: after the last heal, how long until every call is served
//     again (answered by the cluster, not a transport failure or a
//     timeout), and whether each client was served in the end.
//
// A write that failed with an error saying it was not applied (a put
// refused at PutStart, a remove refused for a lease) is not a write; one
// that failed otherwise (a timeout) may have been applied at any time
// after it began, so it never makes a read stale and never makes a final
// miss a loss. A remove answered OBJECT_NOT_FOUND removed nothing: it is
// no write (an object whose node was expired, found again when the node
// comes back, is the latest acknowledged put, not a stale one). DRAM-only
// objects may be lost with their node (docs/design.md): a miss is a loss
// only for an object seen on SSD.
//
// Check is a regular-register check per key, not a full linearizability
// search: it is exact for the properties above and runs in time
// quadratic in the writes of one key.
package history
