package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestBadCommandLines(t *testing.T) {
	cases := []struct{ args, mentions string }{
		{"", "--data-dir is required"},
		{"--data-dir /tmp/x extra", "unexpected argument"},
		{"--data-dir /tmp/x --listen-client nohost", "--listen-client"},
		{"--data-dir /tmp/x --listen-peer 127.0.0.1", "--listen-peer"},
		{"--data-dir /tmp/x --listen-client localhost:2379", "IP address"},
		{"--data-dir /tmp/x --listen-client 127.0.0.1:99999", "port"},
		{"--data-dir /tmp/x --log-level loud", "--log-level"},
		{"--data-dir /tmp/x --start-timeout 0s", "--start-timeout"},
		{"--bogus", "bogus"},
		{"--data-dir /tmp/x --tls_cert /c --tls_key /k", "go together"},
		{"--data-dir /tmp/x --tls_cert /nonexistent/c --tls_key /nonexistent/k --tls_ca /nonexistent/ca", "--tls_cert"},
	}
	for _, c := range cases {
		var out, errOut bytes.Buffer
		code := run(strings.Fields(c.args), &out, &errOut, nil)
		if code != 2 || !strings.Contains(errOut.String(), c.mentions) || strings.Count(errOut.String(), "\n") != 1 {
			t.Errorf("%q: exit %d, stderr %q; want 2 and one line mentioning %q", c.args, code, errOut.String(), c.mentions)
		}
	}
	var out bytes.Buffer
	if code := run([]string{"--help"}, &out, &out, nil); code != 0 || !strings.Contains(out.String(), "-data-dir") {
		t.Errorf("--help: exit %d, %q", code, out.String())
	}
}

var listening = regexp.MustCompile(`tierstore-etcd listening on (127\.0\.0\.1:\d+) master=etcd://`)

// TestProcess builds the binary, runs it as a real process on a free port,
// writes through it, stops it with SIGTERM (exit 0), starts it again on the
// same directory and port, and reads the key back.
func TestProcess(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "tierstore-etcd")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	dir := filepath.Join(t.TempDir(), "data")
	addr := startProcess(t, bin, "--data-dir", dir, "--listen-client", "127.0.0.1:0")
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	stopProcess(t)
	startProcess(t, bin, "--data-dir", dir, "--listen-client", addr)
	got, err := cli.Get(ctx, "k")
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "v" {
		t.Fatalf("after restart: %v %v", got, err)
	}
	stopProcess(t)
}

var current *exec.Cmd

func startProcess(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	current = cmd
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	line := make(chan string, 1)
	go func() {
		buf := make([]byte, 4096)
		n, _ := stdout.Read(buf)
		line <- string(buf[:n])
	}()
	select {
	case l := <-line:
		m := listening.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("first output %q", l)
		}
		return m[1]
	case <-time.After(time.Minute):
		t.Fatal("no listening line within a minute")
	}
	return ""
}

func stopProcess(t *testing.T) {
	t.Helper()
	if err := current.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := current.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
}
