package hamaster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/tierstore/tierstore/ha"
	"github.com/tierstore/tierstore/ha/etcdremovals"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/master"
)

// Config configures a highly available master.
type Config struct {
	// Master is the configuration each term's Service starts from; Run
	// sets its HA (fence, term) and Removals per term; its RebuildWindow
	// is each term's (misses answered "ask again" that long after winning
	// while nodes re-register).
	Master master.Config
	// Election is the etcd election; its Address is the RPC address this
	// master publishes for nodes and clients (the listener's, or the one
	// they reach it at).
	Election ha.Config
	// OnChange, when not nil, is called once the leader of term serves
	// (leading true) and once the standby serves again after it (leading
	// false).
	OnChange func(term uint64, leading bool)
	// ServerOptions are added to the gRPC servers of the standby and of
	// each term's leader (mutual TLS: internal/tlsconf); none serves
	// plaintext.
	ServerOptions []grpc.ServerOption
}

// Master is a highly available master on one listener.
type Master struct {
	cfg  Config
	hand *handoff
	cur  atomic.Pointer[master.Service] // the Service of the current term; nil as standby
}

// New returns a Master serving on lis once Run is called. Run closes lis
// when it returns.
func New(lis net.Listener, cfg Config) *Master {
	return &Master{cfg: cfg, hand: newHandoff(lis)}
}

// Service is the current term's Service, nil while a standby.
func (m *Master) Service() *master.Service { return m.cur.Load() }

// MetricsHandler serves the current term's metrics, and 503 while a
// standby.
func (m *Master) MetricsHandler() http.Handler { return m.MetricsHandlerWith(nil) }

// MetricsHandlerWith is MetricsHandler with the metrics of extra (the
// process's, such as its bounds per peer) added to the term's; nil: none.
func (m *Master) MetricsHandlerWith(extra prometheus.Gatherer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if svc := m.cur.Load(); svc != nil {
			if extra == nil {
				svc.MetricsHandler().ServeHTTP(w, r)
				return
			}
			promhttp.HandlerFor(prometheus.Gatherers{svc.Registry(), extra}, promhttp.HandlerOpts{}).ServeHTTP(w, r)
			return
		}
		http.Error(w, "standby: not the leader", http.StatusServiceUnavailable)
	})
}

// Run serves as a standby, campaigns, leads when elected, and campaigns
// again each time a leadership ends, until ctx ends (then it resigns and
// returns nil) or a term cannot start (an etcd configuration error, a
// master.Config that master.New refuses: the error). It closes the
// listener before it returns.
func (m *Master) Run(ctx context.Context) error {
	defer m.hand.Close()
	standby := m.serve(standbyServer(m.cfg.Election.Address, m.cfg.ServerOptions...))
	for ctx.Err() == nil {
		var err error
		if standby, err = m.term(ctx, standby); err != nil {
			standby()
			return err
		}
	}
	standby()
	return nil
}

// term is one turn: standby (served by the caller, stopped with standby)
// until elected, then leader until the leadership ends or ctx ends. It
// returns the stop function of the standby server serving again. Each
// switch starts the next server before it stops the previous one, so the
// listener always has a server.
func (m *Master) term(ctx context.Context, standby func()) (func(), error) {
	l, err := ha.Campaign(ctx, m.cfg.Election)
	if err != nil {
		if ctx.Err() != nil {
			return standby, nil
		}
		return standby, err
	}
	cfg := m.cfg.Master
	cfg.HA = master.HAConfig{Fence: l.Fence, Term: l.Term()}
	cfg.Removals = etcdremovals.New(l, m.prefix()+etcdremovals.Suffix)
	svc, err := master.New(cfg)
	if err != nil {
		_ = l.Resign(context.Background())
		return standby, err
	}
	m.cur.Store(svc)
	leader := m.serve(master.NewServer(svc, m.cfg.ServerOptions...).GRPC())
	standby()
	m.changed(l.Term(), true)
	log := m.cfg.Election.Logger
	select {
	case <-l.Done():
		if log != nil {
			log.Warn("leadership lost: serving stops, metadata dropped, campaigning again", "term", l.Term(), "cause", l.Err())
		}
	case <-ctx.Done():
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = l.Resign(rctx) // the fence goes down first: a standby takes over at once
		cancel()
	}
	standby = m.serve(standbyServer(m.cfg.Election.Address, m.cfg.ServerOptions...))
	leader()
	m.cur.Store(nil)
	svc.Close()
	m.changed(l.Term(), false)
	return standby, nil
}

func (m *Master) prefix() string {
	if m.cfg.Election.Prefix == "" {
		return ha.DefaultPrefix
	}
	return m.cfg.Election.Prefix
}

func (m *Master) changed(term uint64, leading bool) {
	if m.cfg.OnChange != nil {
		m.cfg.OnChange(term, leading)
	}
}

// serve serves gs on the handoff listener until the returned stop is
// called, which stops gs: calls in progress finish (a fenced leader's
// answer "not the leader"), for at most stopGrace, then its connections
// close and clients reconnect to whichever server is current then.
func (m *Master) serve(gs *grpc.Server) (stop func()) {
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
		return errcode.ToStatus(fmt.Errorf("master %s is a standby: %w", addr, master.ErrNotLeader))
	})}, opts...)...)
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
