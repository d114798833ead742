package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/tierstore/tierstore/ha"
	"github.com/tierstore/tierstore/ha/etcdremovals"
	"github.com/tierstore/tierstore/internal/codes"
	"github.com/tierstore/tierstore/master"
)

// High availability (docs/ha.md): with --enable_ha=true the master is one
// candidate of an etcd election. It listens at once, answering every call
// UNAVAILABLE_IN_CURRENT_STATUS ("not the leader") while it is a standby;
// when it wins, it serves a new master.Service (empty metadata, rebuilt from
// the nodes) under its term; when the leadership ends (its etcd session
// expired, it was paused past its TTL, etcd unreachable) it stops serving
// at once, drops that Service and its metadata, and campaigns again as a
// standby in the same process (no supervisor needed). SIGTERM resigns, so
// a standby takes over in about 0.1 s.

// haOptions are the high-availability flags.
type haOptions struct {
	enable        bool
	endpoints     string
	prefix        string
	sessionTTL    time.Duration
	rebuildWindow time.Duration
	parsed        []string // endpoints, parsed
}

// registerHAFlags defines the HA flags (Mooncake's enable_ha and
// etcd_endpoints, and tierstore's ha_* tuning).
func registerHAFlags(fs *flag.FlagSet, o *haOptions) {
	o.prefix, o.sessionTTL, o.rebuildWindow = ha.DefaultPrefix, ha.DefaultSessionTTL, 2*time.Second
	fs.BoolVar(&o.enable, "enable_ha", false, "high availability: campaign for leadership in etcd (needs etcd_endpoints)")
	fs.StringVar(&o.endpoints, "etcd_endpoints", "", "etcd client endpoints host:port, separated by , or ; (with enable_ha)")
	fs.StringVar(&o.prefix, "ha_prefix", o.prefix, "etcd key prefix of the election; nodes and clients use etcd://ENDPOINTS/PREFIX")
	fs.Var(durationFlag{&o.sessionTTL, time.Second}, "ha_session_ttl", "etcd session TTL: a dead leader is replaced about this long after its last keepalive, in s or as a duration")
	fs.Var(durationFlag{&o.rebuildWindow, time.Millisecond}, "ha_rebuild_window", "after winning, misses are answered 'ask again' this long while nodes re-register, in ms or as a duration")
}

// check validates the HA flags once parsed; set holds the flags given.
func (o *haOptions) check(set map[string]bool, cfg master.Config) error {
	if !o.enable {
		for _, n := range []string{"etcd_endpoints", "ha_prefix", "ha_session_ttl", "ha_rebuild_window"} {
			if set[n] {
				return fmt.Errorf("%w: %s given without enable_ha=true", errUsage, n)
			}
		}
		return nil
	}
	if o.endpoints == "" {
		return fmt.Errorf("%w: enable_ha=true needs etcd_endpoints (host:port[,host:port...])", errUsage)
	}
	eps, err := ha.ParseEndpoints(o.endpoints)
	if err != nil {
		return fmt.Errorf("%w: etcd_endpoints: %s", errUsage, oneLine(err))
	}
	o.parsed = eps
	if ip := net.ParseIP(cfg.RPCAddress); ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("%w: rpc_address %s: with enable_ha the master publishes its address for nodes and clients; give the address they reach it at", errUsage, cfg.RPCAddress)
	}
	if o.sessionTTL < time.Second {
		return fmt.Errorf("%w: ha_session_ttl must be at least 1s, got %v", errUsage, o.sessionTTL)
	}
	if o.rebuildWindow < 0 {
		return fmt.Errorf("%w: ha_rebuild_window must be >= 0, got %v", errUsage, o.rebuildWindow)
	}
	if _, err := ha.ParseMasterURL("etcd://" + eps[0] + o.prefix); err != nil || o.prefix == "" || o.prefix[0] != '/' {
		return fmt.Errorf("%w: ha_prefix %q: an etcd key path like /tierstore/master", errUsage, o.prefix)
	}
	return nil
}

// haMaster is a running highly available master process.
type haMaster struct {
	cfg    master.Config
	opt    haOptions
	log    *slog.Logger
	stdout io.Writer
	addr   string // the published RPC address
	hand   *handoff
	cur    atomic.Pointer[master.Service] // the Service of the current term; nil as standby
	// srvOpts: the gRPC server options of mutual TLS (none: plaintext),
	// for the leader's server and the standby's alike.
	srvOpts []grpc.ServerOption
}

// runHA is run for --enable_ha=true: it returns the exit status.
func runHA(cfg master.Config, opt options, srvOpts []grpc.ServerOption, log *slog.Logger, stdout, stderr io.Writer) int {
	lis, err := net.Listen("tcp", net.JoinHostPort(cfg.RPCAddress, strconv.Itoa(cfg.RPCPort)))
	if err != nil {
		fmt.Fprintf(stderr, "tierstore-master: rpc_port: listen: %v\n", err)
		return 1
	}
	m := &haMaster{cfg: cfg, opt: opt.ha, log: log, stdout: stdout, addr: lis.Addr().String(), hand: newHandoff(lis), srvOpts: srvOpts}
	defer m.hand.Close()
	stopMetrics, err := m.serveMetrics()
	if err != nil {
		fmt.Fprintf(stderr, "tierstore-master: metrics_port: listen: %v\n", err)
		return 1
	}
	defer stopMetrics()
	fmt.Fprintf(stdout, "tierstore-master listening on %s (standby; campaigning in etcd %s under %s)\n", m.addr, opt.ha.endpoints, opt.ha.prefix)
	log.Info("listening", "rpc", m.addr, "ha", true, "etcd", opt.ha.endpoints, "prefix", opt.ha.prefix)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	standby := m.serve(standbyServer(m.addr, m.srvOpts...))
	for ctx.Err() == nil {
		var err error
		if standby, err = m.term(ctx, standby); err != nil {
			log.Error("leadership term failed", "err", err)
			standby()
			return 1
		}
	}
	standby()
	log.Info("stopped")
	return 0
}

// term is one turn: standby (served by the caller, stopped with standby)
// until elected, then leader until the leadership ends or ctx (a signal)
// ends. It returns the stop function of the standby server serving again.
// Each switch starts the next server before it stops the previous one, so
// the listener always has a server.
func (m *haMaster) term(ctx context.Context, standby func()) (func(), error) {
	l, err := ha.Campaign(ctx, ha.Config{Endpoints: m.opt.parsed, Prefix: m.opt.prefix, Address: m.addr,
		SessionTTL: m.opt.sessionTTL, Logger: m.log})
	if err != nil {
		if ctx.Err() != nil {
			return standby, nil
		}
		return standby, err
	}
	cfg := m.cfg
	cfg.HA = master.HAConfig{Fence: l.Check, Term: l.Term(), RebuildWindow: m.opt.rebuildWindow}
	cfg.Removals = etcdremovals.New(l, m.opt.prefix+etcdremovals.Suffix)
	svc, err := master.New(cfg)
	if err != nil {
		_ = l.Resign(context.Background())
		return standby, err
	}
	m.cur.Store(svc)
	leader := m.serve(master.NewServer(svc, append([]grpc.ServerOption{grpc.ChainUnaryInterceptor(svc.Interceptor())}, m.srvOpts...)...).GRPC())
	standby()
	fmt.Fprintf(m.stdout, "tierstore-master leading term=%d on %s\n", l.Term(), m.addr)
	syncOut(m.stdout)
	select {
	case <-l.Done():
		m.log.Warn("leadership lost: serving stops, metadata dropped, campaigning again", "term", l.Term(), "cause", l.Err())
	case <-ctx.Done():
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = l.Resign(rctx) // the fence goes down first: a standby takes over at once
		cancel()
	}
	standby = m.serve(standbyServer(m.addr, m.srvOpts...))
	leader()
	m.cur.Store(nil)
	svc.Close()
	fmt.Fprintf(m.stdout, "tierstore-master standby (term %d ended)\n", l.Term())
	syncOut(m.stdout)
	return standby, nil
}

// serve serves gs on the handoff listener until the returned stop is
// called, which stops gs: calls in progress finish (a fenced leader's
// answer "not the leader"), for at most stopGrace, then its connections
// close and clients reconnect to whichever server is current then.
func (m *haMaster) serve(gs *grpc.Server) (stop func()) {
	v := m.hand.view()
	done := make(chan struct{})
	go func() { _ = gs.Serve(v); close(done) }()
	return func() {
		t := time.AfterFunc(stopGrace, gs.Stop)
		gs.GracefulStop()
		t.Stop()
		<-done
	}
}

// stopGrace bounds how long a server being replaced waits for its calls in
// progress (a PutStart may wait for room).
const stopGrace = time.Second

// standbyServer answers every call "not the leader".
func standbyServer(addr string, opts ...grpc.ServerOption) *grpc.Server {
	return grpc.NewServer(append([]grpc.ServerOption{grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error {
		return codes.ToStatus(fmt.Errorf("master %s is a standby: %w", addr, master.ErrNotLeader))
	})}, opts...)...)
}

// serveMetrics serves the current term's metrics (503 as a standby).
func (m *haMaster) serveMetrics() (stop func(), err error) {
	if m.cfg.MetricsPort == 0 {
		return func() {}, nil
	}
	mlis, err := net.Listen("tcp", net.JoinHostPort(m.cfg.RPCAddress, strconv.Itoa(m.cfg.MetricsPort)))
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if svc := m.cur.Load(); svc != nil {
			svc.MetricsHandler().ServeHTTP(w, r)
			return
		}
		http.Error(w, "standby: not the leader", http.StatusServiceUnavailable)
	}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(mlis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			m.log.Error("metrics server", "err", err)
		}
	}()
	fmt.Fprintf(m.stdout, "tierstore-master metrics on http://%s/metrics\n", mlis.Addr())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

func syncOut(w io.Writer) {
	if f, ok := w.(*os.File); ok {
		_ = f.Sync()
	}
}

// handoff hands the connections one listener accepts to the gRPC server of
// the moment (the standby's, then the leader's of a term): each server
// serves a view of it, and stopping a server closes its view, never the
// listener.
type handoff struct {
	lis  net.Listener
	mu   sync.Mutex // protects cur
	cur  *view
	done chan struct{}
}

func newHandoff(lis net.Listener) *handoff {
	h := &handoff{lis: lis, done: make(chan struct{})}
	go h.accept()
	return h
}

func (h *handoff) accept() {
	defer close(h.done)
	for {
		c, err := h.lis.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // a transient accept error (EMFILE): not a busy loop
			continue
		}
		h.mu.Lock()
		v := h.cur
		h.mu.Unlock()
		if v == nil {
			c.Close()
			continue
		}
		select {
		case v.conns <- c:
		case <-v.closed:
			c.Close() // the client reconnects to the next server
		}
	}
}

// view returns a new listener view and makes it current.
func (h *handoff) view() *view {
	v := &view{h: h, conns: make(chan net.Conn), closed: make(chan struct{})}
	h.mu.Lock()
	h.cur = v
	h.mu.Unlock()
	return v
}

// Close closes the listener.
func (h *handoff) Close() error {
	err := h.lis.Close()
	<-h.done
	return err
}

// view is one server's net.Listener on a handoff.
type view struct {
	h      *handoff
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func (v *view) Accept() (net.Conn, error) {
	select {
	case c := <-v.conns:
		return c, nil
	case <-v.closed:
		return nil, net.ErrClosed
	}
}

func (v *view) Close() error {
	v.once.Do(func() { close(v.closed) })
	return nil
}

func (v *view) Addr() net.Addr { return v.h.lis.Addr() }
