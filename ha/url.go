package ha

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// MasterURL is a parsed --master value: either one master's address
// (direct) or the etcd cluster through which the current leader is found.
type MasterURL struct {
	// Addr is the master's host:port in direct form; empty for etcd.
	Addr string
	// Endpoints are the etcd endpoints (host:port) in etcd form.
	Endpoints []string
	// Prefix is the election prefix in etcd form (DefaultPrefix unless the
	// URL has a path).
	Prefix string
	// TLS are the files of a TLS connection to etcd (the URL's query
	// ?ca=FILE&cert=FILE&key=FILE); zero: plaintext.
	TLS EtcdTLS
}

// IsEtcd reports whether the master is found through etcd.
func (u MasterURL) IsEtcd() bool { return len(u.Endpoints) > 0 }

// String is the canonical form, accepted by ParseMasterURL.
func (u MasterURL) String() string {
	if !u.IsEtcd() {
		return u.Addr
	}
	s := "etcd://" + strings.Join(u.Endpoints, ",")
	if u.Prefix != DefaultPrefix {
		s += u.Prefix
	}
	if u.TLS.Enabled() {
		q := url.Values{}
		for _, kv := range [][2]string{{"ca", u.TLS.CA}, {"cert", u.TLS.Cert}, {"key", u.TLS.Key}} {
			if kv[1] != "" {
				q.Set(kv[0], kv[1])
			}
		}
		s += "?" + q.Encode()
	}
	return s
}

// ParseMasterURL parses a --master value:
//
//	host:port                         one master, used directly (Term 0)
//	etcd://h1:2379,h2:2379            the leader elected under DefaultPrefix
//	etcd://h1:2379;h2:2379            ';' separates endpoints too (Mooncake's form)
//	etcd://h1:2379/my/cluster         the leader elected under /my/cluster
//	etcd://h1:2379?ca=CA&cert=C&key=K etcd over TLS: CA verifies etcd, C and K
//	                                  are the client certificate (EtcdTLS)
//
// Errors wrap ErrBadMasterURL and say what is wrong: empty input, unknown
// scheme, empty host list, empty endpoint, missing host, bad port, duplicate
// endpoint, a query other than ca, cert and key (each once, ca needed with
// cert and key), or a fragment.
func ParseMasterURL(s string) (MasterURL, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return MasterURL{}, fmt.Errorf("%w: empty; want host:port or etcd://host:port[,host:port...]", ErrBadMasterURL)
	}
	scheme, rest, hasScheme := strings.Cut(s, "://")
	if !hasScheme {
		if err := checkHostPort(s); err != nil {
			return MasterURL{}, fmt.Errorf("%w: %w", ErrBadMasterURL, err)
		}
		return MasterURL{Addr: s}, nil
	}
	if !strings.EqualFold(scheme, "etcd") {
		return MasterURL{}, fmt.Errorf("%w: %q: unknown scheme %q, want etcd:// or a plain host:port", ErrBadMasterURL, s, scheme)
	}
	if strings.Contains(rest, "#") {
		return MasterURL{}, fmt.Errorf("%w: %q: a fragment is not supported", ErrBadMasterURL, s)
	}
	rest, query, hasQuery := strings.Cut(rest, "?")
	var tlsFiles EtcdTLS
	if hasQuery {
		var err error
		if tlsFiles, err = parseTLSQuery(query); err != nil {
			return MasterURL{}, fmt.Errorf("%w: %q: %w", ErrBadMasterURL, s, err)
		}
	}
	hosts, path, _ := strings.Cut(rest, "/")
	eps, err := parseEndpoints(ErrBadMasterURL, strconv.Quote(s), hosts)
	if err != nil {
		return MasterURL{}, err
	}
	prefix := DefaultPrefix
	if path = strings.TrimSuffix(path, "/"); path != "" {
		if prefix, err = prefixWithDefault("/" + path); err != nil {
			return MasterURL{}, fmt.Errorf("%w: %q: bad prefix path %q", ErrBadMasterURL, s, "/"+path)
		}
	}
	return MasterURL{Endpoints: eps, Prefix: prefix, TLS: tlsFiles}, nil
}

// parseTLSQuery reads an etcd:// address's query: ca, cert and key, each
// at most once, nothing else.
func parseTLSQuery(query string) (EtcdTLS, error) {
	q, err := url.ParseQuery(query)
	if err != nil {
		return EtcdTLS{}, fmt.Errorf("query %q: %v", query, err)
	}
	var t EtcdTLS
	for k, vs := range q {
		if len(vs) != 1 || vs[0] == "" {
			return EtcdTLS{}, fmt.Errorf("query parameter %q: give it once, with a file", k)
		}
		switch k {
		case "ca":
			t.CA = vs[0]
		case "cert":
			t.Cert = vs[0]
		case "key":
			t.Key = vs[0]
		default:
			return EtcdTLS{}, fmt.Errorf("unknown query parameter %q (want ca, cert, key: etcd's TLS files)", k)
		}
	}
	if !t.Enabled() {
		return EtcdTLS{}, fmt.Errorf("empty query (want ca, cert, key: etcd's TLS files)")
	}
	if err := t.Check(); err != nil {
		return EtcdTLS{}, err
	}
	return t, nil
}

// ParseEndpoints parses a master's --etcd_endpoints value: host:port
// endpoints separated by ',' or ';' (Mooncake's separator). Errors wrap
// ErrConfig and name the bad endpoint.
func ParseEndpoints(s string) ([]string, error) {
	return parseEndpoints(ErrConfig, "etcd endpoints", s)
}

// parseEndpoints splits hosts; errors wrap sentinel and quote what.
func parseEndpoints(sentinel error, what, hosts string) ([]string, error) {
	if strings.TrimSpace(hosts) == "" {
		return nil, fmt.Errorf("%w: %s: empty host list", sentinel, what)
	}
	parts := strings.FieldsFunc(hosts, func(r rune) bool { return r == ',' || r == ';' })
	if n := strings.Count(hosts, ",") + strings.Count(hosts, ";") + 1; len(parts) != n {
		return nil, fmt.Errorf("%w: %s: empty endpoint in host list %q", sentinel, what, hosts)
	}
	seen := make(map[string]bool, len(parts))
	eps := make([]string, 0, len(parts))
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if err := checkHostPort(p); err != nil {
			return nil, fmt.Errorf("%w: %s: endpoint %d: %w", sentinel, what, i+1, err)
		}
		if seen[p] {
			return nil, fmt.Errorf("%w: %s: endpoint %q given twice", sentinel, what, p)
		}
		seen[p] = true
		eps = append(eps, p)
	}
	return eps, nil
}
