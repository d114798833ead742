package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tierstore/tierstore/client"
	tscluster "github.com/tierstore/tierstore/internal/cluster"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
	"github.com/tierstore/tierstore/node"
)

func init() {
	register(scenario{
		name: "soak",
		help: "correctness soak: real master and node processes, 8 clients reading, writing and removing for --duration",
		run:  runSoak,
	})
}

// Soak shape (docs/benchmarks.md, soak): one master and one node process
// built from cmd/, the node with a 32 MiB DRAM segment and a 128 MiB SSD
// tier of 4 MiB buckets, default lease; 8 clients over gRPC.
const (
	soakClients    = 8
	soakMemory     = 32 << 20
	soakSSD        = 128 << 20
	soakBucket     = 4 << 20
	soakWindow     = 300 // a client reads and removes among its last soakWindow keys
	soakSampleTick = 100 * time.Millisecond
)

// soakSizes are the object sizes, drawn uniformly (KV-cache blocks).
var soakSizes = []int{64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20}

// soakCounts are the clients' operation counts.
type soakCounts struct {
	puts, putsOK, gets, hits, wrong, removes, removesOK atomic.Int64
	backpressure                                        atomic.Int64 // NO_AVAILABLE_HANDLE answers retried
	putErrs                                             sync.Map     // code name -> *atomic.Int64
	firstErr                                            sync.Map     // code name -> the first such error's text
}

func (c *soakCounts) putFailed(err error) {
	name := errcode.Of(err).String()
	v, _ := c.putErrs.LoadOrStore(name, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
	c.firstErr.LoadOrStore(name, err.Error())
}

func runSoak(ctx context.Context, e *env) (*result, error) {
	start := time.Now()
	dur := e.duration
	if dur <= 0 {
		dur = 60 * time.Second
		if e.quick {
			dur = 10 * time.Second
		}
	}
	bin := filepath.Join(e.dir, "bin")
	if err := buildBinaries(ctx, bin); err != nil {
		return nil, err
	}
	cl, err := startCluster(ctx, e.dir, bin)
	if err != nil {
		return nil, err
	}
	defer cl.stop()
	var cnt soakCounts
	var maxSSD atomic.Int64
	sctx, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { sampleSSD(sctx, cl.nodeEndpoint, &maxSSD) })
	errc := make(chan error, soakClients)
	for id := range soakClients {
		wg.Go(func() { errc <- soakClient(sctx, cl.masterAddr, id, &cnt) })
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			return nil, err
		}
	}
	// The final figures, after the workload: the node finishes its round.
	fctx, fcancel := context.WithTimeout(ctx, 10*time.Second)
	defer fcancel()
	ns, err := node.PeerStats(fctx, cl.nodeEndpoint)
	if err != nil {
		return nil, fmt.Errorf("bench: soak: node stats: %w\n%s", err, cl.logTail())
	}
	maxSSD.Store(max(maxSSD.Load(), ns.Tier.BytesUsed))
	mc, err := client.New(fctx, client.Config{MasterAddr: cl.masterAddr, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, fmt.Errorf("bench: soak: %w", err)
	}
	defer mc.Close()
	ms, err := mc.Stats(fctx)
	if err != nil {
		return nil, fmt.Errorf("bench: soak: master stats: %w\n%s", err, cl.logTail())
	}
	res := soakResult(&cnt, ns, ms, maxSSD.Load(), dur)
	res.Elapsed = time.Since(start).Seconds()
	if w := cnt.wrong.Load(); w > 0 {
		return res, fmt.Errorf("%w: soak: %d reads returned wrong bytes", errVerify, w)
	}
	if limit := int64(soakSSD) + node.BucketFileLimit(soakBucket); maxSSD.Load() > limit {
		return res, fmt.Errorf("bench: soak: SSD use reached %d bytes, above capacity + one bucket (%d)", maxSSD.Load(), limit)
	}
	return res, nil
}

// abandonedCauses are the offload failure causes that are not explained by
// the object going away (removed during its offload, or a stale copy): the
// object was meant to reach SSD and did not.
var abandonedCauses = []string{"no_space", "too_large", "source_bytes", "notify_refused", "tier", "bad_task"}

func soakResult(cnt *soakCounts, ns node.Stats, ms masterapi.Stats, maxSSD int64, dur time.Duration) *result {
	puts, ok := cnt.puts.Load(), cnt.putsOK.Load()
	putPct := 100.0
	if puts > 0 {
		putPct = 100 * float64(ok) / float64(puts)
	}
	var abandoned int64
	for _, c := range abandonedCauses {
		abandoned += ns.OffloadFailedBy[c]
	}
	bound := float64(soakSSD + node.BucketFileLimit(soakBucket))
	verdict := func(good bool) string {
		if good {
			return "ok"
		}
		return "FAIL"
	}
	health := &table{Title: "soak: correctness and health", Columns: []string{"figure", "value", "bound", "verdict"}}
	health.add("wrong bytes (reads)", float64(cnt.wrong.Load()), 0.0, verdict(cnt.wrong.Load() == 0))
	health.add("abandoned offloads", float64(abandoned), 0.0, verdict(abandoned == 0))
	health.add("put success %", putPct, 99.0, verdict(putPct >= 99))
	health.add("max SSD bytes", float64(maxSSD), bound, verdict(float64(maxSSD) <= bound))
	ops := &table{Title: "soak: operations", Columns: []string{"operation", "count", "ok", "per second"}}
	ops.add("put", float64(puts), float64(ok), float64(puts)/dur.Seconds())
	ops.add("put retried (NO_AVAILABLE_HANDLE)", float64(cnt.backpressure.Load()), nil, float64(cnt.backpressure.Load())/dur.Seconds())
	ops.add("get", float64(cnt.gets.Load()), float64(cnt.hits.Load()), float64(cnt.gets.Load())/dur.Seconds())
	ops.add("remove", float64(cnt.removes.Load()), float64(cnt.removesOK.Load()), float64(cnt.removes.Load())/dur.Seconds())
	off := &table{Title: "soak: offload at the node", Columns: []string{"outcome", "tasks"}}
	off.add("persisted", float64(ns.OffloadPersisted))
	for _, c := range sortedCauses(ns.OffloadFailedBy) {
		off.add("failed: "+c, float64(ns.OffloadFailedBy[c]))
	}
	off.add("SSD evictions (buckets)", float64(ns.Tier.Evictions))
	off.add("master: tasks queued in all", float64(ms.OffloadQueuedTot))
	off.add("master: answered persisted", float64(ms.OffloadPersisted))
	off.add("master: answered failed", float64(ms.OffloadFailed))
	off.add("master: queued or in flight at the end", float64(ms.OffloadQueued+ms.OffloadInFlight))
	off.add("master: DRAM evictions", float64(ms.Evictions))
	res := &result{
		Options: map[string]string{
			"duration": dur.String(), "clients": fmt.Sprint(soakClients), "memory": "32MiB", "ssd_capacity": "128MiB",
			"bucket_size_limit": "4MiB", "sizes": "64K..1M", "lease": "default (5s)",
		},
		Tables: []*table{health, ops, off},
	}
	var errs []string
	cnt.putErrs.Range(func(k, v any) bool {
		errs = append(errs, fmt.Sprintf("%s=%d", k, v.(*atomic.Int64).Load()))
		return true
	})
	if len(errs) > 0 {
		res.Notes = append(res.Notes, "put failures: "+strings.Join(errs, " "))
	}
	cnt.firstErr.Range(func(k, v any) bool {
		res.Notes = append(res.Notes, fmt.Sprintf("first %s: %s", k, v))
		return true
	})
	res.Notes = append(res.Notes, "abandoned = offload failures not explained by the object going away (causes "+strings.Join(abandonedCauses, ", ")+")")
	return res
}

func sortedCauses(m map[string]int64) []string {
	ks := make(map[string]string, len(m))
	for k := range m {
		ks[k] = k
	}
	return sortedKeys(ks)
}

// soakClient runs one client's loop until ctx ends: 45% puts of fresh keys,
// 45% gets and 10% removes among its recent keys. Every value read is
// checked against the bytes that were put (independently of the CRC the
// client library checks).
func soakClient(ctx context.Context, addr string, id int, cnt *soakCounts) error {
	c, err := client.New(context.Background(), client.Config{MasterAddr: addr, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return fmt.Errorf("bench: soak: client: %w", err)
	}
	defer c.Close()
	r := rand.New(rand.NewPCG(uint64(id), 0x50a6))
	seq := 0
	key := func(s int) string { return fmt.Sprintf("soak-c%d-%d", id, s) }
	recent := func() string { return key(max(0, seq-1-r.IntN(min(seq, soakWindow)+1))) }
	for ctx.Err() == nil {
		op := r.IntN(100)
		switch {
		case op < 45 || seq == 0:
			k := key(seq)
			seq++
			cnt.puts.Add(1)
			err := soakPut(ctx, c, k, soakValue(k, soakSizes[r.IntN(len(soakSizes))]), cnt)
			switch {
			case err == nil:
				cnt.putsOK.Add(1)
			case ctx.Err() != nil || errors.Is(err, errcode.ErrContextCanceled):
				// Cut off by the end of the run: the run's deadline is the
				// only one a put has (gRPC may see it a moment before
				// ctx.Err() does).
				cnt.puts.Add(-1)
			default:
				cnt.putFailed(err)
			}
		case op < 90:
			k := recent()
			cnt.gets.Add(1)
			v, err := c.Get(ctx, k)
			if err == nil {
				cnt.hits.Add(1)
				if !soakCheck(k, v) {
					cnt.wrong.Add(1)
				}
			}
		default:
			cnt.removes.Add(1)
			if err := c.Remove(ctx, recent(), false); err == nil {
				cnt.removesOK.Add(1)
			}
		}
	}
	return nil
}

// Backpressure: a put answered NO_AVAILABLE_HANDLE (every DRAM byte is
// taken by objects that cannot be evicted yet: waiting for their offload,
// or leased) is sent again after soakBackoff, doubled up to
// soakBackoffMax, for at most soakPutPatience; a writer of KV-cache blocks
// does the same (or skips caching the block).
const (
	soakBackoff     = 10 * time.Millisecond
	soakBackoffMax  = 200 * time.Millisecond
	soakPutPatience = 5 * time.Second
)

func soakPut(ctx context.Context, c *client.Client, k string, v []byte, cnt *soakCounts) error {
	wait, deadline := soakBackoff, time.Now().Add(soakPutPatience)
	for {
		err := c.Put(ctx, k, v)
		if !errors.Is(err, errcode.ErrNoAvailableHandle) || time.Now().After(deadline) {
			return err
		}
		cnt.backpressure.Add(1)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, soakBackoffMax)
	}
}

// soakValue is key's value of size bytes: the key's length and bytes, then
// words derived from the key, so a reader can tell the right value from
// any other without remembering it.
func soakValue(key string, size int) []byte {
	b := make([]byte, size)
	b[0] = byte(len(key))
	copy(b[1:], key)
	seed := uint64(len(key))
	for i := range len(key) {
		seed = seed*1099511628211 ^ uint64(key[i])
	}
	for i := 8 * ((1 + len(key) + 7) / 8); i+8 <= size; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], seed^uint64(i)*0x9E3779B97F4A7C15)
	}
	return b
}

func soakCheck(key string, v []byte) bool {
	if len(v) < 1+len(key) || int(v[0]) != len(key) || string(v[1:1+len(key)]) != key {
		return false
	}
	want := soakValue(key, len(v))
	return string(want) == string(v)
}

// sampleSSD records the node's largest SSD use until ctx ends.
func sampleSSD(ctx context.Context, endpoint string, maxSSD *atomic.Int64) {
	t := time.NewTicker(soakSampleTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if st, err := node.PeerStats(ctx, endpoint); err == nil && st.Tier.BytesUsed > maxSSD.Load() {
			maxSSD.Store(st.Tier.BytesUsed)
		}
	}
}

// buildBinaries builds tierstore-master and tierstore-node into dir with
// the go tool of this module.
func buildBinaries(ctx context.Context, dir string) error {
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(gomod)) == "" || strings.TrimSpace(string(gomod)) == os.DevNull {
		return fmt.Errorf("%w: soak needs the go tool inside the tierstore module to build cmd/ (%v)", errUnavailable, err)
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+string(filepath.Separator), "./cmd/tierstore-master", "./cmd/tierstore-node")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("bench: soak: go build: %v\n%s", err, out)
	}
	return nil
}

// cluster is the soak's master and node processes.
type cluster struct {
	procs        []*exec.Cmd
	logs         []string
	masterAddr   string
	nodeEndpoint string
}

func startCluster(ctx context.Context, dir, bin string) (cl *cluster, err error) {
	cl = &cluster{}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, cl.logTail())
			cl.stop()
		}
	}()
	line, err := cl.start(ctx, dir, filepath.Join(bin, "tierstore-master"), "tierstore-master listening on ",
		"--rpc_port=0", "--metrics_port=0", "--enable_offload=true", "--log_level=warn", "--state_dir="+filepath.Join(dir, "master-state"))
	if err != nil {
		return cl, err
	}
	cl.masterAddr = strings.Fields(line)[0]
	ssd := filepath.Join(dir, "ssd")
	if err := os.MkdirAll(ssd, 0o755); err != nil {
		return cl, fmt.Errorf("bench: soak: %w", err)
	}
	line, err = cl.start(ctx, dir, filepath.Join(bin, "tierstore-node"), "tierstore-node listening on ",
		"--master="+cl.masterAddr, "--memory=32MiB", "--enable_offload", "--ssd_dir="+ssd,
		"--ssd_capacity=128MiB", "--bucket_size_limit=4MiB", "--heartbeat_interval=250ms")
	if err != nil {
		return cl, err
	}
	cl.nodeEndpoint = strings.Fields(line)[0]
	return cl, nil
}

// start runs bin with args, its stderr in a log file under dir, and
// returns the rest of the first stdout line that starts with prefix.
func (cl *cluster) start(ctx context.Context, dir, bin, prefix string, args ...string) (string, error) {
	logPath := filepath.Join(dir, filepath.Base(bin)+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return "", fmt.Errorf("bench: soak: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	tscluster.DieWithParent(cmd)
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", fmt.Errorf("bench: soak: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("bench: soak: start %s: %w", bin, err)
	}
	cl.procs = append(cl.procs, cmd)
	cl.logs = append(cl.logs, logPath)
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), prefix); ok {
				lines <- rest
				break
			}
		}
		_, _ = io.Copy(io.Discard, out)
		close(lines)
	}()
	select {
	case l, ok := <-lines:
		if !ok {
			return "", fmt.Errorf("bench: soak: %s exited before it listened", filepath.Base(bin))
		}
		return l, nil
	case <-time.After(30 * time.Second):
		return "", fmt.Errorf("bench: soak: %s did not start within 30s", filepath.Base(bin))
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// stop ends the processes, newest first (the node drains before the
// master goes): SIGTERM, then SIGKILL after 20 s.
func (cl *cluster) stop() {
	for i := len(cl.procs) - 1; i >= 0; i-- {
		p := cl.procs[i]
		_ = p.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- p.Wait() }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = p.Process.Kill()
			<-done
		}
	}
	cl.procs = nil
}

// logTail is the end of each process's log, for error messages.
func (cl *cluster) logTail() string {
	var b strings.Builder
	for _, p := range cl.logs {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		fmt.Fprintf(&b, "--- %s (last lines)\n%s\n", filepath.Base(p), strings.Join(lines[max(0, len(lines)-15):], "\n"))
	}
	return b.String()
}
