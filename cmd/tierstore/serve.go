package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/tierstore/tierstore/internal/units"
	"github.com/tierstore/tierstore/master"
	"github.com/tierstore/tierstore/node"
)

// runServe runs a master and one node in one process: the master serves
// gRPC on 127.0.0.1:--port, the node its peer service on 127.0.0.1 (any
// port), the SSD tier in --dir. It stops cleanly on SIGTERM or SIGINT.
func runServe(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("serve")
	dir := fs.String("dir", "", "SSD directory of the node (required; created if missing)")
	port := fs.Int("port", 50051, "master gRPC port on 127.0.0.1 (0 picks one)")
	memory := fs.String("memory", "1GiB", "DRAM segment size of the node")
	ssdCap := fs.String("ssd_capacity", "0", "SSD tier capacity (0 = unlimited)")
	backendName := fs.String("backend", "uring", "bucket I/O backend: uring (falls back to pwrite) or pwrite")
	if code, done := parseCmd(fs, "--dir D [--port P] [--memory M] [--ssd_capacity C] [--backend B]", args, stdout, stderr); done {
		return code
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "tierstore serve: %s\n", fmt.Sprintf(format, a...))
		return 2
	}
	if fs.NArg() > 0 {
		return bad("unexpected argument %q (serve takes only flags)", fs.Arg(0))
	}
	if *dir == "" {
		return bad("--dir: required")
	}
	if *port < 0 || *port > 65535 {
		return bad("--port: %d is not a port", *port)
	}
	nc := node.DefaultConfig()
	var err error
	if nc.Memory, err = units.Parse(*memory); err != nil {
		return bad("--memory: %v", err)
	}
	if nc.SSDCapacity, err = units.Parse(*ssdCap); err != nil {
		return bad("--ssd_capacity: %v", err)
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return bad("--dir: %v", err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return bad("--dir: %v", err)
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	nc.EnableOffload, nc.SSDDir, nc.Backend, nc.Logger = true, abs, *backendName, log
	nc.Listen = "127.0.0.1:0"
	if err := nc.Validate(); err != nil {
		return bad("%v", err)
	}

	mc := master.DefaultConfig()
	mc.EnableOffload = true
	mc.Logger = log
	// The master's removal log beside the SSD it describes, so that a
	// restart of serve keeps what is on SSD and never what was removed.
	store, err := master.OpenFileRemovalStore(filepath.Join(abs, "master"))
	if err != nil {
		fmt.Fprintf(stderr, "tierstore serve: master: %v\n", err)
		return 1
	}
	defer store.Close()
	mc.Removals = store
	svc, err := master.New(mc)
	if err != nil {
		fmt.Fprintf(stderr, "tierstore serve: master: %v\n", err)
		return 1
	}
	defer svc.Close()
	lis, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(*port)))
	if err != nil {
		return bad("--port %d: %v", *port, err)
	}
	srv := master.NewServer(svc)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	n, err := node.Start(ctx, nc, svc)
	if err != nil {
		fmt.Fprintf(stderr, "tierstore serve: node: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "tierstore serve: master listening on %s node=%s peers=%s ssd=%s\n",
		lis.Addr(), n.Name(), n.Endpoint(), abs)
	<-ctx.Done()
	log.Info("signal received: draining")
	code := 0
	if err := n.Close(); err != nil {
		fmt.Fprintf(stderr, "tierstore serve: node close: %v\n", err)
		code = 1
	}
	srv.GracefulStop()
	return code
}
