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

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/tierstore/tierstore/internal/cpuprofile"
	"github.com/tierstore/tierstore/internal/grant"
	"github.com/tierstore/tierstore/internal/tlsconf"
	"github.com/tierstore/tierstore/mastergrpc"
	"github.com/tierstore/tierstore/node"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "tierstore-node: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	o.node.Logger = log
	stopProfile, err := cpuprofile.Start(o.cpuProfile)
	if err != nil {
		fmt.Fprintf(stderr, "tierstore-node: %v\n", err)
		return 2
	}
	defer stopProfile()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	// Reconnect quickly after a master outage (gRPC's default backoff
	// grows to 2 minutes): unanswered notifies are being sent again.
	// MinConnectTimeout must be given with ConnectParams: its zero value
	// cuts each connection attempt at the backoff delay (100 ms), which a
	// loaded machine's connect and TLS handshake can exceed.
	dial := []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
		MinConnectTimeout: 20 * time.Second})}
	if o.tls.Enabled() {
		src, err := tlsconf.Load(o.tls)
		if err == nil {
			err = src.NeedRole(tlsconf.Node)
		}
		if err != nil {
			fmt.Fprintf(stderr, "tierstore-node: %v\n", err)
			return 2
		}
		o.node.TLS = src
		dial = append(dial, grpc.WithTransportCredentials(src.ClientCredentials(tlsconf.Master)))
		log.Info("mutual TLS", "cert", o.tls.Cert, "ca", o.tls.CA, "roles", src.Roles())
	} else {
		tlsconf.WarnPlaintext(log, "node data plane and gRPC", o.node.Listen)
	}
	if o.grantSecretFile != "" {
		keys, err := grant.LoadFile(o.grantSecretFile)
		if err != nil {
			fmt.Fprintf(stderr, "tierstore-node: %v\n", err)
			return 2
		}
		o.node.Grants = keys
		log.Info("read grants required", "grant_secret_file", o.grantSecretFile)
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	m, err := mastergrpc.Dial(dctx, o.master, dial...)
	cancel()
	if err != nil {
		fmt.Fprintf(stderr, "tierstore-node: --master %s: %v\n", o.master, err)
		return 1
	}
	defer m.Close()
	n, err := node.Start(ctx, o.node, m)
	if err != nil {
		fmt.Fprintf(stderr, "tierstore-node: %v\n", err)
		return 1
	}
	if o.node.MetricsPort != 0 {
		lis, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(o.node.MetricsPort)))
		if err != nil {
			n.Close()
			fmt.Fprintf(stderr, "tierstore-node: --metrics_port %d: %v\n", o.node.MetricsPort, err)
			return 1
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", n.MetricsHandler())
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(lis) }()
		defer srv.Close()
	}
	fmt.Fprintf(stdout, "tierstore-node listening on %s node=%s segment=%s\n", n.Endpoint(), n.Name(), n.SegmentName())
	if f, ok := stdout.(*os.File); ok {
		_ = f.Sync()
	}
	<-ctx.Done()
	log.Info("signal received: draining")
	if err := n.Close(); err != nil {
		fmt.Fprintf(stderr, "tierstore-node: close: %v\n", err)
		return 1
	}
	return 0
}
