package mastergrpc

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// echoService answers grpc-go's test service with the request's payload.
type echoService struct {
	testpb.UnimplementedTestServiceServer
}

func (echoService) UnaryCall(_ context.Context, r *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{Payload: r.Payload}, nil
}

func (echoService) FullDuplexCall(st testpb.TestService_FullDuplexCallServer) error {
	for {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := st.Send(&testpb.StreamingOutputCallResponse{Payload: r.Payload}); err != nil {
			return err
		}
	}
}

// processCPU is the user and system CPU this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRPCShapes measures what one small request and its answer cost
// in gRPC itself (client and server in this process, loopback TCP, a
// 120-byte payload as a master call's): as a unary call, which is how
// every master call is made today, and as one message each way on a
// long-lived bidirectional stream with one request in flight. It reports
// the CPU (user + system, both ends) per call; the difference is what a
// master call pays for its own HTTP/2 stream (headers, trailers, stream
// set-up). docs/benchmarks.md, "Where a put's CPU goes".
//
//	go test -run '^$' -bench BenchmarkRPCShapes -cpu 4 ./mastergrpc
func BenchmarkRPCShapes(b *testing.B) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	g := grpc.NewServer()
	testpb.RegisterTestServiceServer(g, echoService{})
	go func() { _ = g.Serve(l) }()
	defer g.Stop()
	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	c := testpb.NewTestServiceClient(cc)
	pl := &testpb.Payload{Body: make([]byte, 120)}
	ctx := context.Background()
	if _, err := c.UnaryCall(ctx, &testpb.SimpleRequest{Payload: pl}); err != nil {
		b.Fatal(err)
	}
	cpuPerCall := func(b *testing.B, body func(pb *testing.PB) error) {
		cpu0 := processCPU()
		b.RunParallel(func(pb *testing.PB) {
			if err := body(pb); err != nil {
				b.Error(err)
			}
		})
		b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-us/call")
	}
	b.Run("unary", func(b *testing.B) {
		cpuPerCall(b, func(pb *testing.PB) error {
			for pb.Next() {
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second) // as every master call has a deadline
				_, err := c.UnaryCall(cctx, &testpb.SimpleRequest{Payload: pl})
				cancel()
				if err != nil {
					return err
				}
			}
			return nil
		})
	})
	b.Run("stream", func(b *testing.B) {
		cpuPerCall(b, func(pb *testing.PB) error {
			st, err := c.FullDuplexCall(ctx)
			if err != nil {
				return err
			}
			for pb.Next() {
				if err := st.Send(&testpb.StreamingOutputCallRequest{Payload: pl}); err != nil {
					return err
				}
				if _, err := st.Recv(); err != nil {
					return err
				}
			}
			return st.CloseSend()
		})
	})
}
