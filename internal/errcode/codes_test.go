package errcode

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestMooncakeNumbers(t *testing.T) {
	want := map[Code]int32{
		OK: 0, InvalidKey: -400, NoAvailableHandle: -200, SegmentNotFound: -101,
		ReplicaNotReady: -703, ObjectNotFound: -704, ObjectExists: -705,
		ObjectHasLease: -706, ReplicaIsGone: -712, ChecksumMismatch: -801,
		KeysUltraLimit: -1203, UnableOffload: -1300, InvalidParams: -600,
		ClientNotFound: -103, InternalError: -1,
	}
	for c, n := range want {
		if int32(c) != n {
			t.Errorf("%s = %d, want %d", c, int32(c), n)
		}
	}
	if ObjectNotFound.String() != "OBJECT_NOT_FOUND" || ReplicaIsGone.String() != "REPLICA_IS_GONE" {
		t.Fatalf("names: %s %s", ObjectNotFound, ReplicaIsGone)
	}
}

func TestOfAndErr(t *testing.T) {
	if Of(nil) != OK || Err(OK) != nil {
		t.Fatal("OK must map to nil")
	}
	for _, c := range All() {
		e := Err(c)
		if Of(e) != c {
			t.Errorf("Of(Err(%s)) = %s", c, Of(e))
		}
		w := fmt.Errorf("ctx: %w", Errorf(c, "key %q", "k"))
		if !errors.Is(w, e) || Of(w) != c {
			t.Errorf("wrapped %s lost its code: %v", c, w)
		}
	}
	if Of(errors.New("x")) != InternalError {
		t.Fatal("plain error must be INTERNAL_ERROR")
	}
	if Of(fmt.Errorf("a: %w", context.Canceled)) != ContextCanceled {
		t.Fatal("context error")
	}
	if err := Err(Code(-99999)); !errors.Is(err, ErrInternal) {
		t.Fatalf("unknown code: %v", err)
	}
}

func TestStatusRoundTrip(t *testing.T) {
	for _, c := range All() {
		orig := Errorf(c, "while doing %s", "thing")
		st := ToStatus(orig)
		if _, ok := status.FromError(st); !ok {
			t.Fatalf("%s: not a status", c)
		}
		back := FromStatus(st)
		if !errors.Is(back, Err(c)) {
			t.Errorf("%s: round trip lost the sentinel: %v", c, back)
		}
		if back.Error() != orig.Error() {
			t.Errorf("%s: message %q, want %q", c, back.Error(), orig.Error())
		}
	}
	// Plain gRPC statuses without our detail.
	if err := FromStatus(status.Error(codes.Unavailable, "conn refused")); !errors.Is(err, ErrRPCFail) {
		t.Fatalf("unavailable: %v", err)
	}
	if err := FromStatus(status.Error(codes.DeadlineExceeded, "slow")); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrContextCanceled) {
		t.Fatalf("deadline: %v", err)
	}
	if FromStatus(nil) != nil || ToStatus(nil) != nil {
		t.Fatal("nil")
	}
	if status.Code(ToStatus(ErrObjectNotFound)) != codes.NotFound {
		t.Fatal("grpc code mapping")
	}
}

func TestWithMessage(t *testing.T) {
	if WithMessage(OK, "x") != nil {
		t.Fatal("OK")
	}
	e := WithMessage(ObjectHasLease, "remove: lease until t: tierstore: object has a lease")
	if !errors.Is(e, ErrObjectHasLease) || Of(e) != ObjectHasLease || e.Error() != "remove: lease until t: tierstore: object has a lease" {
		t.Fatalf("%v", e)
	}
	if WithMessage(ReplicaIsGone, "") != ErrReplicaGone {
		t.Fatal("empty message")
	}
}

// Wrap carries a code without repeating its message (issue 10: error chains
// repeated each cause): the text is the wrapped error's, and errors.Is
// matches both the code and the wrapped chain.
func TestWrap(t *testing.T) {
	inner := fmt.Errorf("tier: %w", errors.New("bucket: object checksum mismatch"))
	err := Wrap(ChecksumMismatch, inner)
	if err.Error() != inner.Error() {
		t.Fatalf("message %q, want %q", err.Error(), inner.Error())
	}
	if !errors.Is(err, ErrChecksumMismatch) || !errors.Is(err, inner) || Of(err) != ChecksumMismatch {
		t.Fatalf("Wrap lost a link: %v", err)
	}
	if Wrap(ChecksumMismatch, nil) != nil || Wrap(OK, inner) != inner {
		t.Fatal("Wrap of nil or OK")
	}
	st := ToStatus(err)
	back := FromStatus(st)
	if !errors.Is(back, ErrChecksumMismatch) || strings.Count(back.Error(), "checksum mismatch") != 1 {
		t.Fatalf("over gRPC: %v", back)
	}
}

// A plaintext client of a TLS server sees the connection closed before the
// server's preface; the message says TLS may be why.
func TestFromStatusHintsAtTLS(t *testing.T) {
	err := FromStatus(status.Error(codes.Unavailable, `connection error: desc = "error reading server preface: EOF"`))
	if !errors.Is(err, ErrRPCFail) || !strings.Contains(err.Error(), "does it require mutual TLS") {
		t.Fatalf("no TLS hint: %v", err)
	}
}
