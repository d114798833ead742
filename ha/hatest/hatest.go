// Package hatest starts a real embedded etcd for tests of package ha and of
// the packages that integrate it (master, node, client, end-to-end tests).
//
//	etcd := hatest.Start(t)                 // 127.0.0.1, free ports, t.TempDir()
//	cfg := ha.Config{Endpoints: etcd.Endpoints(), Address: addr}
//	url := etcd.MasterURL()                 // "etcd://127.0.0.1:PORT" for --master
//	etcd.Stop(); etcd.Restart(t)            // same data, same ports
//
// The server is stopped by t.Cleanup. It imports the etcd server; only test
// code should import this package.
package hatest

import (
	"testing"

	"github.com/tierstore/tierstore/ha/etcdserver"
)

// Etcd is an embedded etcd member owned by one test.
type Etcd struct {
	*etcdserver.Server
}

// Start starts a member on 127.0.0.1 with free ports and a data directory
// under t.TempDir(), and registers its Stop with t.Cleanup. It fails the test
// if the member does not start.
func Start(t testing.TB) *Etcd {
	t.Helper()
	// Log level fatal: etcd logs every listener it closes at level error.
	s, err := etcdserver.Start(etcdserver.Config{Dir: t.TempDir(), LogLevel: "fatal"})
	if err != nil {
		t.Fatalf("hatest: %v", err)
	}
	t.Cleanup(s.Stop)
	return &Etcd{Server: s}
}

// Restart starts the stopped member again on its data directory and ports,
// failing the test if it cannot.
func (e *Etcd) Restart(t testing.TB) {
	t.Helper()
	if err := e.Server.Restart(); err != nil {
		t.Fatalf("hatest: restart: %v", err)
	}
}
