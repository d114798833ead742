package fio

import "errors"

var (
	// ErrNotInstalled: fio is not in PATH.
	ErrNotInstalled = errors.New("fio: not installed (no fio in PATH)")
	// ErrBadJob: a Job field is invalid; the message names it.
	ErrBadJob = errors.New("fio: invalid job")
	// ErrFailed: fio exited with an error or reported a job error.
	ErrFailed = errors.New("fio: run failed")
	// ErrBadOutput: fio's output is not the JSON this package understands.
	ErrBadOutput = errors.New("fio: unparseable output")
)
