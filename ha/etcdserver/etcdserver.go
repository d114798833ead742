// Package etcdserver runs a real, single-member etcd server inside the
// calling process (go.etcd.io/etcd/server/v3/embed). It exists so that tests,
// end-to-end tests and developers get an etcd without downloading a binary:
// package ha/hatest wraps it for tests, and the tierstore-etcd command
// (cmd/tierstore-etcd) runs it as a separate process.
//
// It is not a production deployment: one member, no auth, client TLS only
// when asked (Config.TLS; peers stay plaintext, the single member has
// none). Production HA masters use an operator-run etcd cluster
// (docs/ha.md).
//
// Only this package and its users pull in the etcd server; package ha (used
// by the light client) imports the etcd client alone.
//
// Concurrency: a Server's methods may be called from any goroutine; Stop and
// Start are serialised by the Server's mutex.
package etcdserver

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
)

// Errors returned by this package, checked with errors.Is.
var (
	// ErrConfig: the configuration is invalid; the message names the field.
	ErrConfig = errors.New("etcdserver: invalid configuration")
	// ErrStart: the server did not start (bind failure, bad data dir, timeout).
	ErrStart = errors.New("etcdserver: start failed")
	// ErrStopped: the call needs a running server.
	ErrStopped = errors.New("etcdserver: server is stopped")
)

// Config configures an embedded etcd member.
type Config struct {
	// Dir is the data directory (WAL and bbolt database). Required. A
	// restart on the same Dir keeps every key, lease and revision.
	Dir string
	// Name is the member name. Default "tierstore-etcd".
	Name string
	// ClientAddr is the host:port clients connect to. The host must be an IP
	// literal; port 0 picks a free port. Default "127.0.0.1:0".
	ClientAddr string
	// PeerAddr is the host:port of the (unused, single-member) peer
	// listener. Default "127.0.0.1:0".
	PeerAddr string
	// LogLevel is etcd's zap log level. Default "error".
	LogLevel string
	// StartTimeout bounds the wait until the member serves. Default 30 s.
	StartTimeout time.Duration
	// NoFsync turns off etcd's fsync. It makes a crash lose data, so only
	// tests that never simulate a crash of etcd itself may set it.
	NoFsync bool
	// TLS, when its three files are set, serves clients over TLS with
	// this certificate and key and requires a client certificate signed
	// by CA (etcd's --client-cert-auth). The certificate must name the
	// client address's IP in its SANs (clients check it).
	TLS TLSFiles
}

// TLSFiles are the files of the server's client TLS.
type TLSFiles struct {
	Cert, Key, CA string
}

// Enabled reports whether any file is set.
func (t TLSFiles) Enabled() bool { return t.Cert != "" || t.Key != "" || t.CA != "" }

// Server is a running (or stopped) embedded etcd member. Its client and
// peer ports are fixed at the first Start, so Stop followed by Start brings
// the same member back at the same endpoint with its data.
type Server struct {
	mu         sync.Mutex  // protects every field below
	cfg        Config      // with defaults applied and ports resolved
	etcd       *embed.Etcd // nil while stopped
	clientPort int
	peerPort   int
}

// autoPortAttempts bounds retries when a port picked as free is taken
// between picking and binding (another process raced us).
const autoPortAttempts = 5

// Start validates cfg, picks free ports where asked, and starts the member.
// It returns once the member serves client requests.
func Start(cfg Config) (*Server, error) {
	cfg, err := withDefaults(cfg)
	if err != nil {
		return nil, err
	}
	cHost, cPort, err := splitAddr("ClientAddr", cfg.ClientAddr)
	if err != nil {
		return nil, err
	}
	pHost, pPort, err := splitAddr("PeerAddr", cfg.PeerAddr)
	if err != nil {
		return nil, err
	}
	auto := cPort == 0 || pPort == 0
	var lastErr error
	for attempt := 0; attempt < autoPortAttempts; attempt++ {
		s := &Server{cfg: cfg, clientPort: cPort, peerPort: pPort}
		if s.clientPort == 0 {
			if s.clientPort, err = freePort(cHost); err != nil {
				return nil, err
			}
		}
		if s.peerPort == 0 {
			if s.peerPort, err = freePort(pHost); err != nil {
				return nil, err
			}
		}
		s.cfg.ClientAddr = net.JoinHostPort(cHost, strconv.Itoa(s.clientPort))
		s.cfg.PeerAddr = net.JoinHostPort(pHost, strconv.Itoa(s.peerPort))
		lastErr = s.start()
		if lastErr == nil {
			return s, nil
		}
		if !auto || !errors.Is(lastErr, syscall.EADDRINUSE) {
			break
		}
	}
	return nil, lastErr
}

func withDefaults(cfg Config) (Config, error) {
	if cfg.Dir == "" {
		return cfg, fmt.Errorf("%w: Dir is empty", ErrConfig)
	}
	if cfg.Name == "" {
		cfg.Name = "tierstore-etcd"
	}
	if cfg.ClientAddr == "" {
		cfg.ClientAddr = "127.0.0.1:0"
	}
	if cfg.PeerAddr == "" {
		cfg.PeerAddr = "127.0.0.1:0"
	}
	if cfg.LogLevel == "" {
		cfg.LogLevel = "error"
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 30 * time.Second
	}
	if cfg.StartTimeout < 0 {
		return cfg, fmt.Errorf("%w: StartTimeout %v is negative", ErrConfig, cfg.StartTimeout)
	}
	if t := cfg.TLS; t.Enabled() && (t.Cert == "" || t.Key == "" || t.CA == "") {
		return cfg, fmt.Errorf("%w: TLS needs all of Cert, Key and CA; got cert %q, key %q, ca %q", ErrConfig, t.Cert, t.Key, t.CA)
	}
	return cfg, nil
}

func splitAddr(field, addr string) (string, int, error) {
	host, port, err := ParseAddr(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%w: %s: %w", ErrConfig, field, err)
	}
	return host, port, nil
}

// ParseAddr checks a listen address: IP:PORT with an IP literal and a port
// in 0..65535 (0 picks a free port). The error quotes addr and says what is
// wrong.
func ParseAddr(addr string) (host string, port int, err error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%q is not IP:PORT: %v", addr, err)
	}
	if net.ParseIP(host) == nil {
		return "", 0, fmt.Errorf("%q: host must be an IP address", addr)
	}
	port, err = strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("%q: port must be 0..65535", addr)
	}
	return host, port, nil
}

// freePort asks the kernel for a free port on host. The port is released
// before etcd binds it, so a race with another process is possible; Start
// retries with new ports when that happens.
func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("%w: pick a free port on %s: %v", ErrStart, host, err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("%w: release port %d: %v", ErrStart, port, err)
	}
	return port, nil
}

func (s *Server) embedConfig() *embed.Config {
	ec := embed.NewConfig()
	ec.Name = s.cfg.Name
	ec.Dir = s.cfg.Dir
	cu := url.URL{Scheme: "http", Host: s.cfg.ClientAddr}
	if t := s.cfg.TLS; t.Enabled() {
		cu.Scheme = "https"
		ec.ClientTLSInfo = transport.TLSInfo{CertFile: t.Cert, KeyFile: t.Key, TrustedCAFile: t.CA, ClientCertAuth: true}
	}
	pu := url.URL{Scheme: "http", Host: s.cfg.PeerAddr}
	ec.ListenClientUrls = []url.URL{cu}
	ec.AdvertiseClientUrls = []url.URL{cu}
	ec.ListenPeerUrls = []url.URL{pu}
	ec.AdvertisePeerUrls = []url.URL{pu}
	ec.InitialCluster = ec.Name + "=" + pu.String()
	ec.LogLevel = s.cfg.LogLevel
	ec.LogOutputs = []string{"stderr"}
	ec.EnableGRPCGateway = false
	ec.UnsafeNoFsync = s.cfg.NoFsync
	return ec
}

// start runs the member; the caller holds s.mu or owns s exclusively.
func (s *Server) start() error {
	e, err := embed.StartEtcd(s.embedConfig())
	if err != nil {
		return fmt.Errorf("%w: %s in %s: %w", ErrStart, s.cfg.ClientAddr, s.cfg.Dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
		s.etcd = e
		return nil
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("%w: %s: %w", ErrStart, s.cfg.ClientAddr, err)
	case <-time.After(s.cfg.StartTimeout):
		e.Server.Stop()
		e.Close()
		return fmt.Errorf("%w: %s: not ready after %v", ErrStart, s.cfg.ClientAddr, s.cfg.StartTimeout)
	}
}

// Endpoints returns the client endpoints (host:port), fixed for the life of
// the Server, running or not.
func (s *Server) Endpoints() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return []string{s.cfg.ClientAddr}
}

// MasterURL returns the etcd:// URL that nodes and clients are given
// (--master=etcd://127.0.0.1:PORT), see ha.ParseMasterURL. With TLS it
// carries the CA (?ca=FILE); a client adds its own certificate and key
// (&cert=FILE&key=FILE), which this server requires.
func (s *Server) MasterURL() string {
	u := "etcd://" + s.Endpoints()[0]
	if s.cfg.TLS.Enabled() {
		u += "?" + url.Values{"ca": {s.cfg.TLS.CA}}.Encode()
	}
	return u
}

// Dir returns the data directory.
func (s *Server) Dir() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg.Dir
}

// Running reports whether the member is started.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.etcd != nil
}

// Stop closes the member: client connections are cut, the data directory
// stays. Stopping a stopped server is a no-op.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.etcd == nil {
		return
	}
	s.etcd.Close()
	s.etcd = nil
}

// restartAttempts and restartWait bound how long Restart waits for its
// fixed ports to become bindable again.
const (
	restartAttempts = 20
	restartWait     = 100 * time.Millisecond
)

// Restart starts a stopped member again on the same data directory and the
// same ports. Restarting a running member is an error.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.etcd != nil {
		return fmt.Errorf("%w: Restart of a running server %s", ErrConfig, s.cfg.ClientAddr)
	}
	var err error
	for attempt := 0; attempt < restartAttempts; attempt++ {
		if err = s.start(); err == nil || !errors.Is(err, syscall.EADDRINUSE) {
			return err
		}
		time.Sleep(restartWait) // the old listener's port is not free yet
	}
	return err
}

// Err returns a channel that receives a fatal serving error of the running
// member, or nil when stopped.
func (s *Server) Err() <-chan error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.etcd == nil {
		return nil
	}
	return s.etcd.Err()
}
