// Package backendtest is the conformance suite of backend.Backend. Every
// implementation runs it from its own _test.go:
//
//	func TestConformance(t *testing.T) {
//		backendtest.Run(t, func(t *testing.T, dir string) backend.Backend {
//			b, err := pwrite.Open(dir, pwrite.Options{})
//			if err != nil {
//				t.Fatal(err)
//			}
//			return b
//		})
//	}
//
// Run calls open once per subtest with a fresh t.TempDir(), and a second time
// with the same dir in the reopen subtest (a directory-backed implementation
// must then see the files the first instance wrote). The suite closes every
// backend it opens. A backend is treated as directory-backed when a written
// bucket appears as dir/backend.FileName(id); only then are the on-disk,
// foreign-file and reopen checks run.
//
// Invariants checked of every backend (one subtest each): a written bucket
// reads back byte for byte at any offset and length, whatever the iovec
// split; an unaligned bucket is ErrUnaligned and leaves no file; the
// backend keeps no reference to the caller's input and returns
// read data the caller owns; a second write of an id is ErrExists; reads
// past the end or with a bad range are ErrShortRead (never a panic);
// missing ids are ErrNotFound; List returns exactly the written ids and
// ignores foreign files; calls after Close are ErrClosed; a reopened
// directory-backed backend sees the buckets written before; a cancelled
// context stops an operation; errors name the bucket.
//
// Concurrency: the Concurrent subtests call one backend from many
// goroutines at once (writes, reads, deletes of distinct ids, and parallel
// reads of one bucket), so the suite is meant to run under -race. Run itself
// must be called from one test goroutine; Pattern and Split are pure and
// safe for concurrent use; IDs (a backend's bucket ids, for the tests of
// backends of their own) is as safe as the backend's List.
//
// Sizes are kept small (at most a few MiB per bucket) so that the suite runs in
// seconds under -race.
package backendtest
