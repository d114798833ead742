package ha

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"
)

// Defaults. The failover budget is < 5 s (docs/ha.md): a dead leader's key
// goes when its lease expires (at most DefaultSessionTTL after its last
// keepalive, plus etcd's 500 ms expiry scan); the first standby's Campaign
// returns on the delete event (milliseconds); resolvers see the new key on
// their watch (milliseconds). 3 s + 0.5 s + a little < 5 s, while a TTL of
// 3 s still tolerates a 2.5 s stall of the leader's keepalives (GC pause,
// busy machine) before it steps down.
const (
	// DefaultPrefix is the election prefix: candidates' keys live under
	// DefaultPrefix + "/".
	DefaultPrefix = "/tierstore/master"
	// DefaultSessionTTL is the session (lease) TTL. etcd grants whole
	// seconds and, with its default 1 s election timeout, at least 2 s.
	DefaultSessionTTL = 3 * time.Second
	// DefaultDialTimeout bounds one etcd request of ours (grant, get,
	// keepalive confirmation at election).
	DefaultDialTimeout = 2 * time.Second
)

// Config configures a candidate (Campaign).
type Config struct {
	// Endpoints are the etcd client endpoints, host:port. Required.
	Endpoints []string
	// Prefix is the election prefix, shared by every candidate and resolver
	// of one tierstore cluster. Default DefaultPrefix.
	Prefix string
	// Address is the candidate's RPC address (host:port), published as the
	// election value while it leads. Required.
	Address string
	// SessionTTL is the lease TTL; it is rounded up to whole seconds and
	// must be at least 1 s (etcd may grant more; the fence uses what etcd
	// grants). Default DefaultSessionTTL.
	SessionTTL time.Duration
	// SafetyMargin is subtracted from every confirmed lease lifetime: the
	// fence goes down this long before etcd could expire the lease. It
	// covers clock-rate drift between this host and the etcd leader and the
	// short step from a successful Check to the write it guards. Default
	// SessionTTL/6 (500 ms at 3 s). Must be below SessionTTL/2, so a
	// keepalive every SessionTTL/3 keeps the fence up.
	SafetyMargin time.Duration
	// DialTimeout bounds one etcd request. Default DefaultDialTimeout.
	DialTimeout time.Duration
	// TLS are the files of a TLS connection to etcd; zero: plaintext.
	TLS EtcdTLS
	// Logger receives state changes. Default slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if err := checkEndpoints(c.Endpoints); err != nil {
		return c, err
	}
	if err := c.TLS.Check(); err != nil {
		return c, err
	}
	if err := checkHostPort(c.Address); err != nil {
		return c, fmt.Errorf("%w: Address: %w", ErrConfig, err)
	}
	p, err := prefixWithDefault(c.Prefix)
	if err != nil {
		return c, err
	}
	c.Prefix = p
	if c.SessionTTL == 0 {
		c.SessionTTL = DefaultSessionTTL
	}
	if c.SessionTTL < time.Second {
		return c, fmt.Errorf("%w: SessionTTL %v is below 1s", ErrConfig, c.SessionTTL)
	}
	c.SessionTTL = (c.SessionTTL + time.Second - 1).Truncate(time.Second)
	if c.SafetyMargin == 0 {
		c.SafetyMargin = c.SessionTTL / 6
	}
	if c.SafetyMargin < 0 || c.SafetyMargin >= c.SessionTTL/2 {
		return c, fmt.Errorf("%w: SafetyMargin %v must be in (0, SessionTTL/2 = %v)",
			ErrConfig, c.SafetyMargin, c.SessionTTL/2)
	}
	if c.DialTimeout, err = durationWithDefault("DialTimeout", c.DialTimeout, DefaultDialTimeout); err != nil {
		return c, err
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

func durationWithDefault(field string, d, def time.Duration) (time.Duration, error) {
	switch {
	case d == 0:
		return def, nil
	case d < 0:
		return 0, fmt.Errorf("%w: %s %v is negative", ErrConfig, field, d)
	}
	return d, nil
}

func prefixWithDefault(p string) (string, error) {
	if p == "" {
		return DefaultPrefix, nil
	}
	if !strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") || strings.Contains(p, "//") {
		return "", fmt.Errorf("%w: Prefix %q must start with '/', not end with '/' and have no empty segment", ErrConfig, p)
	}
	return p, nil
}

func checkEndpoints(eps []string) error {
	if len(eps) == 0 {
		return fmt.Errorf("%w: Endpoints is empty", ErrConfig)
	}
	for i, ep := range eps {
		if err := checkHostPort(ep); err != nil {
			return fmt.Errorf("%w: Endpoints[%d]: %w", ErrConfig, i, err)
		}
	}
	return nil
}

// checkHostPort accepts host:port with a non-empty host and a port in
// 1..65535; the error says which part is wrong.
func checkHostPort(s string) error {
	if s == "" {
		return fmt.Errorf("empty address, want host:port")
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", s, err)
	}
	if host == "" {
		return fmt.Errorf("%q has no host", s)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q has bad port %q, want 1..65535", s, port)
	}
	return nil
}
