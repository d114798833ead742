package ha

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierstore/tierstore/ha/hatest"
	"github.com/tierstore/tierstore/internal/tlsconf"
)

func etcdTLSOf(f tlsconf.Files) EtcdTLS { return EtcdTLS{CA: f.CA, Cert: f.Cert, Key: f.Key} }

// An HA master campaigns over etcd TLS and a resolver given the etcd://
// address with ?ca=&cert=&key= finds it; clients without a certificate,
// with one of another CA, or in plaintext are refused by etcd.
func TestEtcdTLS(t *testing.T) {
	etcd, is := hatest.StartTLS(t)
	files := etcdTLSOf(is.Client(t, "master1"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // a bound, not a speed check
	defer cancel()
	l, err := Campaign(ctx, Config{Endpoints: etcd.Endpoints(), Address: "127.0.0.1:7001", SessionTTL: testTTL, TLS: files, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("campaign over etcd TLS: %v", err)
	}
	defer l.Resign(context.Background())

	cf := is.Client(t, "client1")
	addr := etcd.MasterURL() + "&" + url.Values{"cert": {cf.Cert}, "key": {cf.Key}}.Encode()
	u, err := ParseMasterURL(addr)
	if err != nil {
		t.Fatal(err)
	}
	if u.TLS != etcdTLSOf(cf) {
		t.Fatalf("parsed TLS files %+v, want %+v", u.TLS, cf)
	}
	if again, err := ParseMasterURL(u.String()); err != nil || again.TLS != u.TLS {
		t.Fatalf("String() %q does not parse back: %+v, %v", u.String(), again, err)
	}
	r, err := NewResolver(u, ResolverOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ld, err := r.WaitLeader(ctx)
	if err != nil || ld.Addr != "127.0.0.1:7001" || ld.Term != l.Term() {
		t.Fatalf("resolver over etcd TLS: %+v, %v; want 127.0.0.1:7001 term %d", ld, err, l.Term())
	}

	other, err := tlsconf.NewCA("other ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := other.Issue("intruder", []tlsconf.Role{tlsconf.Client}, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	of, err := other.WriteFiles(t.TempDir(), "intruder", leaf)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		files EtcdTLS
	}{
		{"no client certificate", EtcdTLS{CA: files.CA}},
		{"a certificate of another CA", EtcdTLS{CA: files.CA, Cert: of.Cert, Key: of.Key}},
		{"plaintext", EtcdTLS{}},
	} {
		cli, err := newClient(etcd.Endpoints(), time.Second, c.files)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		gctx, gcancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = cli.Get(gctx, DefaultPrefix)
		gcancel()
		cli.Close()
		if err == nil {
			t.Errorf("%s: etcd answered a read; want it refused", c.name)
		} else {
			t.Logf("%s: refused: %v", c.name, err)
		}
	}
}

// Bad etcd TLS settings are refused with ErrBadMasterURL / ErrConfig,
// naming what is wrong.
func TestEtcdTLSBadSettings(t *testing.T) {
	for _, c := range []struct{ url, want string }{
		{"etcd://h:2379?cert=c&key=k", "CA"},
		{"etcd://h:2379?ca=a&cert=c", "both cert and key"},
		{"etcd://h:2379?ca=a&pass=x", `unknown query parameter "pass"`},
		{"etcd://h:2379?ca=a&ca=b", `"ca": give it once`},
		{"etcd://h:2379?", "empty query"},
		{"etcd://h:2379#x", "fragment"},
	} {
		_, err := ParseMasterURL(c.url)
		if !errors.Is(err, ErrBadMasterURL) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrBadMasterURL naming %q", c.url, err, c.want)
		}
	}
	_, err := Campaign(context.Background(), Config{Endpoints: []string{"127.0.0.1:1"}, Address: "127.0.0.1:2", TLS: EtcdTLS{Cert: "c", Key: "k"}})
	if !errors.Is(err, ErrConfig) {
		t.Errorf("campaign with cert and key but no CA: %v, want ErrConfig", err)
	}
	_, err = Campaign(context.Background(), Config{Endpoints: []string{"127.0.0.1:1"}, Address: "127.0.0.1:2", TLS: EtcdTLS{CA: "/nonexistent/ca.crt"}})
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "/nonexistent/ca.crt") {
		t.Errorf("campaign with a missing CA file: %v, want ErrConfig naming the file", err)
	}
}

// TestEtcdTLSRotation: the etcd client's TLS files are re-read when they
// change, without a restart. A TLS server on loopback stands for etcd (it
// records the client certificate of each handshake); one tls.Config from
// EtcdTLS.config serves every handshake, as the etcd client's does.
func TestEtcdTLSRotation(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	ca1, err := tlsconf.NewCA("etcd ca 1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ca2, err := tlsconf.NewCA("etcd ca 2", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(ca *tlsconf.CA, name string) tls.Certificate {
		t.Helper()
		l, err := ca.Issue(name, []tlsconf.Role{tlsconf.Client}, now.Add(-time.Minute), now.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		pair, err := tls.X509KeyPair(l.CertPEM, l.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return pair
	}
	write := func(ca *tlsconf.CA, name string) tlsconf.Files {
		t.Helper()
		l, err := ca.Issue(name, []tlsconf.Role{tlsconf.Client}, now.Add(-time.Minute), now.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		f, err := ca.WriteFiles(dir, "client", l)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}

	// The server: its certificate is switchable; it trusts clients of
	// either CA and reports each handshake's client certificate name.
	var serverCert atomic.Pointer[tls.Certificate]
	s1 := issue(ca1, "etcd server 1")
	serverCert.Store(&s1)
	clients := x509.NewCertPool()
	clients.AddCert(ca1.Cert)
	clients.AddCert(ca2.Cert)
	lis, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		MinVersion:     tls.VersionTLS12,
		ClientAuth:     tls.RequireAndVerifyClientCert,
		ClientCAs:      clients,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return serverCert.Load(), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	seen := make(chan string, 1)
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			if tc.Handshake() == nil {
				seen <- tc.ConnectionState().PeerCertificates[0].Subject.CommonName
			} else {
				seen <- ""
			}
			c.Close()
		}
	}()

	f := write(ca1, "client A")
	cfg, err := etcdTLSOf(f).config([]string{lis.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	// handshake returns the client certificate the server saw, or the
	// client's handshake error.
	handshake := func(serverName string) (string, error) {
		t.Helper()
		c := cfg.Clone()
		c.ServerName = serverName
		conn, err := tls.Dial("tcp", lis.Addr().String(), c)
		if err != nil {
			<-seen // the server's side of the failed handshake
			return "", err
		}
		defer conn.Close()
		return <-seen, nil
	}
	expect := func(step, want string) {
		t.Helper()
		got, err := handshake("127.0.0.1")
		if err != nil || got != want {
			t.Fatalf("%s: handshake presented %q, %v; want %q", step, got, err, want)
		}
	}
	expect("first handshake", "client A")

	write(ca1, "client B") // the client certificate and key rotated
	expect("after rotating the client certificate", "client B")

	// A half-written rotation: a new certificate whose key is not there
	// yet keeps the previous pair in use.
	half, err := ca1.Issue("client C", []tlsconf.Role{tlsconf.Client}, now.Add(-time.Minute), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := tlsconf.WriteFileAtomic(f.Cert, half.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	expect("with the certificate rotated but not its key", "client B")
	if err := tlsconf.WriteFileAtomic(f.Key, half.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	expect("with the key following", "client C")

	// etcd's certificate now comes from another CA: refused until the CA
	// file names it.
	s2 := issue(ca2, "etcd server 2")
	serverCert.Store(&s2)
	if _, err := handshake("127.0.0.1"); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("a server certificate of a CA the file does not name: %v, want unknown authority", err)
	}
	write(ca2, "client D")
	expect("after rotating the CA", "client D")

	// Host names are checked as crypto/tls would.
	if _, err := handshake("etcd.example"); err == nil || !strings.Contains(err.Error(), "etcd.example") {
		t.Fatalf("a server name the certificate does not hold: %v, want a refusal naming it", err)
	}
}
