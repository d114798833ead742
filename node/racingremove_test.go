package node

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/errcode"
)

// Issue 21 item 5: 32 clients re-putting, reading and force-removing 200
// keys of 64 KiB over the data plane, offload running, in a segment small
// enough that removed ranges are reused at once. A Get whose replica was
// removed (and its range reused, or its SSD key re-put) under it answers
// OBJECT_NOT_FOUND (or REPLICA_IS_GONE, or reads another replica), never
// CHECKSUM_MISMATCH, and no replica is reported as corrupt: nothing here
// corrupts bytes. Wrong bytes are never returned.
func TestReadRacingRemovalIsNotCorruption(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	cfg := testNodeConfig("127.0.0.1:0")
	cfg.Memory = 8 << 20 // 128 objects: the ranges of removed ones are reused at once
	cfg.EnableOffload = true
	cfg.SSDDir = t.TempDir()
	cfg.Backend = "pwrite"
	cfg.HeartbeatInterval = 5 * time.Millisecond
	cfg.BucketKeysLimit = 16
	n, err := Start(context.Background(), cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	const workers, keys, size = 32, 200, 64 << 10
	clients := make([]*client.Client, 4) // remote: reads go over the data plane
	for i := range clients {
		clients[i] = newTestClient(t, client.Config{Master: m, ReplicaTimeout: 5 * time.Second})
	}
	ctx := context.Background()
	var gets, hits, notFound, ops atomic.Int64
	const maxOps = 60000
	deadline := time.Now().Add(10 * time.Second)
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			c := clients[w%len(clients)]
			r := rand.New(rand.NewPCG(uint64(w), 21))
			for ops.Add(1) <= maxOps && time.Now().Before(deadline) {
				k := fmt.Sprintf("k%03d", r.IntN(keys))
				switch op := r.IntN(10); {
				case op < 3:
					_ = c.Put(ctx, k, versioned(k, r.Uint64(), size))
				case op < 4:
					_ = c.Remove(ctx, k, true)
				default:
					gets.Add(1)
					v, err := c.Get(ctx, k)
					switch {
					case err == nil:
						hits.Add(1)
						if cerr := checkVersioned(k, v); cerr != nil {
							errc <- cerr
							return
						}
					case errors.Is(err, errcode.ErrChecksumMismatch):
						errc <- fmt.Errorf("get %s: a replica removed under the read reported as corruption: %w", k, err)
						return
					case errors.Is(err, errcode.ErrObjectNotFound), errors.Is(err, errcode.ErrReplicaGone), errors.Is(err, errcode.ErrReplicaNotReady):
						notFound.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	var rs client.ReadStats
	for _, c := range clients {
		s := c.ReadStats()
		rs.ChecksumFailures += s.ChecksumFailures
		rs.BadReplicasReported += s.BadReplicasReported
		rs.RemovedUnderRead += s.RemovedUnderRead

	}
	t.Logf("%d gets: %d hits, %d not found; %d replicas removed under a read; offloaded %d", gets.Load(), hits.Load(), notFound.Load(), rs.RemovedUnderRead, n.Stats().OffloadPersisted)
	if rs.ChecksumFailures != 0 || rs.BadReplicasReported != 0 {
		t.Errorf("counted as corruption: %d checksum failures, %d replicas reported bad (and dropped)", rs.ChecksumFailures, rs.BadReplicasReported)
	}
	if hits.Load() == 0 {
		t.Fatal("no Get succeeded")
	}
}
