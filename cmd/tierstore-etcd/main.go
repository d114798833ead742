// Command tierstore-etcd runs a real single-member etcd server (the etcd
// server library, embedded) as its own process, so that end-to-end tests, CI
// and developers can run HA masters without downloading an etcd binary:
//
//	go run ./cmd/tierstore-etcd --data-dir /tmp/etcd --listen-client 127.0.0.1:0
//	tierstore-etcd listening on 127.0.0.1:PORT master=etcd://127.0.0.1:PORT
//
// It binds 127.0.0.1 unless told otherwise, keeps its data in --data-dir
// (a restart on the same directory and ports keeps every key and revision),
// and stops cleanly on SIGTERM or SIGINT (exit 0). With --tls_cert,
// --tls_key and --tls_ca it serves clients over TLS and requires a client
// certificate of that CA (etcd's --client-cert-auth); its certificate must
// name the client address's IP. It is a development and test tool: one
// member, no auth (docs/ha.md, docs/security.md).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/tierstore/tierstore/ha/etcdserver"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, nil))
}

// run starts the member and blocks until a signal (or stop is closed, for
// tests); it returns the exit status: 0 after a clean stop or --help, 1 if
// the member fails, 2 for a bad command line (one line on stderr).
func run(args []string, stdout, stderr io.Writer, stop <-chan struct{}) int {
	cfg, err := parse(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "tierstore-etcd:", err)
		return 2
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)

	srv, err := etcdserver.Start(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "tierstore-etcd:", err)
		return 1
	}
	defer srv.Stop()
	fmt.Fprintf(stdout, "tierstore-etcd listening on %s master=%s\n", srv.Endpoints()[0], srv.MasterURL())
	select {
	case <-sig:
		return 0
	case <-stop:
		return 0
	case err := <-srv.Err():
		fmt.Fprintln(stderr, "tierstore-etcd:", err)
		return 1
	}
}

func parse(args []string, stdout io.Writer) (etcdserver.Config, error) {
	var cfg etcdserver.Config
	fs := flag.NewFlagSet("tierstore-etcd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&cfg.Dir, "data-dir", "", "data directory (required; created if missing)")
	fs.StringVar(&cfg.ClientAddr, "listen-client", "127.0.0.1:2379", "client address IP:PORT; port 0 picks a free port, printed at start")
	fs.StringVar(&cfg.PeerAddr, "listen-peer", "127.0.0.1:0", "peer address IP:PORT (single member; port 0 picks one)")
	fs.StringVar(&cfg.Name, "name", "tierstore-etcd", "member name")
	fs.StringVar(&cfg.LogLevel, "log-level", "error", "etcd log level: debug, info, warn, error, panic, fatal")
	fs.DurationVar(&cfg.StartTimeout, "start-timeout", 30*time.Second, "how long to wait for the member to serve")
	fs.StringVar(&cfg.TLS.Cert, "tls_cert", "", "client TLS: the server's certificate file (its SANs name the client address's IP); with tls_key and tls_ca")
	fs.StringVar(&cfg.TLS.Key, "tls_key", "", "client TLS: the key file of tls_cert")
	fs.StringVar(&cfg.TLS.CA, "tls_ca", "", "client TLS: the CA file that clients' certificates must be signed by (a client certificate is required)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, "usage: tierstore-etcd --data-dir DIR [flags]")
			fs.SetOutput(stdout)
			fs.PrintDefaults()
		}
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if cfg.Dir == "" {
		return cfg, fmt.Errorf("--data-dir is required")
	}
	if !filepath.IsAbs(cfg.Dir) {
		abs, err := filepath.Abs(cfg.Dir)
		if err != nil {
			return cfg, fmt.Errorf("--data-dir %q: %v", cfg.Dir, err)
		}
		cfg.Dir = abs
	}
	for _, a := range []struct{ flag, addr string }{{"--listen-client", cfg.ClientAddr}, {"--listen-peer", cfg.PeerAddr}} {
		if _, _, err := etcdserver.ParseAddr(a.addr); err != nil {
			return cfg, fmt.Errorf("%s: %v", a.flag, err)
		}
	}
	if t := cfg.TLS; t.Enabled() {
		if t.Cert == "" || t.Key == "" || t.CA == "" {
			return cfg, fmt.Errorf("--tls_cert, --tls_key and --tls_ca go together (got cert %q, key %q, ca %q)", t.Cert, t.Key, t.CA)
		}
		for _, f := range []struct{ flag, path string }{{"--tls_cert", t.Cert}, {"--tls_key", t.Key}, {"--tls_ca", t.CA}} {
			if _, err := os.Stat(f.path); err != nil {
				return cfg, fmt.Errorf("%s: %v", f.flag, err)
			}
		}
	}
	if cfg.StartTimeout <= 0 {
		return cfg, fmt.Errorf("--start-timeout %v must be positive", cfg.StartTimeout)
	}
	switch cfg.LogLevel {
	case "debug", "info", "warn", "error", "panic", "fatal":
	default:
		return cfg, fmt.Errorf("--log-level %q: want debug, info, warn, error, panic or fatal", cfg.LogLevel)
	}
	return cfg, nil
}
