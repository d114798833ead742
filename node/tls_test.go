package node

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/rpcpb"
	"github.com/tierstore/tierstore/internal/tlsconf"
	"github.com/tierstore/tierstore/internal/wire"
	"github.com/tierstore/tierstore/master"
	"github.com/tierstore/tierstore/mastergrpc"
)

type testPKI struct {
	t   testing.TB
	ca  *tlsconf.CA
	dir string
}

func (p *testPKI) files(name string, roles ...tlsconf.Role) tlsconf.Files {
	p.t.Helper()
	l, err := p.ca.Issue(name, roles, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	if err != nil {
		p.t.Fatal(err)
	}
	f, err := p.ca.WriteFiles(p.dir, name, l)
	if err != nil {
		p.t.Fatal(err)
	}
	return f
}

func (p *testPKI) source(name string, roles ...tlsconf.Role) *tlsconf.Source {
	p.t.Helper()
	s, err := tlsconf.Load(p.files(name, roles...))
	if err != nil {
		p.t.Fatal(err)
	}
	return s
}

// TestNodeOverTLS runs a master and a node with mutual TLS and a client
// with a client certificate: puts and gets work over the TLS data plane
// and the node's gRPC service answers over TLS on the same port; a peer
// whose certificate is not a client's is refused the data plane with
// PERMISSION_DENIED naming the role, and a plaintext peer gets no answer.
func TestNodeOverTLS(t *testing.T) {
	ca, err := tlsconf.NewCA("test ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{t: t, ca: ca, dir: t.TempDir()}
	m := newMaster(t, testMasterConfig())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := master.NewServer(m, p.source("master", tlsconf.Master).ServerOptions(master.Roles, quiet)...)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	nodeSrc := p.source("node", tlsconf.Node)
	mc, err := mastergrpc.Dial(context.Background(), lis.Addr().String(), grpc.WithTransportCredentials(nodeSrc.ClientCredentials(tlsconf.Master)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mc.Close() })
	cfg := testNodeConfig("127.0.0.1:0")
	cfg.TLS = nodeSrc
	n, err := Start(context.Background(), cfg, mc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })

	cl := newTestClient(t, client.Config{MasterAddr: lis.Addr().String(), TLS: p.files("client", tlsconf.Client)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	val := rnd(3*writeChunk + 7)
	if err := cl.Put(ctx, "k", val); err != nil {
		t.Fatal(err)
	}
	got, err := cl.Get(ctx, "k")
	if err != nil || !bytes.Equal(got, val) {
		t.Fatalf("get over TLS: %v", err)
	}
	if n.Stats().PeerWrites != 1 || n.Stats().PeerReadsDRAM != 1 {
		t.Fatalf("the value did not travel over the node's data plane: %+v", n.Stats())
	}
	cliSrc := p.source("client2", tlsconf.Client)
	if ps, err := PeerStats(ctx, n.Endpoint(), grpc.WithTransportCredentials(cliSrc.ClientCredentials(tlsconf.Node))); err != nil || ps.Segment != n.SegmentName() {
		t.Fatalf("NodeStats over TLS: %+v %v", ps, err)
	}
	info, err := cl.Master().GetReplicaList(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	rep := info.Replicas[0]

	// A master's certificate on the data plane: the TLS handshake passes
	// (a verified certificate with a role), every request is refused.
	dc, err := wire.DialDataTLS(ctx, n.Endpoint(), 5*time.Second, p.source("master2", tlsconf.Master).ClientConfig(tlsconf.Node))
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	buf := make([]byte, rep.Length)
	err = dc.ReadRange(ctx, rep.Segment, int64(rep.Offset), buf, info.CRC)
	if !errors.Is(err, errcode.ErrPermissionDenied) || !strings.Contains(err.Error(), "needs role client") {
		t.Fatalf("a master reading a range: want PERMISSION_DENIED naming role client, got %v", err)
	}
	// A client's certificate on the same connection shape reads it.
	dc2, err := wire.DialDataTLS(ctx, n.Endpoint(), 5*time.Second, cliSrc.ClientConfig(tlsconf.Node))
	if err != nil {
		t.Fatal(err)
	}
	defer dc2.Close()
	if err := dc2.ReadRange(ctx, rep.Segment, int64(rep.Offset), buf, info.CRC); err != nil || !bytes.Equal(buf, val) {
		t.Fatalf("a client reading a range: %v", err)
	}
	// Plaintext on a TLS port: refused.
	if _, err := wire.DialData(ctx, n.Endpoint(), 2*time.Second); err == nil {
		t.Fatal("a plaintext data connection to a TLS node was accepted")
	}
}

// TestNodeRolesCoverEveryMethod: every method of the node's gRPC service
// has roles; a new RPC without an entry fails here.
func TestNodeRolesCoverEveryMethod(t *testing.T) {
	if err := Roles.Check(rpcpb.NodePeer_ServiceDesc); err != nil {
		t.Fatal(err)
	}
}

// TestNodeNamedByCertificate: a node whose certificate is bound to one
// node name (tierstore://node/NAME) takes that name; a name given, or kept
// in --ssd_dir's NODE_ID, that the certificate does not allow stops the
// start with ErrBadNodeID naming both (the master would refuse its calls).
func TestNodeNamedByCertificate(t *testing.T) {
	ca, err := tlsconf.NewCA("test ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bound := func(file string, nodes ...string) *tlsconf.Source {
		s, err := ca.Source(dir, file, []tlsconf.Role{tlsconf.Node}, nodes...)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	m := newMaster(t, testMasterConfig())
	ctx := context.Background()
	cfg := testNodeConfig("127.0.0.1:0")
	cfg.TLS = bound("n1", "n1")
	n, err := Start(ctx, cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	if n.Name() != "n1" {
		t.Fatalf("node named %q, its certificate n1", n.Name())
	}
	n.Close()
	refused := func(err error, want ...string) {
		t.Helper()
		if !errors.Is(err, ErrBadNodeID) {
			t.Fatalf("want ErrBadNodeID, got %v", err)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("%q does not say %q", err, w)
			}
		}
	}
	_, err = Start(ctx, cfg, m, WithName("n2"))
	refused(err, `"n2"`, "bound to node n1")

	ssd := t.TempDir()
	if err := os.WriteFile(filepath.Join(ssd, nodeIDFile), []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	withDir := cfg
	withDir.EnableOffload, withDir.SSDDir, withDir.Backend = true, ssd, "pwrite"
	_, err = Start(ctx, withDir, m)
	refused(err, `"old"`, nodeIDFile, "bound to node n1")

	two := cfg
	two.TLS = bound("n1n3", "n1", "n3")
	_, err = Start(ctx, two, m)
	refused(err, "bound to node n1, n3")
	n, err = Start(ctx, two, m, WithName("n3"))
	if err != nil {
		t.Fatalf("a name among the certificate's: %v", err)
	}
	n.Close()
}
