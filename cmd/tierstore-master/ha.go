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
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/tierstore/tierstore/ha"
	"github.com/tierstore/tierstore/ha/hamaster"
	"github.com/tierstore/tierstore/internal/peerlimit"
	"github.com/tierstore/tierstore/master"
)

// High availability (docs/ha.md): with --enable_ha=true the master is one
// candidate of an etcd election, run by package ha/hamaster: a standby
// answering "not the leader" until it wins, a new master.Service per term,
// and a new campaign in the same process when the leadership ends (no
// supervisor needed). SIGTERM resigns, so a standby takes over at once.

// haOptions are the high-availability flags.
type haOptions struct {
	enable     bool
	endpoints  string
	prefix     string
	sessionTTL time.Duration
	etcdTLS    ha.EtcdTLS // --etcd_tls_*: the etcd client's TLS files
	parsed     []string   // endpoints, parsed
}

// registerHAFlags defines the HA flags (Mooncake's enable_ha and
// etcd_endpoints, and tierstore's ha_* tuning).
func registerHAFlags(fs *flag.FlagSet, o *haOptions) {
	o.prefix, o.sessionTTL = ha.DefaultPrefix, ha.DefaultSessionTTL
	fs.BoolVar(&o.enable, "enable_ha", false, "high availability: campaign for leadership in etcd (needs etcd_endpoints)")
	fs.StringVar(&o.endpoints, "etcd_endpoints", "", "etcd client endpoints host:port, separated by , or ; (with enable_ha)")
	fs.StringVar(&o.prefix, "ha_prefix", o.prefix, "etcd key prefix of the election; nodes and clients use etcd://ENDPOINTS/PREFIX")
	fs.Var(durationFlag{&o.sessionTTL, time.Second}, "ha_session_ttl", "etcd session TTL: a dead leader is replaced about this long after its last keepalive, in s or as a duration")
	fs.StringVar(&o.etcdTLS.CA, "etcd_tls_ca", "", "etcd over TLS: the CA file that signed etcd's server certificate (with enable_ha; nodes and clients use etcd://ENDPOINTS?ca=FILE&cert=FILE&key=FILE)")
	fs.StringVar(&o.etcdTLS.Cert, "etcd_tls_cert", "", "etcd over TLS: this master's client certificate file, for an etcd with --client-cert-auth (with etcd_tls_ca and etcd_tls_key)")
	fs.StringVar(&o.etcdTLS.Key, "etcd_tls_key", "", "etcd over TLS: the key file of etcd_tls_cert")
}

// check validates the HA flags once parsed; set holds the flags given.
func (o *haOptions) check(set map[string]bool, cfg master.Config) error {
	if !o.enable {
		for _, n := range []string{"etcd_endpoints", "ha_prefix", "ha_session_ttl", "etcd_tls_ca", "etcd_tls_cert", "etcd_tls_key"} {
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
	if err := o.etcdTLS.Check(); err != nil {
		return fmt.Errorf("%w: etcd_tls_*: %s", errUsage, oneLine(err))
	}
	for _, f := range []struct{ flag, path string }{{"etcd_tls_ca", o.etcdTLS.CA}, {"etcd_tls_cert", o.etcdTLS.Cert}, {"etcd_tls_key", o.etcdTLS.Key}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return fmt.Errorf("%w: %s: %v", errUsage, f.flag, err)
		}
	}
	if ip := net.ParseIP(cfg.RPCAddress); ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("%w: rpc_address %s: with enable_ha the master publishes its address for nodes and clients; give the address they reach it at", errUsage, cfg.RPCAddress)
	}
	if o.sessionTTL < time.Second {
		return fmt.Errorf("%w: ha_session_ttl must be at least 1s, got %v", errUsage, o.sessionTTL)
	}
	if _, err := ha.ParseMasterURL("etcd://" + eps[0] + o.prefix); err != nil || o.prefix == "" || o.prefix[0] != '/' {
		return fmt.Errorf("%w: ha_prefix %q: an etcd key path like /tierstore/master", errUsage, o.prefix)
	}
	return nil
}

// runHA is run for --enable_ha=true: it returns the exit status. The term
// loop is package ha/hamaster's; this prints its switches and serves its
// metrics.
func runHA(cfg master.Config, opt options, srvOpts []grpc.ServerOption, guard *peerlimit.Guard, log *slog.Logger, stdout, stderr io.Writer) int {
	lis, err := net.Listen("tcp", net.JoinHostPort(cfg.RPCAddress, strconv.Itoa(cfg.RPCPort)))
	if err != nil {
		fmt.Fprintf(stderr, "tierstore-master: rpc_port: listen: %v\n", err)
		return 1
	}
	lis = guard.Listener(lis)
	addr := lis.Addr().String()
	m := hamaster.New(lis, hamaster.Config{
		Master: cfg,
		Election: ha.Config{Endpoints: opt.ha.parsed, Prefix: opt.ha.prefix, Address: addr,
			SessionTTL: opt.ha.sessionTTL, TLS: opt.ha.etcdTLS, Logger: log},
		ServerOptions: srvOpts,
		OnChange: func(term uint64, leading bool) {
			if leading {
				fmt.Fprintf(stdout, "tierstore-master leading term=%d on %s\n", term, addr)
			} else {
				fmt.Fprintf(stdout, "tierstore-master standby (term %d ended)\n", term)
			}
			syncOut(stdout)
		},
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(guard.Collector())
	stopMetrics, err := serveMetrics(cfg, m.MetricsHandlerWith(reg), log, stdout)
	if err != nil {
		lis.Close()
		fmt.Fprintf(stderr, "tierstore-master: metrics_port: listen: %v\n", err)
		return 1
	}
	defer stopMetrics()
	fmt.Fprintf(stdout, "tierstore-master listening on %s (standby; campaigning in etcd %s under %s)\n", addr, opt.ha.endpoints, opt.ha.prefix)
	log.Info("listening", "rpc", addr, "ha", true, "etcd", opt.ha.endpoints, "prefix", opt.ha.prefix)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := m.Run(ctx); err != nil {
		log.Error("leadership term failed", "err", err)
		return 1
	}
	log.Info("stopped")
	return 0
}

// serveMetrics serves h on the metrics port, when there is one.
func serveMetrics(cfg master.Config, h http.Handler, log *slog.Logger, stdout io.Writer) (stop func(), err error) {
	if cfg.MetricsPort == 0 {
		return func() {}, nil
	}
	mlis, err := net.Listen("tcp", net.JoinHostPort(cfg.RPCAddress, strconv.Itoa(cfg.MetricsPort)))
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(mlis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "err", err)
		}
	}()
	fmt.Fprintf(stdout, "tierstore-master metrics on http://%s/metrics\n", mlis.Addr())
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
