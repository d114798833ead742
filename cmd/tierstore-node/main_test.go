package main

import (
	"bytes"
	"strings"
	"testing"
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
