package tlsconf

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/tierstore/tierstore/internal/errcode"
)

// ServerCredentials are the gRPC transport credentials of a server
// (ServerConfig). A refused handshake is logged on log, with the peer's
// address and the reason (the peer sees the TLS alert), when log is not nil.
// Each refused handshake is also passed to every hook (a Guard counts
// those that timed out).
func (s *Source) ServerCredentials(log *slog.Logger, hooks ...func(from net.Addr, err error)) credentials.TransportCredentials {
	return &serverCreds{cfg: s.ServerConfig(), log: log, hooks: hooks}
}

// ClientCredentials are the gRPC transport credentials of a client of a
// server of role want (ClientConfig).
func (s *Source) ClientCredentials(want Role) credentials.TransportCredentials {
	return credentials.NewTLS(s.ClientConfig(want))
}

// serverCreds are gRPC server credentials of their own rather than
// credentials.NewTLS's, which closes a refused connection at once: a
// refused handshake is logged and the connection lingers (Linger) so the
// client reads the alert that says why.
type serverCreds struct {
	cfg   *tls.Config
	log   *slog.Logger
	hooks []func(from net.Addr, err error)
}

func (c *serverCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn := tls.Server(raw, c.cfg)
	if err := conn.Handshake(); err != nil {
		LogRefused(c.log, raw.RemoteAddr(), err)
		for _, h := range c.hooks {
			h(raw.RemoteAddr(), err)
		}
		Linger(raw)
		raw.Close()
		return nil, nil, err
	}
	return conn, credentials.TLSInfo{State: conn.ConnectionState(), CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
}

func (c *serverCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, fmt.Errorf("tlsconf: server credentials used by a client")
}

func (c *serverCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls"}
}
func (c *serverCreds) Clone() credentials.TransportCredentials {
	return &serverCreds{cfg: c.cfg, log: c.log, hooks: c.hooks}
}
func (c *serverCreds) OverrideServerName(string) error { return nil }

// lingerFor bounds how long Linger waits for a refused peer.
const lingerFor = time.Second

// Linger is called on a connection whose TLS handshake the server refused,
// before it is closed: the TLS 1.3 client, whose handshake finished before
// the server checked its certificate, has already sent its first bytes;
// closing with them unread would reset the connection and the client
// would see "broken pipe" or "connection reset" instead of the alert that
// names the reason. So the server half-closes, then reads and drops what
// the client sent (at most 64 KiB, for at most a second), until the
// client, having read the alert, closes.
func Linger(c net.Conn) {
	if hc, ok := c.(interface{ CloseWrite() error }); ok {
		_ = hc.CloseWrite()
	}
	_ = c.SetReadDeadline(time.Now().Add(lingerFor))
	_, _ = io.CopyN(io.Discard, c, 64<<10)
}

// LogRefused logs a refused TLS handshake (nil log: nothing).
func LogRefused(log *slog.Logger, from net.Addr, err error) {
	if log != nil {
		log.Warn("tls: connection refused", "peer", from.String(), "err", err)
	}
}

// Handshaken are the gRPC server credentials for connections a listener
// already took through the TLS handshake (the node's Mux: TLS first, then
// the data plane or gRPC inside). Each connection must implement
// ConnectionState (a *tls.Conn, or a wrapper that forwards it); its state
// becomes the call's credentials.TLSInfo, which Authorize reads.
func Handshaken() credentials.TransportCredentials { return handshaken{} }

// StateConn is a connection that went through a TLS handshake.
type StateConn interface {
	net.Conn
	ConnectionState() tls.ConnectionState
}

type handshaken struct{}

func (handshaken) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, fmt.Errorf("tlsconf: Handshaken is for servers only")
}

func (handshaken) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	sc, ok := c.(StateConn)
	if !ok {
		return nil, nil, fmt.Errorf("tlsconf: connection from %s did not go through TLS", c.RemoteAddr())
	}
	return c, credentials.TLSInfo{State: sc.ConnectionState(), CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
}

func (handshaken) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls"}
}
func (h handshaken) Clone() credentials.TransportCredentials { return h }
func (handshaken) OverrideServerName(string) error           { return nil }

// Table maps each full gRPC method name ("/pkg.Service/Method") to the
// roles allowed to call it.
type Table map[string][]Role

// Check returns an error naming every method of the services that has no
// entry in t, and every entry that is no method of theirs: a new RPC
// without roles fails its service's test.
func (t Table) Check(services ...grpc.ServiceDesc) error {
	seen := map[string]bool{}
	var missing, unknown []string
	for _, sd := range services {
		names := make([]string, 0, len(sd.Methods)+len(sd.Streams))
		for _, m := range sd.Methods {
			names = append(names, m.MethodName)
		}
		for _, st := range sd.Streams {
			names = append(names, st.StreamName)
		}
		for _, n := range names {
			full := "/" + sd.ServiceName + "/" + n
			seen[full] = true
			if len(t[full]) == 0 {
				missing = append(missing, full)
			}
		}
	}
	for m := range t {
		if !seen[m] {
			unknown = append(unknown, m)
		}
	}
	slices.Sort(missing)
	slices.Sort(unknown)
	if missing != nil || unknown != nil {
		return fmt.Errorf("tlsconf: roles table: methods without roles %v; entries that are no method %v", missing, unknown)
	}
	return nil
}

// authorize returns nil if the caller of ctx may call method, else a
// PERMISSION_DENIED status naming the call, the roles it needs and the
// caller's.
func (t Table) authorize(ctx context.Context, method string) error {
	call := path.Base(method)
	need := t[method]
	p, ok := peer.FromContext(ctx)
	if !ok {
		return denied("%s: no peer information; the call needs role %s", call, roleList(need))
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return denied("%s needs role %s over mutual TLS; the connection from %s is not TLS", call, roleList(need), p.Addr)
	}
	have := PeerRoles(info.State)
	for _, r := range have {
		if slices.Contains(need, r) {
			return nil
		}
	}
	if len(need) == 0 {
		return denied("%s: no role may call it (not in the server's roles table)", call)
	}
	who := "no verified certificate"
	if len(info.State.PeerCertificates) > 0 {
		who = "certificate " + Describe(info.State.PeerCertificates[0])
	}
	return denied("%s needs role %s; the caller from %s has %s", call, roleList(need), p.Addr, who)
}

// nodeNamed is a request that names the node making it.
type nodeNamed interface{ GetNode() string }

// bindNode refuses a node's call (a method t allows role node) whose
// request names a node the caller's certificate is not bound to, when the
// certificate is bound to any (NodesOf); a certificate bound to none may
// act as any node.
func (t Table) bindNode(ctx context.Context, method string, req any) error {
	nn, ok := req.(nodeNamed)
	if !ok || !slices.Contains(t[method], Node) {
		return nil
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return nil
	}
	cert := info.State.PeerCertificates[0]
	names := NodesOf(cert)
	if len(names) == 0 || slices.Contains(names, nn.GetNode()) {
		return nil
	}
	return denied("%s as node %q: the caller from %s has certificate %s, bound to node %s (SAN URI %s): %v",
		path.Base(method), nn.GetNode(), p.Addr, Describe(cert), strings.Join(names, ", "), NodeURI(names[0]), ErrWrongNode)
}

// boundStream checks every message a node's stream receives (bindNode).
type boundStream struct {
	grpc.ServerStream
	check func(m any) error
}

func (s *boundStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.check(m)
}

// denied is a PERMISSION_DENIED status carrying the tierstore code
// (errcode.ErrPermissionDenied on the caller's side).
func denied(format string, args ...any) error {
	return errcode.ToStatus(errcode.Errorf(errcode.PermissionDenied, format, args...))
}

func roleList(rs []Role) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = string(r)
	}
	return strings.Join(s, " or ")
}

// Interceptors are the unary and stream server interceptors that refuse a
// call whose caller's certificate names none of the roles t gives its
// method (PERMISSION_DENIED, naming the call and the roles it needs). A
// method t does not name is refused. Each refusal is logged on log (nil:
// not logged).
func (t Table) Interceptors(log *slog.Logger) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	check := func(ctx context.Context, method string) error {
		err := t.authorize(ctx, method)
		if err != nil && log != nil {
			log.Warn("call refused", "method", method, "err", err)
		}
		return err
	}
	bind := func(ctx context.Context, method string, req any) error {
		err := t.bindNode(ctx, method, req)
		if err != nil && log != nil {
			log.Warn("call refused", "method", method, "err", err)
		}
		return err
	}
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if err := check(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		if err := bind(ctx, info.FullMethod, req); err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if err := check(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return h(srv, &boundStream{ServerStream: ss, check: func(m any) error { return bind(ss.Context(), info.FullMethod, m) }})
	}
	return unary, stream
}

// ServerOptions are the gRPC server options of a server with TLS from s
// and the role checks of t: the transport credentials and both
// interceptors (chained after those the server installs itself, such as
// the protocol version check: a caller of another version learns only
// that). Refused handshakes are passed to hooks (ServerCredentials).
func (s *Source) ServerOptions(t Table, log *slog.Logger, hooks ...func(from net.Addr, err error)) []grpc.ServerOption {
	u, st := t.Interceptors(log)
	return []grpc.ServerOption{grpc.Creds(s.ServerCredentials(log, hooks...)), grpc.ChainUnaryInterceptor(u), grpc.ChainStreamInterceptor(st)}
}
