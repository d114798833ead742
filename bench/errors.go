package main

import "errors"

var (
	// errUsage: the command line is wrong; the message says what.
	errUsage = errors.New("bench: usage")
	// errUnavailable: a scenario cannot run here (a package or tool it
	// needs is missing); the message says which.
	errUnavailable = errors.New("bench: scenario unavailable")
	// errVerify: a benchmark read back bytes that differ from what it wrote.
	errVerify = errors.New("bench: read back wrong bytes")
)
