package ha

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestConfigRejected(t *testing.T) {
	ok := Config{Endpoints: []string{"127.0.0.1:2379"}, Address: "127.0.0.1:50051"}
	cases := []struct {
		name     string
		mut      func(*Config)
		mentions string
	}{
		{"no endpoints", func(c *Config) { c.Endpoints = nil }, "Endpoints is empty"},
		{"bad endpoint", func(c *Config) { c.Endpoints = []string{"127.0.0.1:2379", "h:x"} }, "Endpoints[1]"},
		{"no address", func(c *Config) { c.Address = "" }, "Address"},
		{"address port", func(c *Config) { c.Address = "h:70000" }, "bad port"},
		{"relative prefix", func(c *Config) { c.Prefix = "tierstore" }, "Prefix"},
		{"trailing slash", func(c *Config) { c.Prefix = "/tierstore/" }, "Prefix"},
		{"ttl too small", func(c *Config) { c.SessionTTL = 500 * time.Millisecond }, "SessionTTL"},
		{"margin too big", func(c *Config) { c.SessionTTL = 2 * time.Second; c.SafetyMargin = time.Second }, "SafetyMargin"},
		{"negative margin", func(c *Config) { c.SafetyMargin = -time.Second }, "SafetyMargin"},
		{"negative dial", func(c *Config) { c.DialTimeout = -time.Second }, "DialTimeout"},
	}
	for _, c := range cases {
		cfg := ok
		c.mut(&cfg)
		_, err := Campaign(context.Background(), cfg)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.mentions) {
			t.Errorf("%s: Campaign error %v, want ErrConfig mentioning %q", c.name, err, c.mentions)
		}
	}
	got, err := ok.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if got.Prefix != DefaultPrefix || got.SessionTTL != DefaultSessionTTL || got.SafetyMargin != DefaultSessionTTL/6 {
		t.Fatalf("defaults: %+v", got)
	}
	ok.SessionTTL = 2100 * time.Millisecond
	if got, _ := ok.withDefaults(); got.SessionTTL != 3*time.Second {
		t.Fatalf("SessionTTL 2.1s rounded to %v, want 3s", got.SessionTTL)
	}
}
