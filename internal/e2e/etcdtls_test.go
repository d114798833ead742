package e2e

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/cluster"
	"github.com/tierstore/tierstore/internal/tlsconf"
)

// HA over etcd TLS with real processes: a tierstore-etcd serving client
// TLS (client certificates required), a master campaigning with
// --etcd_tls_*, a node, the Go client and the CLI finding the leader at
// etcd://...?ca=&cert=&key=; a master without the etcd TLS flags never
// leads, and the CLI without a certificate is refused.
func TestHAOverEtcdTLS(t *testing.T) {
	ca, err := tlsconf.NewCA("e2e etcd ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	issue := func(name string) tlsconf.Files {
		l, err := ca.Issue(name, []tlsconf.Role{tlsconf.Client}, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		f, err := ca.WriteFiles(dir, name, l)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	ef, mf, cf := issue("etcd"), issue("master1"), issue("app")
	etcd := start(t, "tierstore-etcd", append(cluster.EtcdArgs(t.TempDir(), 0), "--tls_cert", ef.Cert, "--tls_key", ef.Key, "--tls_ca", ef.CA)...)
	if !strings.Contains(etcd.Output(), "master=etcd://"+etcd.Addr+"?ca=") {
		t.Fatalf("tierstore-etcd with TLS does not print a master URL carrying its CA:\n%s", etcd.Output())
	}
	// The master without etcd TLS first: it must never lead.
	plain := start(t, "tierstore-master", cluster.HAMasterArgs(etcd.Addr)...)
	m := start(t, "tierstore-master", cluster.HAMasterArgs(etcd.Addr,
		"--etcd_tls_ca="+mf.CA, "--etcd_tls_cert="+mf.Cert, "--etcd_tls_key="+mf.Key)...)
	withTLS := "etcd://" + etcd.Addr + "?" + url.Values{"ca": {cf.CA}, "cert": {cf.Cert}, "key": {cf.Key}}.Encode()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // a bound, not a speed check
	defer cancel()
	l, err := cluster.WaitLeader(ctx, withTLS, 0)
	if err != nil {
		t.Fatal(err)
	}
	if l.Addr != m.Addr {
		t.Fatalf("leader %s, want the master with etcd TLS (%s); the one without is %s", l.Addr, m.Addr, plain.Addr)
	}
	if err := m.WaitOutput("leading term=", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	startNode(t, withTLS, "")
	c := newClient(t, withTLS, "")
	val := bytes.Repeat([]byte("etcd tls "), 1000)
	for {
		err := c.Put(ctx, "k", val)
		if err == nil {
			break
		}
		if ctx.Err() != nil { // the node mounts within its first heartbeat
			t.Fatalf("put through etcd TLS: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // a bounded retry until the node has mounted
	}
	if got, err := c.Get(ctx, "k"); err != nil || !bytes.Equal(got, val) {
		t.Fatalf("get through etcd TLS: %d bytes, %v", len(got), err)
	}
	out := filepath.Join(t.TempDir(), "out")
	if _, e, code := cli(t, "get", "--master", withTLS, "k", out); code != 0 {
		t.Fatalf("tierstore get --master %s: exit %d: %s", withTLS, code, e)
	}
	if got, err := os.ReadFile(out); err != nil || !bytes.Equal(got, val) {
		t.Fatalf("tierstore get through etcd TLS wrote %d bytes, %v", len(got), err)
	}
	noCert := "etcd://" + etcd.Addr + "?ca=" + url.QueryEscape(cf.CA)
	if _, e, code := cli(t, "get", "--master", noCert, "--timeout", "3s", "k", out); code == 0 {
		t.Fatalf("tierstore get without a client certificate for etcd succeeded: %s", e)
	}
	if strings.Contains(plain.Output(), "leading term=") {
		t.Fatalf("the master without etcd TLS led:\n%s", plain.Output())
	}
}
