package master

import (
	"fmt"
	"testing"
	"time"

	"github.com/tierstore/tierstore/masterapi"
)

// BenchmarkShardWalks: one walk over the shards that runs per round or
// per tick, at 1024 and 65536 shards, on a master holding 1000 DRAM
// objects (and 1000 SSD-only ones) and one object held for its lease
// without a replica: collectVictims counting only (the walk of a DRAM
// eviction round's first pass, countAndPickVictims, is the same walk
// keeping victims in a heap beside the count), reclaimAbandoned (every
// quarter of put_start_discard_timeout while a put is in progress) and
// settleHeld (every tick while an object is held). Each should cost about
// the same at both shard counts (the shard indexes, shardSet).
func BenchmarkShardWalks(b *testing.B) {
	for _, shards := range []int{1024, 65536} {
		s, clk := testService(b, func(c *Config) {
			c.Shards = shards
			c.DefaultKVLeaseTTL = 100 * time.Hour
			c.ClientTTL = 100 * time.Hour
		})
		mount(b, s, "a", 64<<20)
		for i := range 1000 {
			put(b, s, fmt.Sprint("d", i), 4096, "")
		}
		ssd := make([]masterapi.SSDObject, 1000)
		for i := range ssd {
			ssd[i] = masterapi.SSDObject{Key: fmt.Sprint("s", i), Size: 4096}
		}
		if _, err := s.ReRegisterSSDObjects(bg, "a", ssd); err != nil {
			b.Fatal(err)
		}
		rep := put(b, s, "held", 4096, "")
		rep.Status = masterapi.Complete
		if _, err := s.GetReplicaList(bg, "held"); err != nil {
			b.Fatal(err)
		}
		if err := s.ReportBadReplica(bg, "held", crcOf("held"), rep); err != nil {
			b.Fatal(err)
		}
		now := clk.Now().UnixNano()
		b.Run(fmt.Sprintf("collectVictims/shards=%d", shards), func(b *testing.B) {
			for range b.N {
				s.collectVictims(now, 0)
			}
		})
		b.Run(fmt.Sprintf("reclaimAbandoned/shards=%d", shards), func(b *testing.B) {
			for range b.N {
				s.reclaimAbandoned(now)
			}
		})
		b.Run(fmt.Sprintf("settleHeld/shards=%d", shards), func(b *testing.B) {
			for range b.N {
				s.settleHeld(now)
			}
		})
	}
}
