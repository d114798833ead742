package ha

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseMasterURL(t *testing.T) {
	good := []struct {
		in   string
		want MasterURL
	}{
		{"127.0.0.1:50051", MasterURL{Addr: "127.0.0.1:50051"}},
		{" master-0:50051 ", MasterURL{Addr: "master-0:50051"}},
		{"[::1]:50051", MasterURL{Addr: "[::1]:50051"}},
		{"etcd://h1:2379", MasterURL{Endpoints: []string{"h1:2379"}, Prefix: DefaultPrefix}},
		{"etcd://h1:2379,h2:2379", MasterURL{Endpoints: []string{"h1:2379", "h2:2379"}, Prefix: DefaultPrefix}},
		{"ETCD://h1:2379;h2:2379", MasterURL{Endpoints: []string{"h1:2379", "h2:2379"}, Prefix: DefaultPrefix}},
		{"etcd://h1:2379/", MasterURL{Endpoints: []string{"h1:2379"}, Prefix: DefaultPrefix}},
		{"etcd://h1:2379,[::1]:2379/prod/kv", MasterURL{Endpoints: []string{"h1:2379", "[::1]:2379"}, Prefix: "/prod/kv"}},
	}
	for _, c := range good {
		got, err := ParseMasterURL(c.in)
		if err != nil {
			t.Errorf("ParseMasterURL(%q): %v", c.in, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseMasterURL(%q) = %+v, want %+v", c.in, got, c.want)
		}
		// The canonical form parses back to the same value.
		again, err := ParseMasterURL(got.String())
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Errorf("round trip of %q via %q: %+v, %v", c.in, got.String(), again, err)
		}
	}

	bad := []struct{ in, mentions string }{
		{"", "empty"},
		{"   ", "empty"},
		{"etcd://", "empty host list"},
		{"etcd:///tierstore", "empty host list"},
		{"etcd://h1:2379,,h2:2379", "empty endpoint"},
		{"etcd://h1:2379,", "empty endpoint"},
		{"etcd://h1", "not host:port"},
		{"etcd://:2379", "no host"},
		{"etcd://h1:http", "bad port"},
		{"etcd://h1:0", "bad port"},
		{"etcd://h1:65536", "bad port"},
		{"etcd://h1:2379,h1:2379", "given twice"},
		{"etcd://h1:2379?x=1", "query"},
		{"etcd://h1:2379/a//b", "bad prefix"},
		{"http://h1:2379", `unknown scheme "http"`},
		{"zk://h1:2181", `unknown scheme "zk"`},
		{"master", "not host:port"},
		{"master:", "bad port"},
		{"master:-1", "bad port"},
		{":50051", "no host"},
	}
	for _, c := range bad {
		got, err := ParseMasterURL(c.in)
		if !errors.Is(err, ErrBadMasterURL) {
			t.Errorf("ParseMasterURL(%q) = %+v, %v; want ErrBadMasterURL", c.in, got, err)
			continue
		}
		if !strings.Contains(err.Error(), c.mentions) {
			t.Errorf("ParseMasterURL(%q): %q does not mention %q", c.in, err, c.mentions)
		}
	}
}

func TestParseEndpoints(t *testing.T) {
	got, err := ParseEndpoints("h1:2379;h2:2379, h3:2379")
	if err != nil || !reflect.DeepEqual(got, []string{"h1:2379", "h2:2379", "h3:2379"}) {
		t.Fatalf("ParseEndpoints = %v, %v", got, err)
	}
	for _, bad := range []string{"", "h1:2379;;h2:2379", "h1", "h1:2379,h1:2379", "h1:x"} {
		if _, err := ParseEndpoints(bad); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "etcd endpoints") {
			t.Errorf("ParseEndpoints(%q) = %v, want ErrConfig naming the etcd endpoints", bad, err)
		}
	}
}
