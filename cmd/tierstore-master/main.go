// Command tierstore-master runs the tierstore master: the metadata service
// of a tierstore cluster (package master). It accepts Mooncake's master flag
// names and units, so an existing command line such as
//
//	tierstore-master --rpc_port=39486 --eviction_high_watermark_ratio=0.7 \
//	  --eviction_ratio=0.2 --default_kv_lease_ttl=11000 \
//	  --enable_offload=true --offload_on_evict=true
//
// starts it unchanged. Once listening it prints
// "tierstore-master listening on HOST:PORT" on stdout. SIGTERM or SIGINT stop
// it cleanly (pending RPCs finish, exit status 0). Invalid flags stop start-up
// with a one-line error naming the flag and exit status 2.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/tierstore/tierstore/master"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	cfg, opt, err := parseAll(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: opt.logLevel}))
	cfg.Logger = log
	for _, n := range opt.ignored {
		log.Warn("flag accepted for Mooncake compatibility, no effect", "flag", n)
	}
	svc, err := master.New(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tierstore-master:", err)
		return 2
	}
	defer svc.Close()

	lis, err := net.Listen("tcp", net.JoinHostPort(cfg.RPCAddress, strconv.Itoa(cfg.RPCPort)))
	if err != nil {
		fmt.Fprintf(os.Stderr, "tierstore-master: rpc_port: listen: %v\n", err)
		return 1
	}
	srv := master.NewServer(svc)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(lis) }()

	var metrics *http.Server
	if cfg.MetricsPort != 0 {
		mlis, err := net.Listen("tcp", net.JoinHostPort(cfg.RPCAddress, strconv.Itoa(cfg.MetricsPort)))
		if err != nil {
			srv.Stop()
			fmt.Fprintf(os.Stderr, "tierstore-master: metrics_port: listen: %v\n", err)
			return 1
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", svc.MetricsHandler())
		metrics = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := metrics.Serve(mlis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics server", "err", err)
			}
		}()
		fmt.Printf("tierstore-master metrics on http://%s/metrics\n", mlis.Addr())
	}
	fmt.Printf("tierstore-master listening on %s\n", lis.Addr())
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
	if metrics != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		metrics.Shutdown(ctx)
		cancel()
	}
	svc.Close()
	log.Info("stopped")
	return code
}
