package node

import (
	"context"
	"fmt"
	"testing"

	"github.com/tierstore/tierstore/client"
)

// BenchmarkGatherScatter: a vLLM block of 64 x 32 KiB layer buffers, put
// and read with the parts forms (gather/scatter, no intermediate buffer)
// against the same through one 2 MiB buffer the caller copies into and out
// of (what a client without gather/scatter does), side by side, for a
// remote client (loopback data plane) and the in-process one.
//
//	go test -run '^$' -bench GatherScatter -benchtime 200x ./node
func BenchmarkGatherScatter(b *testing.B) {
	const layers, layerSize = 64, 32 << 10
	for _, remote := range []bool{true, false} {
		where := map[bool]string{true: "remote", false: "local"}[remote]
		c, _, _ := benchClusterWith(b, false, remote, "uring")
		ctx := context.Background()
		parts := layerParts(layers, layerSize)
		staging := make([]byte, layers*layerSize)
		gather := func() {
			for i, p := range parts {
				copy(staging[i*layerSize:], p)
			}
		}
		scatter := func() {
			for i, p := range parts {
				copy(p, staging[i*layerSize:])
			}
		}
		put := map[string]func(k string) error{
			"parts": func(k string) error { return c.PutParts(ctx, k, parts, client.PutOptions{}) },
			"copy":  func(k string) error { gather(); return c.Put(ctx, k, staging) },
		}
		get := map[string]func(k string) error{
			"parts": func(k string) error { _, err := c.GetIntoParts(ctx, k, parts); return err },
			"copy": func(k string) error {
				_, err := c.GetInto(ctx, k, staging)
				scatter()
				return err
			},
		}
		for _, how := range []string{"parts", "copy"} {
			b.Run(fmt.Sprintf("%s/put/%s", where, how), func(b *testing.B) {
				b.SetBytes(layers * layerSize)
				for i := 0; b.Loop(); i++ {
					k := fmt.Sprintf("bput-%s-%d", how, i)
					if err := put[how](k); err != nil {
						b.Fatal(err)
					}
					if err := c.Remove(ctx, k, true); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		if err := c.PutParts(ctx, "bget-"+where, parts, client.PutOptions{}); err != nil {
			b.Fatal(err)
		}
		for _, how := range []string{"parts", "copy"} {
			b.Run(fmt.Sprintf("%s/get/%s", where, how), func(b *testing.B) {
				b.SetBytes(layers * layerSize)
				for b.Loop() {
					if err := get[how]("bget-" + where); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
