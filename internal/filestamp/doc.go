// Package filestamp tells whether a file changed since it was last read,
// for the files the processes re-read on change without a restart (the
// TLS certificate files, package internal/tlsconf; the etcd client's TLS
// files, package ha; the grant secret, package internal/grant).
//
// A Stamp is what stat(2) says about a file's content: a file replaced by
// rename has another inode, one rewritten in place another size or
// modification time. Stamps are comparable with ==; the zero Stamp stands
// for no file.
//
// Concurrency: Of may be called from any goroutine; a Stamp is a value.
package filestamp
