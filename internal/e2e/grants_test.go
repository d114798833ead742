package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/crc32c"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/wire"
	"github.com/tierstore/tierstore/masterapi"
)

// TestGrantsCluster: tierstore-master and tierstore-node started with the
// same --grant_secret_file: the CLI's put and get work (the client passes
// PutStart's write grant and the lookup's read grant on), a data-plane
// read without a grant is refused PERMISSION_DENIED by the node, so is a
// write over the object's range with a made-up larger put token and no
// grant or the read grant (the object still reads the same), a put's
// write with its own grant works, and a bad secret file stops either
// binary at start, naming the flag.
func TestGrantsCluster(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "grant.secret")
	if err := os.WriteFile(secret, []byte(strings.Repeat("5a", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	flag := "--grant_secret_file=" + secret
	m := startMaster(t, 0, flag)
	startNode(t, m.Addr, "", flag)

	in := filepath.Join(dir, "v")
	val := randomValue(1 << 20)
	if err := os.WriteFile(in, val, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, e, code := cli(t, "put", "--master", m.Addr, "--timeout", "20s", "k", in); code != 0 {
		t.Fatalf("put: exit %d: %s", code, e)
	}
	out := filepath.Join(dir, "out")
	if _, e, code := cli(t, "get", "--master", m.Addr, "--timeout", "20s", "k", out); code != 0 {
		t.Fatalf("get with grants: exit %d: %s", code, e)
	}
	if got, err := os.ReadFile(out); err != nil || !bytes.Equal(got, val) {
		t.Fatalf("get with grants returned other bytes: %v", err)
	}

	c := newClient(t, m.Addr, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := c.Master().GetReplicaList(ctx, "k")
	if err != nil || len(info.Replicas) == 0 || info.Replicas[0].Grant == "" {
		t.Fatalf("lookup without a grant: %v %+v", err, info)
	}
	rep := info.Replicas[0]
	dc, err := wire.DialData(ctx, rep.Endpoint, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	buf := make([]byte, rep.Length)
	if err := dc.ReadRange(ctx, rep.Segment, rep.Offset, buf, info.CRC); !errors.Is(err, errcode.ErrPermissionDenied) || !strings.Contains(err.Error(), "refuses the read: grant: no grant") {
		t.Fatalf("a read without a grant: %v, want PERMISSION_DENIED (no grant)", err)
	}
	if err := dc.ReadRangeParts(ctx, rep.Segment, rep.Offset, [][]byte{buf}, info.CRC, []byte(rep.Grant)); err != nil || !bytes.Equal(buf, val) {
		t.Fatalf("the read with its grant: %v", err)
	}

	// Writes: the object's range claimed with a made-up larger put token.
	junk := randomValue(int(rep.Length))
	wctx := wire.WithObject(ctx, wire.Object{Key: "k"})
	big := rep.PutToken + 1<<40
	for name, c := range map[string]struct {
		g    []byte
		want string
	}{
		"no grant":        {nil, "refuses the write: grant: no grant"},
		"the read grant":  {[]byte(rep.Grant), "refuses the write: grant: grant does not match the request"},
		"a made-up grant": {bytes.Repeat([]byte{1}, len(rep.Grant)), "refuses the write: grant: grant does not match the request"},
	} {
		if err := dc.WriteParts(wctx, rep.Segment, rep.Offset, [][]byte{junk}, crc32c.Checksum(junk), big, c.g); !errors.Is(err, errcode.ErrPermissionDenied) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("a write over the object with %s: %v, want PERMISSION_DENIED (%s)", name, err, c.want)
		}
	}
	if err := dc.ReadRangeParts(ctx, rep.Segment, rep.Offset, [][]byte{buf}, info.CRC, []byte(rep.Grant)); err != nil || !bytes.Equal(buf, val) {
		t.Fatalf("the object after the refused writes: %v", err)
	}
	pval := randomValue(64 << 10)
	pcrc := crc32c.Checksum(pval)
	ps, err := c.Master().PutStart(ctx, masterapi.PutStartRequest{Key: "p", Size: int64(len(pval)), CRC: pcrc})
	if err != nil || ps.Replica.Grant == "" {
		t.Fatalf("PutStart without a write grant: %v %+v", err, ps)
	}
	pr := ps.Replica
	pdc, err := wire.DialData(ctx, pr.Endpoint, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer pdc.Close()
	if err := pdc.WriteParts(wire.WithObject(ctx, wire.Object{Key: "p"}), pr.Segment, pr.Offset, [][]byte{pval}, pcrc, pr.PutToken, []byte(pr.Grant)); err != nil {
		t.Fatalf("a put's write with its grant: %v", err)
	}
	if err := c.Master().PutEnd(ctx, "p", pr.PutToken); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, "p"); err != nil || !bytes.Equal(got, pval) {
		t.Fatalf("get p: %v", err)
	}

	bad := filepath.Join(dir, "bad.secret")
	if err := os.WriteFile(bad, []byte("not a secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, bin := range []string{"tierstore-master", "tierstore-node"} {
		args := []string{"--grant_secret_file=" + bad}
		if bin == "tierstore-node" {
			args = append(args, "--master="+m.Addr, "--listen=127.0.0.1:0")
		} else {
			args = append(args, "--rpc_port=0")
		}
		cmd := exec.CommandContext(ctx, filepath.Join(binDir, bin), args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(stderr.String(), "--grant_secret_file") || !strings.Contains(stderr.String(), "64 hexadecimal digits") {
			t.Errorf("%s with a bad secret file: %v, stderr %q: want exit 2 naming the flag and the format", bin, err, stderr.String())
		}
	}
}
