package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/aesgcm"
	"github.com/tierstore/tierstore/internal/tlsconf"
	"github.com/tierstore/tierstore/internal/wire"
	"github.com/tierstore/tierstore/master"
	"github.com/tierstore/tierstore/node"
	"google.golang.org/grpc"
)

func init() {
	register(scenario{
		name: "tls",
		help: "mutual TLS against plaintext, same run, turns per pass: get and put of 1 MiB, batch get, over loopback (master gRPC, node data plane)",
		run:  runTLS,
	})
}

// goalTLS is the issue's goal (issue 25): with TLS at least this share of
// the plaintext MB/s.
const goalTLS = 0.6

// tlsReps is the number of passes; each pass measures every row on the
// plaintext cluster, then on the TLS one.
const tlsReps = 5

// tlsOp is one measured operation of the tls scenario.
type tlsOp struct {
	name string
	run  func(sr *e2eSizeRun, ctx context.Context, k int) (e2eRow, error)
}

var tlsOps = []tlsOp{
	{"get 1 MiB", (*e2eSizeRun).getDRAM},
	{"put 1 MiB", (*e2eSizeRun).put},
	{"batch get", (*e2eSizeRun).batchGetDRAM},
}

func runTLS(ctx context.Context, e *env) (*result, error) {
	started := time.Now()
	d := 2 * time.Second
	size := int64(1 << 20)
	if e.quick {
		d = 500 * time.Millisecond
	}
	if e.sizes != nil { // tests: small objects, short rows
		size, d = e.sizes[0], 100*time.Millisecond
	}
	const k = 1
	ca, err := tlsconf.NewCA("bench tls ca", 24*time.Hour)
	if err != nil {
		return nil, err
	}
	var runs [2]*e2eSizeRun // plaintext, tls
	for i := range runs {
		var pki *tlsconf.CA
		if i == 1 {
			pki = ca
		}
		rig, err := newTLSRig(ctx, filepath.Join(e.dir, fmt.Sprint(i)), pki, k)
		if err != nil {
			return nil, fmt.Errorf("bench: tls cluster: %w", err)
		}
		defer rig.close()
		sr := &e2eSizeRun{rig: rig, size: size, d: d}
		if sr.dramKeys, sr.dramVals, err = rig.populate(ctx, "dram/", e2eObjects, size, false); err != nil {
			return nil, fmt.Errorf("bench: tls DRAM objects: %w", err)
		}
		sr.dst = [][][]byte{make([][]byte, e2eObjects)}
		for j := range sr.dst[0] {
			sr.dst[0][j] = make([]byte, size)
		}
		runs[i] = sr
	}
	// passes[op][mode] are the rows of each pass.
	passes := make([][2][]e2eRow, len(tlsOps))
	for range tlsReps {
		for i, op := range tlsOps {
			for mode, sr := range runs {
				r, err := op.run(sr, ctx, k)
				if err != nil {
					return nil, fmt.Errorf("bench: tls %s (%s): %w", op.name, []string{"plaintext", "tls"}[mode], err)
				}
				passes[i][mode] = append(passes[i][mode], r)
			}
		}
	}
	t := &table{Title: "mutual TLS 1.3 against plaintext, same run, one client, turns per pass",
		Columns: []string{"row", "plaintext MB/s", "tls MB/s", "tls / plaintext", "plaintext cpu us/MiB", "tls cpu us/MiB", "goal", "met"}}
	for i, op := range tlsOps {
		var xs []float64
		for p := range tlsReps {
			if b := passes[i][0][p].fig.mbps; b > 0 {
				xs = append(xs, passes[i][1][p].fig.mbps/b)
			}
		}
		x := median(xs)
		met := any(nil)
		if f, ok := x.(float64); ok {
			met = yesNo(f >= goalTLS)
		}
		t.add(op.name, medianRow(passes[i][0], func(r e2eRow) float64 { return r.fig.mbps }),
			medianRow(passes[i][1], func(r e2eRow) float64 { return r.fig.mbps }), x,
			medianRow(passes[i][0], func(r e2eRow) float64 { return float64(r.fig.cpuPerMiB) / 1e3 }),
			medianRow(passes[i][1], func(r e2eRow) float64 { return float64(r.fig.cpuPerMiB) / 1e3 }),
			fmt.Sprintf(">= %.1fx plaintext", goalTLS), met)
	}
	ciph := "-"
	if cs, err := tlsCipher(ctx, runs[1].rig); err == nil {
		ciph = cs
	}
	return &result{
		Options: map[string]string{
			"per_row":  fmt.Sprintf("%v of timed work in %d passes, plaintext then TLS in each; MB/s the median pass, the ratio the median of per-pass ratios", d, tlsReps),
			"clusters": "two in this process, alive together: a master served over gRPC on 127.0.0.1 and a node on a loopback listener (the master in process for the node); plaintext, and mutual TLS with certificates of a throwaway CA (ECDSA P-256)",
			"objects":  fmt.Sprintf("%d of %s in DRAM; batch get = BatchGetInto of all %d", e2eObjects, sizeName(size), e2eObjects),
			"cipher":   ciph,
			"records":  fmt.Sprintf("the data plane's own records after the hellos (data plane %d): AES-128-GCM (%s), keys from the TLS 1.3 exporter, up to 64 KiB a record; gRPC to the master in TLS records", wire.DataVersion, recordCipher()),
		},
		Tables: []*table{t},
		Notes: []string{
			"get = GetInto with one reusable buffer, keys in random order; put = fresh keys, removed (untimed) between rounds; both ask the master over gRPC (TLS in the TLS cluster) as a real client does",
			"cpu us/MiB: user+system CPU of this whole process (client, node and master) per MiB moved: under TLS both ends encrypt and decrypt on the same 2 cores",
		},
		Elapsed: time.Since(started).Seconds(),
	}, nil
}

// medianRow is the median over rows of f.
func medianRow(rows []e2eRow, f func(e2eRow) float64) any {
	xs := make([]float64, len(rows))
	for i, r := range rows {
		xs[i] = f(r)
	}
	return median(xs)
}

// tlsCipher names the TLS version and cipher suite a client of the rig's
// node gets (what the data plane runs with).
func tlsCipher(ctx context.Context, r *e2eRig) (string, error) {
	ep := r.n.Endpoint()
	cfg := r.tlsClient.ClientConfig(tlsconf.Node)
	var dl net.Dialer
	c, err := dl.DialContext(ctx, "tcp", ep)
	if err != nil {
		return "", err
	}
	defer c.Close()
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return "", err
	}
	cs := tc.ConnectionState()
	return fmt.Sprintf("%s %s", tls.VersionName(cs.Version), tls.CipherSuiteName(cs.CipherSuite)), nil
}

// newTLSRig is the cluster of the tls scenario: a master served over
// gRPC on 127.0.0.1, one node (no SSD tier) on a loopback listener and k
// remote clients; with ca, every one of them speaks mutual TLS with
// certificates ca issues into dir.
func newTLSRig(ctx context.Context, dir string, ca *tlsconf.CA, k int) (_ *e2eRig, err error) {
	r := &e2eRig{}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	log := quietLogger()
	mc := master.DefaultConfig()
	mc.Logger = log
	nc := node.DefaultConfig()
	nc.Listen, nc.Memory, nc.Logger = "127.0.0.1:0", 512<<20, log
	nc.HeartbeatInterval, nc.ReconcileInterval = time.Hour, time.Hour
	var opts []grpc.ServerOption
	var files client.TLSFiles
	if ca != nil {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		msrc, err := ca.Source(dir, "master", []tlsconf.Role{tlsconf.Master})
		if err != nil {
			return nil, err
		}
		if nc.TLS, err = ca.Source(dir, "node", []tlsconf.Role{tlsconf.Node}); err != nil {
			return nil, err
		}
		if r.tlsClient, err = ca.Source(dir, "client", []tlsconf.Role{tlsconf.Client}); err != nil {
			return nil, err
		}
		leaf, err := ca.Issue("client2", []tlsconf.Role{tlsconf.Client}, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
		if err != nil {
			return nil, err
		}
		if files, err = ca.WriteFiles(dir, "client2", leaf); err != nil {
			return nil, err
		}
		opts = msrc.ServerOptions(master.Roles, log)
	}
	if r.m, r.srv, r.addr, err = serveMasterWith(mc, opts...); err != nil {
		return nil, err
	}
	if r.n, err = node.Start(ctx, nc, r.m); err != nil {
		return nil, err
	}
	for range k {
		c, err := client.New(ctx, client.Config{MasterAddr: r.addr, Logger: log, TLS: files})
		if err != nil {
			return nil, err
		}
		r.remote = append(r.remote, c)
	}
	if slices.Contains(r.remote, nil) {
		return nil, fmt.Errorf("bench: tls rig: a client is missing")
	}
	return r, nil
}

// recordCipher names the AES-GCM the records ran with on this CPU.
func recordCipher() string {
	if aesgcm.Fast() {
		return "internal/aesgcm: VAES and VPCLMULQDQ on AVX-512"
	}
	return "crypto/cipher's: this CPU lacks VAES, VPCLMULQDQ or AVX-512"
}
