package main

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/tierstore/tierstore/ha"
)

// The HA flags: accepted with enable_ha, each refused on one line naming
// it when wrong or given without enable_ha.
func TestHAFlags(t *testing.T) {
	cfg, opt, err := parseAll([]string{"--enable_ha=true", "--etcd_endpoints=h1:2379;h2:2379", "--ha_prefix=/prod/kv",
		"--ha_session_ttl=5", "--rebuild_window=500"}, io.Discard)
	o := opt.ha
	if err != nil || !o.enable || len(o.parsed) != 2 || o.parsed[1] != "h2:2379" || o.prefix != "/prod/kv" ||
		o.sessionTTL != 5*time.Second || cfg.RebuildWindow != 500*time.Millisecond {
		t.Fatalf("%+v %v", o, err)
	}
	cfg, opt, err = parseAll([]string{"--enable_ha=true", "--etcd_endpoints=h1:2379"}, io.Discard)
	if err != nil || opt.ha.prefix != ha.DefaultPrefix || opt.ha.sessionTTL != ha.DefaultSessionTTL || cfg.RebuildWindow != 2*time.Second {
		t.Fatalf("defaults %+v %v", opt.ha, err)
	}
	if _, opt, err = parseAll([]string{"--enable_ha=false"}, io.Discard); err != nil || opt.ha.enable {
		t.Fatalf("enable_ha=false: %+v %v", opt.ha, err)
	}
	ha := "--enable_ha=true"
	eps := "--etcd_endpoints=127.0.0.1:2379"
	for _, c := range []struct {
		args []string
		name string
	}{
		{[]string{ha}, "etcd_endpoints"},
		{[]string{eps}, "etcd_endpoints"},
		{[]string{"--ha_session_ttl=5"}, "ha_session_ttl"},
		{[]string{"--ha_prefix=/x"}, "ha_prefix"},
		{[]string{"--rebuild_window=5"}, "rebuild_window"},
		{[]string{ha, "--etcd_endpoints=h1"}, "etcd_endpoints"},
		{[]string{ha, "--etcd_endpoints=h1:2379,,h2:2379"}, "etcd_endpoints"},
		{[]string{ha, "--etcd_endpoints=h1:99999"}, "etcd_endpoints"},
		{[]string{ha, eps, "--ha_session_ttl=500ms"}, "ha_session_ttl"},
		{[]string{ha, eps, "--rebuild_window=-1s"}, "rebuild_window"},
		{[]string{ha, eps, "--ha_prefix=noslash"}, "ha_prefix"},
		{[]string{ha, eps, "--ha_prefix="}, "ha_prefix"},
		{[]string{ha, eps, "--rpc_address=0.0.0.0"}, "rpc_address"},
		{[]string{ha, eps, "--rpc_address=::"}, "rpc_address"},
		{[]string{"--etcd_tls_ca=/x"}, "etcd_tls_ca"},
		{[]string{ha, eps, "--etcd_tls_cert=/c", "--etcd_tls_key=/k"}, "etcd_tls_ca"},
		{[]string{ha, eps, "--etcd_tls_ca=/nonexistent/ca", "--etcd_tls_cert=/c"}, "etcd_tls_"},
		{[]string{ha, eps, "--etcd_tls_ca=/nonexistent/ca"}, "etcd_tls_ca"},
	} {
		_, _, err := parseAll(c.args, io.Discard)
		if err == nil {
			t.Errorf("%v accepted", c.args)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, c.name) || strings.Contains(msg, "\n") || !errors.Is(err, errUsage) {
			t.Errorf("%v: message %q does not name %s on one line", c.args, msg, c.name)
		}
	}
}
