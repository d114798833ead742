package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/ha" // also registers etcd:// master addresses
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/grant"
	"github.com/tierstore/tierstore/internal/tlsconf"
	"github.com/tierstore/tierstore/mastergrpc"
	"github.com/tierstore/tierstore/node"
)

// openConfig is ts_open's JSON configuration.
type openConfig struct {
	Master        string  `json:"master"`
	SegmentSize   int64   `json:"segment_size"`
	LocalHostname string  `json:"local_hostname"`
	SSDDir        string  `json:"ssd_dir"`
	SSDCapacity   int64   `json:"ssd_capacity"`
	Timeout       float64 `json:"timeout"` // seconds
	// LogLevel is "debug", "info", "warn" (default) or "error"; logs go to
	// stderr.
	LogLevel string `json:"log_level"`
	// TLSCert, TLSKey, TLSCA: mutual TLS (all three, or none for
	// plaintext), as --tls_cert, --tls_key, --tls_ca of the binaries. The
	// certificate must name the client role, and the node role too when
	// SegmentSize > 0 (the in-process node serves and registers with it).
	TLSCert string `json:"tls_cert"`
	TLSKey  string `json:"tls_key"`
	TLSCA   string `json:"tls_ca"`
	// GrantSecretFile is the grant secret the masters share, as the
	// node's --grant_secret_file: the in-process node then checks every
	// data-plane read and write of other processes against the grant the
	// master made for it (docs/security.md). Only with SegmentSize > 0:
	// a client carries the master's grants without the secret.
	GrantSecretFile string `json:"grant_secret_file"`
	// LocationCacheEntries sizes the client's replica-location cache
	// (client.Config.LocationCacheEntries): 0 the default (65536), a
	// negative number turns it off (every get asks the master first).
	LocationCacheEntries int `json:"location_cache_entries"`
}

// handle is one open client.
type handle struct {
	// mu is held for reading by every call on the handle and for writing
	// by close; it protects closed.
	mu       sync.RWMutex
	closed   bool
	c        *client.Client
	n        *node.Node         // in-process node, or nil
	m        *mastergrpc.Client // master connection this handle opened
	hostname string
	timeout  time.Duration
}

var (
	handlesMu sync.Mutex // protects handles and nextID
	handles   = map[int64]*handle{}
	nextID    int64
)

// errClosed is the error of a call on a closed (or unknown) handle.
var errClosed = errcode.Errorf(errcode.InvalidParams, "client is closed")

func lookup(id int64) (*handle, error) {
	handlesMu.Lock()
	h := handles[id]
	handlesMu.Unlock()
	if h == nil {
		return nil, errClosed
	}
	return h, nil
}

// use runs f on handle id with its read lock, unless it is closed.
func use(id int64, f func(h *handle) error) error {
	h, err := lookup(id)
	if err != nil {
		return err
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.closed {
		return errClosed
	}
	return f(h)
}

func (h *handle) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), h.timeout)
}

func parseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "", "warn", "warning":
		return slog.LevelWarn, nil
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, errcode.Errorf(errcode.InvalidParams, "log_level %q is not one of debug, info, warn, error", s)
}

// open parses cfg, dials the master, starts the in-process node when
// segment_size > 0 and returns the new handle's id.
// parseOpenConfig decodes and checks ts_open's JSON configuration (unknown
// fields refused); each error names the field.
func parseOpenConfig(cfgJSON string) (openConfig, error) {
	var cfg openConfig
	dec := json.NewDecoder(strings.NewReader(cfgJSON))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return openConfig{}, errcode.Errorf(errcode.InvalidParams, "open: configuration: %v", err)
	}
	switch {
	case cfg.Master == "":
		return openConfig{}, errcode.Errorf(errcode.InvalidParams, "open: master: required (host:port or etcd://h:2379[/prefix])")
	case cfg.SegmentSize < 0:
		return openConfig{}, errcode.Errorf(errcode.InvalidParams, "open: segment_size: must not be negative, got %d", cfg.SegmentSize)
	case cfg.SSDCapacity < 0:
		return openConfig{}, errcode.Errorf(errcode.InvalidParams, "open: ssd_capacity: must not be negative, got %d", cfg.SSDCapacity)
	case cfg.SSDDir != "" && cfg.SegmentSize == 0:
		return openConfig{}, errcode.Errorf(errcode.InvalidParams, "open: ssd_dir: needs segment_size > 0 (the SSD tier is under the in-process node)")
	case cfg.Timeout < 0:
		return openConfig{}, errcode.Errorf(errcode.InvalidParams, "open: timeout: must not be negative, got %v", cfg.Timeout)
	case cfg.GrantSecretFile != "" && cfg.SegmentSize == 0:
		return openConfig{}, errcode.Errorf(errcode.InvalidParams, "open: grant_secret_file: needs segment_size > 0 (the in-process node checks grants; a client carries the master's grants without the secret)")
	}
	if strings.Contains(cfg.Master, "://") {
		if _, err := ha.ParseMasterURL(cfg.Master); err != nil {
			return openConfig{}, errcode.Errorf(errcode.InvalidParams, "open: master: %v", err)
		}
	}
	return cfg, nil
}

func open(cfgJSON string) (int64, error) {
	cfg, err := parseOpenConfig(cfgJSON)
	if err != nil {
		return 0, err
	}
	level, err := parseLevel(cfg.LogLevel)
	if err != nil {
		return 0, err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	timeout := 30 * time.Second
	if cfg.Timeout > 0 {
		timeout = time.Duration(cfg.Timeout * float64(time.Second))
	}
	host := cfg.LocalHostname
	if host == "" {
		host = "127.0.0.1"
	}
	h := &handle{timeout: timeout, hostname: host}
	tlsFiles := tlsconf.Files{Cert: cfg.TLSCert, Key: cfg.TLSKey, CA: cfg.TLSCA}
	tlsSrc, err := loadTLS(tlsFiles, cfg.SegmentSize > 0)
	if err != nil {
		return 0, err
	}

	dctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// Reconnect quickly after a master outage (gRPC's default backoff grows
	// to 2 minutes). MinConnectTimeout must be given with ConnectParams: its
	// zero value bounds a connection attempt by the backoff delay (100 ms),
	// which a loaded machine's loopback connect + handshake can exceed,
	// failing calls with RPC_FAIL "i/o timeout".
	dial := []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
		MinConnectTimeout: 20 * time.Second})}
	if tlsSrc != nil {
		dial = append(dial, grpc.WithTransportCredentials(tlsSrc.ClientCredentials(tlsconf.Master)))
	}
	h.m, err = mastergrpc.Dial(dctx, cfg.Master, dial...)
	if err != nil {
		return 0, fmt.Errorf("open: master %s: %w", cfg.Master, err)
	}
	ccfg := client.Config{Master: h.m, Timeout: timeout, Logger: log, LocationCacheEntries: cfg.LocationCacheEntries}
	if tlsSrc != nil {
		ccfg.TLS = tlsFiles
	}
	if cfg.SegmentSize > 0 {
		ncfg := node.DefaultConfig()
		ncfg.Memory = cfg.SegmentSize
		ncfg.Logger = log
		ncfg.Listen = host
		if _, _, err := net.SplitHostPort(host); err != nil {
			ncfg.Listen = net.JoinHostPort(host, "0")
		}
		ncfg.TLS = tlsSrc
		if cfg.GrantSecretFile != "" {
			if ncfg.Grants, err = grant.LoadFile(cfg.GrantSecretFile); err != nil {
				h.m.Close()
				return 0, errcode.Errorf(errcode.InvalidParams, "open: grant_secret_file: %v", err)
			}
		}
		if cfg.SSDDir != "" {
			ncfg.EnableOffload = true
			ncfg.SSDDir = cfg.SSDDir
			ncfg.SSDCapacity = cfg.SSDCapacity
		}
		h.n, err = node.Start(dctx, ncfg, h.m)
		if err != nil {
			h.m.Close()
			return 0, errcode.Wrap(errcode.InvalidParams, fmt.Errorf("open: in-process store node: %w", err))
		}
		h.hostname = h.n.Endpoint()
		ccfg.LocalNode = h.n
	}
	h.c, err = client.New(dctx, ccfg)
	if err != nil {
		h.closeAll()
		return 0, fmt.Errorf("open: %w", err)
	}
	// The master must answer now (as Mooncake's setup connects): a wrong
	// address fails open, not the first call.
	if _, err := h.c.Stats(dctx); err != nil {
		h.closeAll()
		return 0, fmt.Errorf("open: master %s does not answer: %w", cfg.Master, err)
	}
	handlesMu.Lock()
	nextID++
	id := nextID
	handles[id] = h
	handlesMu.Unlock()
	return id, nil
}

// loadTLS loads the mutual TLS files (nil, nil when none is set) and
// checks that the certificate names the roles this handle acts in: client,
// and node too when it runs an in-process node.
func loadTLS(f tlsconf.Files, withNode bool) (*tlsconf.Source, error) {
	if f.Cert == "" && f.Key == "" && f.CA == "" {
		return nil, nil
	}
	for _, m := range []struct{ name, v string }{{"tls_cert", f.Cert}, {"tls_key", f.Key}, {"tls_ca", f.CA}} {
		if m.v == "" {
			return nil, errcode.Errorf(errcode.InvalidParams, "open: %s: required with the other TLS files (tls_cert, tls_key, tls_ca: all three or none)", m.name)
		}
	}
	src, err := tlsconf.Load(f)
	if err == nil {
		err = src.NeedRole(tlsconf.Client)
	}
	if err == nil && withNode {
		err = src.NeedRole(tlsconf.Node)
		if err != nil {
			err = fmt.Errorf("%w (the in-process node of segment_size > 0 serves and registers with this certificate)", err)
		}
	}
	if err != nil {
		return nil, errcode.Wrap(errcode.InvalidParams, fmt.Errorf("open: TLS: %w", err))
	}
	return src, nil
}

// closeAll closes the client, then the node (unmounting its segment), then
// the master connection.
func (h *handle) closeAll() error {
	var errs []error
	if h.c != nil {
		errs = append(errs, h.c.Close())
	}
	if h.n != nil {
		errs = append(errs, h.n.Close())
	}
	if h.m != nil {
		errs = append(errs, h.m.Close())
	}
	return errors.Join(errs...)
}

// closeHandle closes handle id after the calls in flight on it; closing a
// closed handle is a no-op.
func closeHandle(id int64) error {
	handlesMu.Lock()
	h := handles[id]
	delete(handles, id)
	handlesMu.Unlock()
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	h.closed = true
	return h.closeAll()
}
