package tlsconf

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/tierstore/tierstore/internal/rpcpb"
)

type pki struct {
	t   *testing.T
	dir string
	ca  *CA
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	ca, err := NewCA("test ca", time.Hour)
	require.NoError(t, err)
	return &pki{t: t, dir: t.TempDir(), ca: ca}
}

func (p *pki) leaf(name string, roles ...Role) Leaf {
	p.t.Helper()
	l, err := p.ca.Issue(name, roles, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	require.NoError(p.t, err)
	return l
}

func (p *pki) files(name string, roles ...Role) Files {
	p.t.Helper()
	f, err := p.ca.WriteFiles(p.dir, name, p.leaf(name, roles...))
	require.NoError(p.t, err)
	return f
}

func (p *pki) source(name string, roles ...Role) *Source {
	p.t.Helper()
	s, err := Load(p.files(name, roles...))
	require.NoError(p.t, err)
	return s
}

// rawClient is a client config presenting leaf l (whatever its roles) and
// trusting p's CA for role want.
func (p *pki) rawClient(l *Leaf, want Role) *tls.Config {
	p.t.Helper()
	s := p.source("trust", Client)
	cfg := s.ClientConfig(want)
	if l == nil {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &tls.Certificate{}, nil }
		return cfg
	}
	cert, err := tls.X509KeyPair(l.CertPEM, l.KeyPEM)
	require.NoError(p.t, err)
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	return cfg
}

// echoServer accepts TLS connections with cfg and answers each first
// line with the subject of the certificate it used; handshake errors go to
// errs.
func echoServer(t *testing.T, cfg *tls.Config) (string, <-chan error) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { lis.Close() })
	errs := make(chan error, 16)
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				tc := tls.Server(c, cfg)
				_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
				if err := tc.Handshake(); err != nil {
					errs <- err
					return
				}
				var b [1]byte
				if _, err := tc.Read(b[:]); err != nil {
					errs <- err
					return
				}
				_, _ = tc.Write(b[:])
			}()
		}
	}()
	return lis.Addr().String(), errs
}

// roundTrip dials addr with cfg, sends one byte and reads it back; it
// returns the server's certificate's common name.
func roundTrip(addr string, cfg *tls.Config) (string, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte{7}); err != nil {
		return "", err
	}
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return "", err
	}
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
}

func serverErr(t *testing.T, errs <-chan error) error {
	t.Helper()
	select {
	case err := <-errs:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the server reported no error")
		return nil
	}
}

func TestMutualTLS(t *testing.T) {
	p := newPKI(t)
	srv := p.source("node1", Node)
	addr, errs := echoServer(t, srv.ServerConfig())

	good := p.source("client1", Client)
	cn, err := roundTrip(addr, good.ClientConfig(Node))
	require.NoError(t, err)
	require.Equal(t, "node1", cn)

	other := &pki{t: t, dir: t.TempDir()}
	other.ca, err = NewCA("other ca", time.Hour)
	require.NoError(t, err)
	expired, err := p.ca.Issue("old", []Role{Client}, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour))
	require.NoError(t, err)
	otherLeaf := other.leaf("stranger", Client)
	noRole := p.leaf("anonymous")

	for _, tc := range []struct {
		name       string
		cfg        *tls.Config
		client     string // in the client's error
		server     string // in the server's error
		serverSeen bool
	}{
		{"no certificate", p.rawClient(nil, Node), "certificate required", "didn't provide a certificate", true},
		{"other CA", p.rawClient(&otherLeaf, Node), "unknown certificate authority", "certificate signed by unknown authority", true},
		{"expired", p.rawClient(&expired, Node), "expired certificate", "certificate has expired", true},
		{"no role", p.rawClient(&noRole, Node), "bad certificate", "names no tierstore role", true},
		{"server of the wrong role", good.ClientConfig(Master), "does not name role master", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := roundTrip(addr, tc.cfg)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.client)
			if tc.serverSeen {
				require.Contains(t, serverErr(t, errs).Error(), tc.server)
			} else {
				require.ErrorIs(t, err, ErrWrongRole)
				<-errs // the server sees the client's alert
			}
		})
	}

	t.Run("server from another CA", func(t *testing.T) {
		osrv := other.source("imposter", Node)
		oaddr, oerrs := echoServer(t, osrv.ServerConfig())
		_, err := roundTrip(oaddr, good.ClientConfig(Node))
		require.ErrorIs(t, err, ErrUntrusted)
		require.Contains(t, err.Error(), "unknown authority")
		<-oerrs
	})
}

func TestLoadRefusesBadFiles(t *testing.T) {
	p := newPKI(t)
	f := p.files("n", Node)
	_, err := Load(Files{Cert: f.Cert, Key: f.Key})
	require.ErrorIs(t, err, ErrFiles)
	require.Contains(t, err.Error(), "missing --tls_ca")
	require.NoError(t, Files{}.Check())

	nr, err := p.ca.WriteFiles(p.dir, "norole", p.leaf("norole"))
	require.NoError(t, err)
	_, err = Load(nr)
	require.ErrorIs(t, err, ErrNoRole)

	other := p.files("other", Node)
	_, err = Load(Files{Cert: f.Cert, Key: other.Key, CA: f.CA})
	require.ErrorIs(t, err, ErrFiles)
	require.Contains(t, err.Error(), "--tls_key")

	require.NoError(t, os.WriteFile(p.dir+"/empty.crt", []byte("nothing"), 0o644))
	_, err = Load(Files{Cert: f.Cert, Key: f.Key, CA: p.dir + "/empty.crt"})
	require.ErrorIs(t, err, ErrFiles)
	require.Contains(t, err.Error(), "no PEM certificate")

	s := p.source("m", Master)
	require.NoError(t, s.NeedRole(Master))
	require.ErrorIs(t, s.NeedRole(Node), ErrWrongRole)
}

func TestRolesOf(t *testing.T) {
	p := newPKI(t)
	s := p.source("both", Node, Master, Node)
	require.Equal(t, []Role{Node, Master}, s.Roles())
	require.Equal(t, "tierstore://role/client", Client.URI().String())
}

// TestRotation replaces the server's certificate, then the CA, on disk
// while the server runs: new handshakes use the new files; a half-done
// rotation (certificate written, key not yet) keeps the old pair in use.
func TestRotation(t *testing.T) {
	p := newPKI(t)
	srv := p.source("node-a", Node)
	addr, _ := echoServer(t, srv.ServerConfig())
	cli := p.source("client", Client)

	cn, err := roundTrip(addr, cli.ClientConfig(Node))
	require.NoError(t, err)
	require.Equal(t, "node-a", cn)
	n0, _ := srv.Reloads() // ca.crt was rewritten since Load (the client's files)

	// A new pair under the same paths, the certificate first.
	b := p.leaf("node-b", Node)
	require.NoError(t, WriteFileAtomic(p.dir+"/node-a.crt", b.CertPEM, 0o644))
	cn, err = roundTrip(addr, cli.ClientConfig(Node))
	require.NoError(t, err, "a half-written rotation must not fail a handshake")
	require.Equal(t, "node-a", cn)
	n, lastErr := srv.Reloads()
	require.Equal(t, n0, n)
	require.ErrorIs(t, lastErr, ErrFiles)

	// The key in place (rewritten, same inode: the stamp's size or time).
	require.NoError(t, os.WriteFile(p.dir+"/node-a.key", b.KeyPEM, 0o600))
	future := time.Now().Add(time.Second)
	require.NoError(t, os.Chtimes(p.dir+"/node-a.key", future, future))
	cn, err = roundTrip(addr, cli.ClientConfig(Node))
	require.NoError(t, err)
	require.Equal(t, "node-b", cn)
	n, lastErr = srv.Reloads()
	require.Equal(t, n0+1, n)
	require.NoError(t, lastErr)

	// A new CA: the server trusts only it; the old client certificate is
	// refused, one from the new CA accepted.
	ca2, err := NewCA("ca 2", time.Hour)
	require.NoError(t, err)
	srvLeaf, err := ca2.Issue("node-c", []Role{Node}, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	require.NoError(t, err)
	_, err = ca2.WriteFiles(p.dir, "node-a", srvLeaf)
	require.NoError(t, err)
	_, err = roundTrip(addr, cli.ClientConfig(Node))
	require.Error(t, err)
	require.Contains(t, err.Error(), "unknown certificate authority", "the server trusts the new CA only: the client's certificate of the old one is refused")

	cliLeaf, err := ca2.Issue("client2", []Role{Client}, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	require.NoError(t, err)
	cf, err := ca2.WriteFiles(t.TempDir(), "client2", cliLeaf)
	require.NoError(t, err)
	cli2, err := Load(cf)
	require.NoError(t, err)
	cn, err = roundTrip(addr, cli2.ClientConfig(Node))
	require.NoError(t, err)
	require.Equal(t, "node-c", cn)
}

// peerServer answers NodeStats.
type peerServer struct{ pb.UnimplementedNodePeerServer }

func (peerServer) NodeStats(context.Context, *pb.PeerStatsRequest) (*pb.PeerStatsReply, error) {
	return &pb.PeerStatsReply{Segment: "seg"}, nil
}

func TestInterceptorRefusesWrongRole(t *testing.T) {
	p := newPKI(t)
	srv := p.source("node", Node)
	table := Table{"/tierstore.node.v1.NodePeer/NodeStats": {Master, Node}}
	require.NoError(t, table.Check(pb.NodePeer_ServiceDesc))
	gs := grpc.NewServer(srv.ServerOptions(table, nil)...)
	pb.RegisterNodePeerServer(gs, peerServer{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)

	call := func(s *Source) error {
		cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(s.ClientCredentials(Node)))
		require.NoError(t, err)
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = pb.NewNodePeerClient(cc).NodeStats(ctx, &pb.PeerStatsRequest{})
		return err
	}
	require.NoError(t, call(p.source("master", Master)))
	err = call(p.source("client", Client))
	require.Equal(t, codes.PermissionDenied, status.Code(err))
	require.Contains(t, err.Error(), "NodeStats needs role master or node")
	require.Contains(t, err.Error(), "roles [client]")

	// A method the table does not name is refused.
	empty := Table{}
	require.Error(t, empty.Check(pb.NodePeer_ServiceDesc))
	err = empty.authorize(context.Background(), "/x/Y")
	require.Equal(t, codes.PermissionDenied, status.Code(err))
}

func TestTableCheck(t *testing.T) {
	full := Table{"/tierstore.node.v1.NodePeer/NodeStats": {Client}}
	require.NoError(t, full.Check(pb.NodePeer_ServiceDesc))
	extra := Table{"/tierstore.node.v1.NodePeer/NodeStats": {Client}, "/tierstore.node.v1.NodePeer/Gone": {Client}}
	err := extra.Check(pb.NodePeer_ServiceDesc)
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "Gone"))
	require.False(t, errors.Is(err, ErrFiles))
	require.True(t, bytes.Contains([]byte(err.Error()), []byte("no method")))
}

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:1": true, "localhost:2": true, "[::1]:3": true, "127.0.0.1": true,
		"0.0.0.0:1": false, ":1": false, "10.1.2.3:4": false, "node7:5": false, "[::]:6": false,
	} {
		if Loopback(addr) != want {
			t.Errorf("Loopback(%q) = %v", addr, !want)
		}
	}
}

// TestRotationUnderLiveTraffic rotates the server's and the client's
// certificates (file by file, as an operator's copy does) while callers
// make calls on a long-lived connection and on a new connection per call:
// no call fails, and the new certificates are in use at the end.
func TestRotationUnderLiveTraffic(t *testing.T) {
	p := newPKI(t)
	srvFiles := p.files("node-0", Node)
	srv, err := Load(srvFiles)
	require.NoError(t, err)
	gs := grpc.NewServer(srv.ServerOptions(Table{"/tierstore.node.v1.NodePeer/NodeStats": {Client}}, nil)...)
	pb.RegisterNodePeerServer(gs, peerServer{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	cliFiles := p.files("client-0", Client)
	cli, err := Load(cliFiles)
	require.NoError(t, err)

	call := func(cc *grpc.ClientConn) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := pb.NewNodePeerClient(cc).NodeStats(ctx, &pb.PeerStatsRequest{})
		return err
	}
	dial := func() *grpc.ClientConn {
		cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(cli.ClientCredentials(Node)))
		require.NoError(t, err)
		return cc
	}
	long := dial()
	defer long.Close()

	stop := make(chan struct{})
	errs := make(chan error, 4)
	calls := make(chan int, 4)
	for w := 0; w < 2; w++ {
		go func(fresh bool) {
			n := 0
			for i := 0; i < 10000; i++ { // bounded; stops when the rotations are done
				select {
				case <-stop:
					calls <- n
					errs <- nil
					return
				default:
				}
				cc := long
				if fresh {
					cc = dial()
				}
				err := call(cc)
				if fresh {
					cc.Close()
				}
				if err != nil {
					calls <- n
					errs <- err
					return
				}
				n++
			}
			calls <- n
			errs <- nil
		}(w == 1)
	}
	for r := 1; r <= 5; r++ {
		l := p.leaf("node-"+strconv.Itoa(r), Node)
		require.NoError(t, WriteFileAtomic(srvFiles.Cert, l.CertPEM, 0o644))
		time.Sleep(5 * time.Millisecond) // not synchronisation: widens the half-done window the callers may hit
		require.NoError(t, WriteFileAtomic(srvFiles.Key, l.KeyPEM, 0o600))
		c := p.leaf("client-"+strconv.Itoa(r), Client)
		require.NoError(t, WriteFileAtomic(cliFiles.Cert, c.CertPEM, 0o644))
		require.NoError(t, WriteFileAtomic(cliFiles.Key, c.KeyPEM, 0o600))
		require.NoError(t, call(long))
	}
	close(stop)
	total := 0
	for w := 0; w < 2; w++ {
		require.NoError(t, <-errs, "a call failed during rotation")
		total += <-calls
	}
	require.Positive(t, total)
	cc := dial()
	defer cc.Close()
	require.NoError(t, call(cc))
	require.Equal(t, "node-5", srv.Leaf().Subject.CommonName)
	require.Equal(t, "client-5", cli.Leaf().Subject.CommonName)
}
