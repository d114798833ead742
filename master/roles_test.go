package master

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/tierstore/tierstore/internal/rpcpb"
	"github.com/tierstore/tierstore/internal/tlsconf"
	"github.com/tierstore/tierstore/masterapi"
	"github.com/tierstore/tierstore/mastergrpc"
)

// TestRolesCoverEveryMethod: every method of the master service has roles
// (a new RPC without an entry fails here), and no entry names a method
// that does not exist.
func TestRolesCoverEveryMethod(t *testing.T) {
	if err := Roles.Check(pb.Master_ServiceDesc); err != nil {
		t.Fatal(err)
	}
}

// TestRolesOverTLS serves a master with mutual TLS and its roles table:
// each role reaches its calls and is refused the others with
// PERMISSION_DENIED naming the call and the role it needs.
func TestRolesOverTLS(t *testing.T) {
	ca, err := tlsconf.NewCA("test ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	source := func(name string, r tlsconf.Role) *tlsconf.Source {
		s, err := ca.Source(dir, name, []tlsconf.Role{r})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s, _ := testService(t, nil)
	srvSrc := source("master", tlsconf.Master)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(s, srvSrc.ServerOptions(Roles, nil)...)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)

	dial := func(src *tlsconf.Source) *mastergrpc.Client {
		c, err := mastergrpc.Dial(bg, lis.Addr().String(), grpc.WithTransportCredentials(src.ClientCredentials(tlsconf.Master)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	nodeC := dial(source("node1", tlsconf.Node))
	cliC := dial(source("client1", tlsconf.Client))
	ctx, cancel := context.WithTimeout(bg, 20*time.Second)
	defer cancel()

	denied := func(err error, want string) {
		t.Helper()
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("want PERMISSION_DENIED, got %v", err)
		}
		if got := status.Convert(err).Message(); !strings.Contains(got, want) {
			t.Fatalf("message %q does not say %q", got, want)
		}
	}
	if err := nodeC.MountSegment(ctx, masterapi.MountRequest{Node: "n1", Endpoint: "n1:1", Segment: "seg", Size: 1 << 20}); err != nil {
		t.Fatalf("node mounts: %v", err)
	}
	denied(cliC.MountSegment(ctx, masterapi.MountRequest{Node: "evil", Endpoint: "e:1", Segment: "s", Size: 1 << 20}), "MountSegment needs role node")
	_, err = cliC.ReRegisterSSDColumns(ctx, "n1", masterapi.ColumnsOf(nil))
	denied(err, "ReRegisterSSDObjects needs role node")
	_, err = cliC.PullRemovals(ctx, masterapi.PullRequest{Node: "n1"})
	denied(err, "PullRemovals needs role node")

	if _, err := cliC.PutStart(ctx, masterapi.PutStartRequest{Key: "k", Size: 10}); err != nil {
		t.Fatalf("client puts: %v", err)
	}
	_, err = nodeC.RemoveAll(ctx, true)
	denied(err, "RemoveAll needs role client")
	denied(nodeC.Remove(ctx, "k", true), "Remove needs role client")
	if _, err := nodeC.Stats(ctx); err != nil {
		t.Fatalf("a node reads stats: %v", err)
	}
	if _, err := cliC.Stats(ctx); err != nil {
		t.Fatalf("a client reads stats: %v", err)
	}
}

// TestNodeNameBinding: a node certificate bound to a node name
// (tierstore://node/NAME) makes a node's calls only as that node; one
// bound to no name may act as any node; client calls are not affected.
func TestNodeNameBinding(t *testing.T) {
	ca, err := tlsconf.NewCA("test ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	source := func(name string, r tlsconf.Role, nodes ...string) *tlsconf.Source {
		s, err := ca.Source(dir, name, []tlsconf.Role{r}, nodes...)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s, _ := testService(t, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(s, source("master", tlsconf.Master).ServerOptions(Roles, nil)...)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	dial := func(src *tlsconf.Source) *mastergrpc.Client {
		c, err := mastergrpc.Dial(bg, lis.Addr().String(), grpc.WithTransportCredentials(src.ClientCredentials(tlsconf.Master)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	n1 := dial(source("node-n1", tlsconf.Node, "n1"))
	anyNode := dial(source("node-any", tlsconf.Node))
	ctx, cancel := context.WithTimeout(bg, 20*time.Second)
	defer cancel()
	denied := func(err error) {
		t.Helper()
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("want PERMISSION_DENIED, got %v", err)
		}
		if got := status.Convert(err).Message(); !strings.Contains(got, `as node "n2"`) || !strings.Contains(got, "bound to node n1") {
			t.Fatalf("message %q does not name the node asked and the node bound", got)
		}
	}
	mount := func(name string) masterapi.MountRequest {
		return masterapi.MountRequest{Node: name, Endpoint: name + ":1", Segment: "seg-" + name, Size: 1 << 20, Incarnation: "i"}
	}
	if err := n1.MountSegment(ctx, mount("n1")); err != nil {
		t.Fatalf("n1 mounts as n1: %v", err)
	}
	denied(n1.MountSegment(ctx, mount("n2")))
	if err := anyNode.MountSegment(ctx, mount("n2")); err != nil {
		t.Fatalf("a certificate bound to no name mounts n2: %v", err)
	}
	_, err = n1.Ping(ctx, "n2")
	denied(err)
	_, err = n1.PullRemovals(ctx, masterapi.PullRequest{Node: "n2"})
	denied(err)
	_, err = n1.ReRegisterSSDColumns(ctx, "n2", masterapi.ColumnsOf(nil))
	denied(err)
	_, err = n1.WaitOffload(ctx, "n2", 10*time.Millisecond)
	denied(err)
	if _, err := n1.Ping(ctx, "n1"); err != nil {
		t.Fatalf("n1 pings as n1: %v", err)
	}
	if _, err := n1.Stats(ctx); err != nil {
		t.Fatalf("n1 reads stats: %v", err)
	}
}
