package mastergrpc_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/mastergrpc"
)

// TestDialMetricsPortSaysSo: an operator who gives a node or client the
// master's metrics address (an HTTP/1.1 server) gets an error that says
// so and names the address to use, not only gRPC's transport message.
func TestDialMetricsPortSaysSo(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(lis)
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := mastergrpc.Dial(ctx, lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, err = r.Ping(ctx, "n1")
	if !errors.Is(err, errcode.ErrRPCFail) {
		t.Fatalf("Ping of an HTTP server: %v, want an RPC failure", err)
	}
	if !strings.Contains(err.Error(), "metrics port") || !strings.Contains(err.Error(), "tierstore-master listening on") {
		t.Fatalf("the error does not point at the metrics port: %v", err)
	}
}

// TestDialUnlinkedScheme: a program that links no dialer for etcd:// (it
// does not import package ha) gets an error that says what to import,
// not a gRPC resolver failure at the first call.
func TestDialUnlinkedScheme(t *testing.T) {
	_, err := mastergrpc.Dial(context.Background(), "etcd://127.0.0.1:2379")
	if !errors.Is(err, errcode.ErrInvalidParams) || !strings.Contains(err.Error(), "import github.com/tierstore/tierstore/ha") {
		t.Fatalf("dial of etcd:// without package ha: %v", err)
	}
}
