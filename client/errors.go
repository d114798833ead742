package client

import (
	"errors"

	"github.com/tierstore/tierstore/internal/grant"
)

// Errors of package client that are not tierstore error codes. Errors that
// are codes (OBJECT_NOT_FOUND, REPLICA_IS_GONE, ...) are the sentinels of
// internal/errcode and are checked with errors.Is against those.
var (
	// ErrBadConfig: a Config field is invalid; the message names the field.
	ErrBadConfig = errors.New("client: invalid configuration")
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("client: closed")
	// ErrNoReplica: no replica of the object could be read (every replica
	// failed); wraps the last failure.
	ErrNoReplica = errors.New("client: no readable replica")
)

// Why a node refused a read's or a put's grant (docs/security.md, Read
// grants, Write grants): such a read or put fails with ErrPermissionDenied
// and one of these, checked with errors.Is.
var (
	// ErrGrantMissing: the read or write carried no grant (a master
	// without --grant_secret_file, a node with one).
	ErrGrantMissing = grant.ErrMissing
	// ErrGrantForged: the grant was made for another read or write, or
	// with another secret (masters and nodes with different files).
	ErrGrantForged = grant.ErrForged
	// ErrGrantExpired: the grant's time was over (a read's: the lookup's
	// read lease, and the client looked the key up once more before
	// failing; a put's write: the put's discard deadline), plus the node's
	// allowance for clock skew.
	ErrGrantExpired = grant.ErrExpired
)
