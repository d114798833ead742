package ha

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/tierstore/tierstore/ha/hatest"
)

// BenchmarkFailover measures, with the default SessionTTL, the time from a
// leader's death (or resign) until a waiting standby is elected and a
// resolver reports it: the failover budget of docs/ha.md. Run with
//
//	go test -run XXX -bench Failover -benchtime 5x ./ha/
func BenchmarkFailover(b *testing.B) {
	for _, how := range []string{"die", "resign"} {
		b.Run(how, func(b *testing.B) { benchFailover(b, how == "die") })
	}
}

func benchFailover(b *testing.B, die bool) {
	etcd := hatest.Start(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)
	u, _ := ParseMasterURL(etcd.MasterURL())
	res, err := NewResolver(u, ResolverOptions{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer res.Close()
	cfg := func(addr string) Config {
		return Config{Endpoints: etcd.Endpoints(), Address: addr, Logger: quiet}
	}
	leader, err := Campaign(ctx, cfg("127.0.0.1:7000"))
	if err != nil {
		b.Fatal(err)
	}
	cli := etcdClient(b, etcd.Endpoints())
	var total, worst time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		standby := make(chan *Leadership, 1)
		go func() {
			l, err := Campaign(ctx, cfg("127.0.0.1:7001"))
			if err != nil {
				b.Error(err)
			}
			standby <- l
		}()
		if _, err := res.WaitLeader(ctx); err != nil {
			b.Fatal(err)
		}
		waitCandidates(b, ctx, cli, DefaultPrefix, 2)
		start := time.Now()
		release := func() {}
		if die {
			release = killSession(leader)
		} else {
			_ = leader.Resign(ctx)
		}
		next := <-standby
		if next == nil {
			b.Fatal("standby not elected")
		}
		if _, err := res.WaitNewer(ctx, leader.Term()); err != nil {
			b.Fatal(err)
		}
		d := time.Since(start)
		total += d
		worst = max(worst, d)
		release()
		_ = leader.Resign(ctx)
		leader = next
	}
	b.StopTimer()
	_ = leader.Resign(ctx)
	b.ReportMetric(total.Seconds()/float64(b.N), "s/failover")
	b.ReportMetric(worst.Seconds(), "s-worst")
}
