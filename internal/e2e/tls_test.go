package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/tlsconf"
	"github.com/tierstore/tierstore/internal/wire"
	"github.com/tierstore/tierstore/masterapi"
	"github.com/tierstore/tierstore/mastergrpc"
)

// identities writes the certificates of a TLS cluster into a temporary
// directory: master, node and client of the cluster's CA; a node-role and
// a master-role certificate used as callers of the wrong role; an expired
// client; a client of another CA (its --tls_ca is the cluster's, so it
// trusts the servers and only the servers refuse it).
type identities struct {
	ca                               *tlsconf.CA
	master, node, client             tlsconf.Files
	nodeRole, masterRole             tlsconf.Files
	expired, otherCA                 tlsconf.Files
	masterFlags, nodeFlags, cliFlags []string
}

func tlsFlags(f tlsconf.Files) []string {
	return []string{"--tls_cert=" + f.Cert, "--tls_key=" + f.Key, "--tls_ca=" + f.CA}
}

func newIdentities(t *testing.T) *identities {
	t.Helper()
	dir := t.TempDir()
	ca, err := tlsconf.NewCA("e2e ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	issue := func(ca *tlsconf.CA, name string, from, to time.Time, roles ...tlsconf.Role) tlsconf.Files {
		l, err := ca.Issue(name, roles, from, to)
		if err != nil {
			t.Fatal(err)
		}
		f, err := ca.WriteFiles(dir, name, l)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	valid := func(name string, roles ...tlsconf.Role) tlsconf.Files {
		return issue(ca, name, now.Add(-time.Minute), now.Add(time.Hour), roles...)
	}
	id := &identities{ca: ca,
		master: valid("master", tlsconf.Master), node: valid("node", tlsconf.Node), client: valid("client", tlsconf.Client),
		nodeRole: valid("node2", tlsconf.Node), masterRole: valid("master2", tlsconf.Master),
		expired: issue(ca, "expired", now.Add(-2*time.Hour), now.Add(-time.Hour), tlsconf.Client),
	}
	other, err := tlsconf.NewCA("other ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	od := filepath.Join(dir, "other")
	if err := os.Mkdir(od, 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := other.Issue("stranger", []tlsconf.Role{tlsconf.Client}, now.Add(-time.Minute), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	of, err := other.WriteFiles(od, "stranger", l)
	if err != nil {
		t.Fatal(err)
	}
	id.otherCA = tlsconf.Files{Cert: of.Cert, Key: of.Key, CA: id.client.CA}
	id.masterFlags, id.nodeFlags, id.cliFlags = tlsFlags(id.master), tlsFlags(id.node), tlsFlags(id.client)
	return id
}

// noCertConfig is a TLS client that trusts the cluster's CA but presents
// no certificate.
func noCertConfig(t *testing.T, id *identities, want tlsconf.Role) *tls.Config {
	t.Helper()
	src, err := tlsconf.Load(id.client)
	if err != nil {
		t.Fatal(err)
	}
	cfg := src.ClientConfig(want)
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &tls.Certificate{}, nil }
	return cfg
}

func loadSource(t *testing.T, f tlsconf.Files) *tlsconf.Source {
	t.Helper()
	s, err := tlsconf.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// waitOutput waits (bounded) until p printed s.
func waitOutput(t *testing.T, p *proc, s string) {
	t.Helper()
	if err := p.WaitOutput(s, 10*time.Second); err != nil {
		t.Fatalf("%s did not log %q: %v", p.Name, s, err)
	}
}

// TestMutualTLSCluster runs a master, a node and the CLI with mutual TLS:
// the right certificates put and get; a caller without a certificate, with
// one of another CA, with an expired one, or of the wrong role is refused
// on the master's port and on the node's (data plane), with a message on
// the caller's side and a log line on the server's.
func TestMutualTLSCluster(t *testing.T) {
	id := newIdentities(t)
	m := startMaster(t, 0, id.masterFlags...)
	n := startNode(t, m.Addr, "", id.nodeFlags...)
	if strings.Contains(m.Output()+n.Output(), "serving without TLS") {
		t.Fatal("a process with TLS warned that it serves without it")
	}

	in := filepath.Join(t.TempDir(), "v")
	val := randomValue(300 << 10)
	if err := os.WriteFile(in, val, 0o644); err != nil {
		t.Fatal(err)
	}
	args := func(op string, f []string, rest ...string) []string {
		return append(append([]string{op, "--master", m.Addr, "--timeout", "20s"}, f...), rest...)
	}
	if _, e, code := cli(t, args("put", id.cliFlags, "k", in)...); code != 0 {
		t.Fatalf("put over TLS: exit %d: %s", code, e)
	}
	out := filepath.Join(t.TempDir(), "out")
	if _, e, code := cli(t, args("get", id.cliFlags, "k", out)...); code != 0 {
		t.Fatalf("get over TLS: exit %d: %s", code, e)
	}
	if got, err := os.ReadFile(out); err != nil || !bytes.Equal(got, val) {
		t.Fatalf("get over TLS returned other bytes: %v", err)
	}

	// The master's port, through the CLI.
	for _, tc := range []struct {
		name   string
		flags  []string
		client string // in the CLI's stderr
		server string // in the master's log
	}{
		{"plaintext", nil, "does it require mutual TLS", "first record does not look like a TLS handshake"},
		{"other CA", tlsFlags(id.otherCA), "unknown certificate authority", "certificate signed by unknown authority"},
		{"expired", tlsFlags(id.expired), "expired certificate", "certificate has expired"},
		{"wrong role", tlsFlags(id.nodeRole), "does not name role client", ""},
	} {
		t.Run("master/"+tc.name, func(t *testing.T) {
			_, e, code := cli(t, args("exists", tc.flags, "k")...)
			if code == 0 || !strings.Contains(e, tc.client) {
				t.Fatalf("exit %d, stderr %q: want a failure saying %q", code, e, tc.client)
			}
			if tc.server != "" {
				waitOutput(t, m, tc.server)
			}
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Run("master/no certificate", func(t *testing.T) {
		c, err := mastergrpc.Dial(ctx, m.Addr, grpc.WithTransportCredentials(credentials.NewTLS(noCertConfig(t, id, tlsconf.Master))))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, err = c.ExistKey(ctx, "k")
		if err == nil || !strings.Contains(err.Error(), "certificate required") {
			t.Fatalf("want the TLS alert 'certificate required', got %v", err)
		}
		waitOutput(t, m, "didn't provide a certificate")
	})
	t.Run("master/a node's certificate on client calls", func(t *testing.T) {
		c, err := mastergrpc.Dial(ctx, m.Addr, grpc.WithTransportCredentials(loadSource(t, id.nodeRole).ClientCredentials(tlsconf.Master)))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, err = c.RemoveAll(ctx, true)
		if !errors.Is(err, errcode.ErrPermissionDenied) || !strings.Contains(err.Error(), "RemoveAll needs role client") {
			t.Fatalf("want PERMISSION_DENIED naming RemoveAll and role client, got %v", err)
		}
		waitOutput(t, m, "call refused")
	})
	t.Run("master/a client's certificate on node calls", func(t *testing.T) {
		c, err := mastergrpc.Dial(ctx, m.Addr, grpc.WithTransportCredentials(loadSource(t, id.client).ClientCredentials(tlsconf.Master)))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		err = c.MountSegment(ctx, masterapi.MountRequest{Node: "intruder", Endpoint: "127.0.0.1:1", Segment: "s", Size: 1 << 20})
		if !errors.Is(err, errcode.ErrPermissionDenied) || !strings.Contains(err.Error(), "MountSegment needs role node") {
			t.Fatalf("want PERMISSION_DENIED naming MountSegment and role node, got %v", err)
		}
	})

	// The node's port: the data plane.
	cl, err := client.New(ctx, client.Config{MasterAddr: m.Addr, TLS: id.client})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	info, err := cl.Master().GetReplicaList(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	rep := info.Replicas[0]
	read := func(cfg *tls.Config) error {
		dc, err := wire.DialDataTLS(ctx, rep.Endpoint, 5*time.Second, cfg)
		if err != nil {
			return err
		}
		defer dc.Close()
		return dc.ReadRange(ctx, rep.Segment, int64(rep.Offset), make([]byte, rep.Length), info.CRC)
	}
	if err := read(loadSource(t, id.client).ClientConfig(tlsconf.Node)); err != nil {
		t.Fatalf("a client reads its range over TLS: %v", err)
	}
	for _, tc := range []struct {
		name           string
		cfg            *tls.Config
		client, server string
	}{
		{"plaintext", nil, "hello", "first record does not look like a TLS handshake"},
		{"no certificate", noCertConfig(t, id, tlsconf.Node), "certificate required", "didn't provide a certificate"},
		{"other CA", loadSource(t, id.otherCA).ClientConfig(tlsconf.Node), "unknown certificate authority", "certificate signed by unknown authority"},
		{"expired", loadSource(t, id.expired).ClientConfig(tlsconf.Node), "expired certificate", "certificate has expired"},
		{"wrong role", loadSource(t, id.masterRole).ClientConfig(tlsconf.Node), "needs role client", "data connection refused"},
	} {
		t.Run("node/"+tc.name, func(t *testing.T) {
			err := read(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.client) {
				t.Fatalf("want a refusal saying %q, got %v", tc.client, err)
			}
			waitOutput(t, n, tc.server)
		})
	}
	if err := read(loadSource(t, id.client).ClientConfig(tlsconf.Master)); err == nil || !errors.Is(err, errcode.ErrRPCFail) || !strings.Contains(err.Error(), "does not name role master") {
		t.Fatalf("a client expecting a master at a node's port: %v", err)
	}
}

// TestPlaintextWarnsOnRoutableAddress: a master binding every interface
// without TLS says so once at start; on loopback it does not.
func TestPlaintextWarnsOnRoutableAddress(t *testing.T) {
	m := start(t, "tierstore-master", "--rpc_address=0.0.0.0", "--rpc_port=0", "--metrics_port=0")
	waitOutput(t, m, "serving without TLS on a non-loopback address")
	if c := strings.Count(m.Output(), "serving without TLS"); c != 1 {
		t.Fatalf("the warning appears %d times", c)
	}
	lo := startMaster(t, 0)
	if strings.Contains(lo.Output(), "serving without TLS") {
		t.Fatal("a loopback master warned")
	}
}
