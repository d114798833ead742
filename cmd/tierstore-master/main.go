package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/tierstore/tierstore/internal/cpuprofile"
	"github.com/tierstore/tierstore/internal/grant"
	"github.com/tierstore/tierstore/internal/peerlimit"
	"github.com/tierstore/tierstore/internal/tlsconf"
	"github.com/tierstore/tierstore/master"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run starts the master and blocks until a signal; it returns the exit
// status. -h/--help prints the usage to stdout and returns 0; a bad command
// line prints one line to stderr and returns 2.
func run(args []string, stdout, stderr io.Writer) int {
	cfg, opt, err := parseAll(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: opt.logLevel}))
	cfg.Logger = log
	stopProfile, err := cpuprofile.Start(opt.cpuProfile)
	if err != nil {
		fmt.Fprintln(stderr, "tierstore-master:", err)
		return 2
	}
	defer stopProfile()
	for _, n := range opt.ignored {
		log.Warn("flag accepted for Mooncake compatibility, no effect", "flag", n)
	}
	if opt.grantSecretFile != "" {
		keys, err := grant.LoadFile(opt.grantSecretFile)
		if err != nil {
			fmt.Fprintln(stderr, "tierstore-master:", err)
			return 2
		}
		cfg.Grants = keys
		log.Info("read grants on", "grant_secret_file", opt.grantSecretFile)
	}
	guard := peerlimit.New(opt.limits, log)
	srvOpts, err := serverTLS(opt.tls, net.JoinHostPort(cfg.RPCAddress, strconv.Itoa(cfg.RPCPort)), guard, log)
	if err != nil {
		fmt.Fprintln(stderr, "tierstore-master:", err)
		return 2
	}
	if opt.ha.enable {
		return runHA(cfg, opt, srvOpts, guard, log, stdout, stderr)
	}
	if opt.stateDir == "" {
		log.Warn("no --state_dir: the removal log is kept in memory; after a restart of this master the nodes drop every object they hold")
	} else {
		store, err := master.OpenFileRemovalStore(opt.stateDir)
		if err != nil {
			fmt.Fprintln(stderr, "tierstore-master:", err)
			return 2
		}
		defer store.Close()
		cfg.Removals = store
	}
	svc, err := master.New(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "tierstore-master:", err)
		return 2
	}
	defer svc.Close()
	svc.Registry().MustRegister(guard.Collector())

	lis, err := net.Listen("tcp", net.JoinHostPort(cfg.RPCAddress, strconv.Itoa(cfg.RPCPort)))
	if err != nil {
		fmt.Fprintf(stderr, "tierstore-master: rpc_port: listen: %v\n", err)
		return 1
	}
	lis = guard.Listener(lis)
	srv := master.NewServer(svc, srvOpts...)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(lis) }()

	stopMetrics, err := serveMetrics(cfg, svc.MetricsHandler(), log, stdout)
	if err != nil {
		srv.Stop()
		fmt.Fprintf(stderr, "tierstore-master: metrics_port: listen: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "tierstore-master listening on %s\n", lis.Addr())
	log.Info("listening", "rpc", lis.Addr().String(), "metrics_port", cfg.MetricsPort)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	code := 0
	select {
	case s := <-sig:
		log.Info("shutting down", "signal", s.String())
	case err := <-serveErr:
		log.Error("grpc server stopped", "err", err)
		code = 1
	}
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		srv.Stop()
	}
	stopMetrics()
	svc.Close()
	log.Info("stopped")
	return code
}

// serverTLS loads the master's certificate (it must name role master) and
// returns the gRPC server options of the bounds per peer of guard and of
// mutual TLS with master.Roles (a handshake that times out counted by
// guard); without the TLS flags, the bounds' only, and a warning once if
// addr is not loopback.
func serverTLS(f tlsconf.Files, addr string, guard *peerlimit.Guard, log *slog.Logger) ([]grpc.ServerOption, error) {
	if !f.Enabled() {
		tlsconf.WarnPlaintext(log, "master rpc", addr)
		return guard.GRPCOptions(), nil
	}
	src, err := tlsconf.Load(f)
	if err == nil {
		err = src.NeedRole(tlsconf.Master)
	}
	if err != nil {
		return nil, err
	}
	log.Info("mutual TLS", "cert", f.Cert, "ca", f.CA, "roles", src.Roles())
	return append(guard.GRPCOptions(), src.ServerOptions(master.Roles, log, func(from net.Addr, err error) { guard.HandshakeRefused(from, err) })...), nil
}
