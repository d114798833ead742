package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestRunRefusesBadFlags(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"--master=127.0.0.1:1", "--enable_offload"}, &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), "--enable_offload") || !strings.Contains(errb.String(), "ssd_dir") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	if strings.Count(strings.TrimSpace(errb.String()), "\n") != 0 {
		t.Fatalf("error should be one line: %q", errb.String())
	}
}

// A second tierstore-node on an --ssd_dir in use stops at once with one
// line that says so, naming the directory and the holder's pid (the first
// node holds DIR/NODE_LOCK with flock and its pid inside; this test plays
// the first node).
func TestRunSSDDirInUse(t *testing.T) {
	dir := t.TempDir()
	f, err := os.OpenFile(filepath.Join(dir, "NODE_LOCK"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("4242\n"); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run([]string{"--master=127.0.0.1:1", "--enable_offload", "--ssd_dir=" + dir, "--memory=8MiB"}, &out, &errb)
	want := "--ssd_dir " + dir + " is in use by another node (pid 4242)"
	if code != 1 || !strings.Contains(errb.String(), want) || strings.Count(strings.TrimSpace(errb.String()), "\n") != 0 {
		t.Fatalf("exit %d, stderr %q, want one line with %q", code, errb.String(), want)
	}
}
