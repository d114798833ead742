package main

import (
	"context"
	"testing"
	"time"
)

// TestTLSScenarioShort runs the tls scenario for one short pass of small
// objects: both clusters (plaintext and mutual TLS) serve every row, each
// row has positive figures on both sides and a ratio, and the cipher the
// data plane negotiated is named. It says nothing about speed.
func TestTLSScenarioShort(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a bound, not a speed check
	defer cancel()
	res, err := runTLS(ctx, &env{dir: t.TempDir(), quick: true, sizes: []int64{64 << 10}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tables) != 1 || len(res.Tables[0].Rows) != len(tlsOps) {
		t.Fatalf("want one table of %d rows, got %+v", len(tlsOps), res.Tables)
	}
	for _, row := range res.Tables[0].Rows {
		for i, c := range row[1:4] {
			if f, ok := c.(float64); !ok || f <= 0 {
				t.Errorf("%v: %s %v, want > 0", row[0], res.Tables[0].Columns[1+i], c)
			}
		}
	}
	if c := res.Options["cipher"]; c != "TLS 1.3 TLS_AES_128_GCM_SHA256" {
		t.Errorf("the data plane negotiated %q, want TLS 1.3 with AES-128-GCM (hardware AES)", c)
	}
}
