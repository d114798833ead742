package errcode

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Domain is the errdetails.ErrorInfo domain that marks a tierstore code in a
// gRPC status.
const Domain = "tierstore"

// metaCode is the ErrorInfo metadata key holding the numeric code.
const metaCode = "code"

// grpcCode maps a tierstore code to the closest gRPC status code (only for
// generic gRPC tooling; tierstore callers use the carried code).
func grpcCode(c Code) codes.Code {
	switch c {
	case OK:
		return codes.OK
	case InvalidKey, InvalidParams:
		return codes.InvalidArgument
	case ObjectNotFound, SegmentNotFound, ClientNotFound, ReplicaNotFound, TaskNotFound:
		return codes.NotFound
	case ObjectExists, SegmentExists:
		return codes.AlreadyExists
	case ObjectHasLease, ReplicaNotReady, NeedRemount, ChecksumConflict, VersionMismatch:
		return codes.FailedPrecondition
	case NoAvailableHandle, KeysUltraLimit, PeerLimit:
		return codes.ResourceExhausted
	case ReplicaIsGone:
		return codes.NotFound
	case UnableOffload:
		return codes.Unimplemented
	case ShuttingDown, UnavailableStatus:
		return codes.Unavailable
	case ContextCanceled:
		return codes.Canceled
	case ChecksumMismatch:
		return codes.DataLoss
	case PermissionDenied:
		return codes.PermissionDenied
	}
	return codes.Internal
}

// ToStatus converts err into a gRPC status error that carries its code in an
// errdetails.ErrorInfo detail. nil stays nil; an error that already is a gRPC
// status without a tierstore code is returned unchanged.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	c := Of(err)
	if c == InternalError {
		if _, ok := status.FromError(err); ok && !isOurs(err) {
			return err
		}
	}
	if errors.Is(err, context.DeadlineExceeded) && c == ContextCanceled {
		st := status.New(codes.DeadlineExceeded, err.Error())
		return withCode(st, c)
	}
	return withCode(status.New(grpcCode(c), err.Error()), c)
}

func isOurs(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

func withCode(st *status.Status, c Code) error {
	d, derr := st.WithDetails(&errdetails.ErrorInfo{
		Reason:   c.String(),
		Domain:   Domain,
		Metadata: map[string]string{metaCode: strconv.Itoa(int(c))},
	})
	if derr != nil {
		return st.Err()
	}
	return d.Err()
}

// remoteError is an error received over gRPC: its text is the server's
// message and it wraps the sentinel of the carried code.
type remoteError struct {
	msg      string
	sentinel error
	status   *status.Status
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.sentinel }

// GRPCStatus lets status.FromError and status.Code see the original status.
func (e *remoteError) GRPCStatus() *status.Status { return e.status }

// FromStatus converts an error returned by a gRPC call back into a tierstore
// error. A status carrying a tierstore code becomes an error that wraps that
// code's sentinel (errors.Is works) and keeps the server's message. A status
// without one is wrapped: ErrContextCanceled for Canceled/DeadlineExceeded
// (and the matching context error), ErrRPCFail for transport failures. nil
// stays nil.
func FromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, d := range st.Details() {
		ei, ok := d.(*errdetails.ErrorInfo)
		if !ok || ei.GetDomain() != Domain {
			continue
		}
		n, perr := strconv.Atoi(ei.GetMetadata()[metaCode])
		if perr != nil {
			continue
		}
		return &remoteError{msg: st.Message(), sentinel: Err(Code(n)), status: st}
	}
	switch st.Code() {
	case codes.Canceled:
		return &remoteError{msg: "rpc: " + st.Message(), sentinel: errors.Join(ErrContextCanceled, context.Canceled), status: st}
	case codes.DeadlineExceeded:
		return &remoteError{msg: "rpc: " + st.Message(), sentinel: errors.Join(ErrContextCanceled, context.DeadlineExceeded), status: st}
	}
	msg := "rpc " + st.Code().String() + ": " + st.Message()
	if st.Code() == codes.Unavailable && strings.Contains(st.Message(), httpPreface) {
		msg += " (the address answers HTTP/1.1, not gRPC: is it a metrics port? tierstore-master prints its RPC address as 'tierstore-master listening on HOST:PORT')"
	}
	if st.Code() == codes.Unavailable && strings.Contains(st.Message(), closedPreface) {
		msg += " (the server closed the connection before answering: does it require mutual TLS? then give --tls_cert, --tls_key and --tls_ca, docs/security.md)"
	}
	return &remoteError{msg: msg, sentinel: ErrRPCFail, status: st}
}

// httpPreface is what gRPC's transport says when the server's first bytes
// are an HTTP/1.1 response: a client pointed at a metrics port.
const httpPreface = "looked like an HTTP/1.1 header"

// closedPreface is what gRPC's transport says when the server closes the
// connection before its first bytes: a plaintext client of a TLS server.
const closedPreface = "error reading server preface: EOF"
