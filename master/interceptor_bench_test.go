package master

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// trailerStream is a grpc.ServerTransportStream that keeps the trailer
// set on it (merged as gRPC's own stream merges it).
type trailerStream struct{ trailer metadata.MD }

func (*trailerStream) Method() string               { return "/tierstore.master.v1.Master/PutEnd" }
func (*trailerStream) SetHeader(metadata.MD) error  { return nil }
func (*trailerStream) SendHeader(metadata.MD) error { return nil }
func (t *trailerStream) SetTrailer(md metadata.MD) error {
	t.trailer = metadata.Join(t.trailer, md)
	return nil
}

// BenchmarkInterceptor is the HA interceptor's cost on a served call
// (docs/benchmarks.md, "Stop 45: put path CPU").
//
//	go test -run '^$' -bench BenchmarkInterceptor -benchmem ./master
func BenchmarkInterceptor(b *testing.B) {
	s, _ := testService(b, func(c *Config) { c.HA.Term = 7 })
	icpt := s.Interceptor()
	info := &grpc.UnaryServerInfo{FullMethod: "/tierstore.master.v1.Master/PutEnd"}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	for b.Loop() {
		ctx := grpc.NewContextWithServerTransportStream(context.Background(), &trailerStream{})
		if _, err := icpt(ctx, nil, info, handler); err != nil {
			b.Fatal(err)
		}
	}
}
