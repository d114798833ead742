package hatest_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tierstore/tierstore/ha/hatest"
)

// TestRestartKeepsData: a key written before Stop is read back after Restart
// on the same endpoint, so the restart tests of package ha restart a real
// member with its data, not a fresh one.
func TestRestartKeepsData(t *testing.T) {
	e := hatest.Start(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	put, err := cli.Put(ctx, "k", "v")
	if err != nil {
		t.Fatal(err)
	}
	e.Stop()
	if e.Running() {
		t.Fatal("Running after Stop")
	}
	e.Restart(t)
	got, err := cli.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "v" || got.Kvs[0].ModRevision != put.Header.Revision {
		t.Fatalf("after restart: %+v, want v at revision %d", got.Kvs, put.Header.Revision)
	}
	if err := e.Server.Restart(); err == nil {
		t.Fatal("Restart of a running server succeeded")
	}
}
