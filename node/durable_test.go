package node

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/master"
	"github.com/tierstore/tierstore/masterapi"
	"github.com/tierstore/tierstore/mastergrpc"
)

// masterOnPort serves a master over real gRPC on one fixed loopback port,
// and can stop it and serve again (the same Service, or a new one: a
// restarted master) on that port.
type masterOnPort struct {
	t    *testing.T
	addr string
	mu   sync.Mutex // protects srv and cur
	srv  *master.Server
	cur  *master.Service
}

func newMasterOnPort(t *testing.T) *masterOnPort {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &masterOnPort{t: t, addr: lis.Addr().String()}
	p.serveOn(lis, newMaster(t, testMasterConfig()))
	t.Cleanup(p.stop)
	return p
}

func (p *masterOnPort) serveOn(lis net.Listener, m *master.Service) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.srv, p.cur = master.NewServer(m), m
	go func(s *master.Server) { _ = s.Serve(lis) }(p.srv)
}

func (p *masterOnPort) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.srv != nil {
		p.srv.Stop()
		p.srv = nil
	}
}

// serve serves m (nil: the same master as before) on the port again.
func (p *masterOnPort) serve(m *master.Service) {
	lis, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Errorf("listening on %s again: %v", p.addr, err)
		return
	}
	if m == nil {
		m = p.current()
	}
	p.serveOn(lis, m)
}

func (p *masterOnPort) current() *master.Service {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur
}

// outageAtNotify stops the master's gRPC server as the first bucket notify
// is sent, and serves again (restart) when the node sends it for the
// seventh time: longer than the four sends (about 350 ms) after which the
// node used to give up and roll the durable bucket back.
type outageAtNotify struct {
	masterapi.NodeAPI
	stop, restart func()
	sends         atomic.Int64
}

func (o *outageAtNotify) NotifyOffloadSuccess(ctx context.Context, r masterapi.NotifyRequest) ([]error, error) {
	if len(r.Persisted) > 0 {
		switch o.sends.Add(1) {
		case 1:
			o.stop()
		case 7:
			o.restart()
		}
	}
	return o.NodeAPI.NotifyOffloadSuccess(ctx, r)
}

// Issue 9 item 5 (invariant 9): a master outage during the notify of
// durable, indexed buckets does not roll them back. With the same master
// back, the notify goes through; with a restarted master (which knows
// neither the node nor the keys), the node remounts and re-registers them.
// Either way every acknowledged object is readable from SSD with its bytes.
func TestMasterOutageDuringNotifyKeepsDurableBuckets(t *testing.T) {
	for _, tc := range []struct {
		restarted bool
		ping      time.Duration
	}{
		{false, 20 * time.Millisecond},
		// The ping loop remounts at the restarted master before the
		// notify gets through: the notify's keys are refused as unknown
		// across a remount, kept and re-registered.
		{true, 20 * time.Millisecond},
		// No ping in time: the notify itself meets the restarted master,
		// which does not know the node (NEED_REMOUNT): kept, remount,
		// re-registration.
		{true, time.Hour},
	} {
		restarted := tc.restarted
		t.Run(fmt.Sprintf("restarted=%v,ping=%v", restarted, tc.ping), func(t *testing.T) {
			p := newMasterOnPort(t)
			m1 := p.current()
			ctx := context.Background()
			rm, err := mastergrpc.Dial(ctx, p.addr, grpc.WithConnectParams(grpc.ConnectParams{
				Backoff: backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, MaxDelay: 200 * time.Millisecond}}))
			if err != nil {
				t.Fatal(err)
			}
			defer rm.Close()
			var m2 *master.Service
			if restarted {
				// The same removal log, as --state_dir keeps it; no
				// rebuild window, whose lease on the re-registered
				// objects would keep EvictDRAM below from dropping them.
				cfg := m1.Config()
				cfg.RebuildWindow = 0
				m2 = newMaster(t, cfg)
			}
			o := &outageAtNotify{NodeAPI: rm, stop: func() {
				p.stop()
				if restarted {
					m1.Close()
				}
			}, restart: func() { p.serve(m2) }}
			cfg := testNodeConfig("")
			cfg.EnableOffload, cfg.SSDDir, cfg.Backend = true, t.TempDir(), "pwrite"
			cfg.BucketKeysLimit = 8
			cfg.PingInterval = tc.ping
			n, err := Start(ctx, cfg, o)
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			c := newTestClient(t, client.Config{Master: m1, LocalNode: n})
			vals := map[string][]byte{}
			for i := 0; i < 24; i++ {
				k := fmt.Sprintf("obj-%02d", i)
				vals[k] = rnd(20000)
				if err := c.Put(ctx, k, vals[k]); err != nil {
					t.Fatal(err)
				}
			}
			if got := n.OffloadNow(); got != len(vals) {
				t.Fatalf("round handled %d tasks", got)
			}
			if o.sends.Load() < 8 {
				t.Fatalf("the outage lasted only %d sends", o.sends.Load())
			}
			if objs := n.Stats().Tier.Objects; objs != int64(len(vals)) {
				t.Fatalf("the node holds %d of %d durable objects after the outage", objs, len(vals))
			}
			m := p.current()
			if restarted {
				// The restarted master learns the objects from the
				// re-registration that follows the remount.
				deadline := time.Now().Add(20 * time.Second)
				for {
					err := n.Reconcile(ctx)
					st, _ := m.Stats(ctx)
					if err == nil && st.SSDReplicas == int64(len(vals)) {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("the restarted master lists %d of %d SSD replicas (%v)", st.SSDReplicas, len(vals), err)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			st, err := m.Stats(ctx)
			if err != nil || st.SSDReplicas != int64(len(vals)) {
				t.Fatalf("master lists %d of %d SSD replicas (%v)", st.SSDReplicas, len(vals), err)
			}
			rc := newTestClient(t, client.Config{Master: m, LocalNode: n})
			if _, err := rc.EvictDRAM(ctx, nil, true); err != nil {
				t.Fatal(err)
			}
			for k, v := range vals {
				got, err := rc.Get(ctx, k)
				if err != nil || !bytes.Equal(got, v) {
					t.Fatalf("get %s after the outage: %v", k, err)
				}
			}
			if rs := rc.ReadStats(); rs.LocalSSD+rs.RemoteSSD != int64(len(vals)) {
				t.Fatalf("reads %+v: not all from SSD", rs)
			}
		})
	}
}
