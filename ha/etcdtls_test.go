package ha

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strings"
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
