package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tierstore/tierstore/mastergrpc"
	"github.com/tierstore/tierstore/node"
	"github.com/tierstore/tierstore/tier"
)

func init() {
	register(scenario{
		name: "reconcile",
		help: "re-registration and reconcile of one node with --keys SSD objects (10M) against a master process over loopback gRPC",
		run:  runReconcile,
	})
}

// Reconcile at scale (docs/benchmarks.md, "reconcile at scale"): a
// tierstore-master process built from cmd/, and in this process a real
// store node (node.Start, its re-registration and Reconcile code, gRPC to
// the master over loopback) whose SSD tier is synthetic: it lists --keys
// keys of about 32 bytes, generated on the fly, so the node's memory is
// the node's own, not a key list held by the benchmark.
const (
	reconcileDefaultKeys = 10_000_000
	reconcileQuickKeys   = 100_000
	reconcileSample      = 20 * time.Millisecond
)

// synthTier is an SSDTier whose objects are keys 0..n-1 minus lost, plus
// strays n..n+strays-1 (never announced to the master), minus removed.
type synthTier struct {
	mu      sync.Mutex // protects the fields below
	n       int64
	lost    map[int64]bool
	strays  int64
	removed map[string]bool
	mark    []byte
}

func newSynthTier(n int64) *synthTier {
	return &synthTier{n: n, lost: map[int64]bool{}, removed: map[string]bool{}}
}

// synthKey appends key i: "kvcache/" + 16 hex digits + "/b" + 6 digits
// (32 bytes for i below a million, 33 to 34 above).
func synthKey(buf []byte, i int64) []byte {
	buf = append(buf[:0], "kvcache/"...)
	h := uint64(i)*0x9e3779b97f4a7c15 ^ 0xdeadbeef
	for s := 60; s >= 0; s -= 4 {
		buf = append(buf, "0123456789abcdef"[h>>uint(s)&15])
	}
	buf = append(buf, "/b"...)
	var d [20]byte
	ds := strconv.AppendInt(d[:0], i, 10)
	for k := len(ds); k < 6; k++ {
		buf = append(buf, '0')
	}
	return append(buf, ds...)
}

func (s *synthTier) Keys(fn func(key []byte, info tier.KeyInfo) bool) error {
	s.mu.Lock()
	n, strays := s.n, s.strays
	lost := make(map[int64]bool, len(s.lost))
	for k := range s.lost {
		lost[k] = true
	}
	removed := make(map[string]bool, len(s.removed))
	for k := range s.removed {
		removed[k] = true
	}
	s.mu.Unlock()
	var buf []byte
	for i := range n + strays {
		if lost[i] {
			continue
		}
		buf = synthKey(buf, i)
		if removed[string(buf)] {
			continue
		}
		if !fn(buf, tier.KeyInfo{Size: 64 << 10, CRC: uint32(i), Bucket: uint64(i / 500)}) {
			return nil
		}
	}
	return nil
}

func (s *synthTier) Remove(key []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removed[string(key)] = true
	return nil
}

func (s *synthTier) RemoveKeys(keys [][]byte) (int, error) {
	for _, k := range keys {
		_ = s.Remove(k)
	}
	return len(keys), nil
}

// Mark and SetMark: the bench's node never restarts on a synthTier.
func (s *synthTier) Mark() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mark, nil
}

func (s *synthTier) SetMark(b []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mark = append([]byte(nil), b...)
	return nil
}

func (s *synthTier) Stats() tier.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return tier.Stats{Objects: s.n - int64(len(s.lost)) + s.strays - int64(len(s.removed))}
}

func (s *synthTier) Offload(_ context.Context, tasks []tier.Task, _ tier.NotifyFunc) []tier.Outcome {
	out := make([]tier.Outcome, len(tasks))
	for i, t := range tasks {
		out[i] = tier.Outcome{Key: t.Key, Status: tier.Failed, Err: fmt.Errorf("bench: synthetic tier"), Retryable: false}
	}
	return out
}

func (s *synthTier) Load(_ context.Context, keys [][]byte) []tier.LoadResult {
	out := make([]tier.LoadResult, len(keys))
	for i, k := range keys {
		out[i] = tier.LoadResult{Err: fmt.Errorf("bench: %q: %w", k, tier.ErrNotFound)}
	}
	return out
}

func (s *synthTier) Exists([]byte) (bool, error) { return false, nil }
func (s *synthTier) Close() error                { return nil }

// drift makes the SSD lose lost more keys the master lists (spread over
// the key space) and hold strays more keys the master never heard of.
func (s *synthTier) drift(lost, strays int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	lost = min(lost, s.n-int64(len(s.lost)))
	for c, added := uint64(len(s.lost)), int64(0); added < lost; c++ {
		if idx := int64(mix(c) % uint64(s.n)); !s.lost[idx] {
			s.lost[idx] = true
			added++
		}
	}
	s.strays += strays
}

// mix spreads c over 64 bits (the lost keys' positions).
func mix(c uint64) uint64 {
	c = (c ^ c>>30) * 0xbf58476d1ce4e5b9
	c = (c ^ c>>27) * 0x94d049bb133111eb
	return c ^ c>>31
}

// procStat is a process's CPU time and resident memory.
type procStat struct {
	cpu      time.Duration // user + system
	rss, hwm int64         // bytes: resident now, peak
}

// procThreads is the CPU time (to the nanosecond, from
// /proc/PID/task/*/schedstat: /proc/PID/stat counts 10 ms ticks) and the
// context switches (voluntary and not, from .../status) of pid's threads
// that are alive (a Go process keeps its threads).
func procThreads(pid int) (cpu time.Duration, switches int64, err error) {
	tasks, err := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*"))
	if err != nil || len(tasks) == 0 {
		return 0, 0, fmt.Errorf("bench: /proc/%d/task: no threads (%v)", pid, err)
	}
	for _, t := range tasks {
		sched, err1 := os.ReadFile(filepath.Join(t, "schedstat"))
		status, err2 := os.ReadFile(filepath.Join(t, "status"))
		if err1 != nil || err2 != nil {
			continue // a thread that exited meanwhile
		}
		if f := strings.Fields(string(sched)); len(f) > 0 {
			ns, _ := strconv.ParseInt(f[0], 10, 64)
			cpu += time.Duration(ns)
		}
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) == 2 && (f[0] == "voluntary_ctxt_switches:" || f[0] == "nonvoluntary_ctxt_switches:") {
				v, _ := strconv.ParseInt(f[1], 10, 64)
				switches += v
			}
		}
	}
	return cpu, switches, nil
}

// readProc reads /proc/PID/stat and /proc/PID/status.
func readProc(pid int) (procStat, error) {
	var st procStat
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return st, err
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	if len(f) < 13 {
		return st, fmt.Errorf("bench: /proc/%d/stat: %d fields", pid, len(f))
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64) // utime, field 14
	stt, _ := strconv.ParseInt(f[12], 10, 64)
	st.cpu = time.Duration(ut+stt) * time.Second / 100 // USER_HZ is 100 on Linux
	b, err = os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return st, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			st.rss = v << 10
		case "VmHWM:":
			st.hwm = v << 10
		}
	}
	return st, nil
}

// selfCPU is this process's CPU time (getrusage).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// heapBytes is this process's live Go heap (objects), without a
// stop-the-world.
func heapBytes() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// stepFigures is what one measured step cost.
type stepFigures struct {
	wall, masterCPU, nodeCPU time.Duration
	masterPeakRSS            int64 // largest master RSS seen during the step
	nodePeakRSS              int64 // largest RSS of this process (the node) seen during the step
	masterRSSGrowth          int64 // master RSS at the end minus at the start
	nodeHeapGrowth           int64 // largest node heap seen minus at the start
}

// measure runs fn while sampling the master's RSS and this process's heap.
func measureStep(pid int, fn func() error) (stepFigures, error) {
	runtime.GC()
	var f stepFigures
	p0, err := readProc(pid)
	if err != nil {
		return f, err
	}
	c0, h0 := selfCPU(), heapBytes()
	var peakRSS, peakHeap, nodeRSS atomic.Int64
	peakRSS.Store(p0.rss)
	peakHeap.Store(h0)
	if p, err := readProc(os.Getpid()); err == nil {
		nodeRSS.Store(p.rss)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(reconcileSample)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			if p, err := readProc(pid); err == nil && p.rss > peakRSS.Load() {
				peakRSS.Store(p.rss)
			}
			if h := heapBytes(); h > peakHeap.Load() {
				peakHeap.Store(h)
			}
			if p, err := readProc(os.Getpid()); err == nil && p.rss > nodeRSS.Load() {
				nodeRSS.Store(p.rss)
			}
		}
	}()
	start := time.Now()
	err = fn()
	f.wall = time.Since(start)
	close(stop)
	wg.Wait()
	f.nodeCPU = selfCPU() - c0
	p1, perr := readProc(pid)
	if err == nil {
		err = perr
	}
	f.masterCPU = p1.cpu - p0.cpu
	f.masterPeakRSS = max(peakRSS.Load(), p1.rss)
	f.masterRSSGrowth = p1.rss - p0.rss
	f.nodeHeapGrowth = peakHeap.Load() - h0
	f.nodePeakRSS = nodeRSS.Load()
	return f, err
}

func runReconcile(ctx context.Context, e *env) (*result, error) {
	keys := e.keys
	if keys == 0 {
		keys = reconcileDefaultKeys
		if e.quick {
			keys = reconcileQuickKeys
		}
	}
	bin := filepath.Join(e.dir, "bin")
	if err := buildBinaries(ctx, bin); err != nil {
		return nil, err
	}
	cl := &cluster{}
	defer cl.stop()
	// The default --metadata_shards, 65536 (master.Config.Shards):
	// ReconcileEnd's scan for lost keys is by shard.
	margs := []string{"--rpc_port=0", "--metrics_port=0", "--log_level=warn", "--client_ttl=600"}
	if e.procProf != "" {
		margs = append(margs, "--cpuprofile="+filepath.Join(e.procProf, "reconcile-master.pprof"))
	}
	line, err := cl.start(ctx, e.dir, filepath.Join(bin, "tierstore-master"), "tierstore-master listening on ", margs...)
	if err != nil {
		return nil, fmt.Errorf("%w\n%s", err, cl.logTail())
	}
	addr := strings.Fields(line)[0]
	pid := cl.procs[0].Process.Pid
	m, err := mastergrpc.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	res := &result{Options: map[string]string{"keys": strconv.FormatInt(keys, 10), "master": "process, loopback gRPC, default --metadata_shards (65536)"}}
	tb := &table{Title: fmt.Sprintf("reconcile at scale: one node with %d SSD objects (keys of ~32 B)", keys),
		Columns: []string{"step", "seconds", "master CPU s", "node CPU s", "keys sent", "master RSS MiB (peak)", "master RSS growth MiB", "node RSS MiB (peak)", "node heap growth MiB"}}
	res.Tables = append(res.Tables, tb)
	p0, _ := readProc(pid)
	res.Notes = append(res.Notes, fmt.Sprintf("master RSS before re-registration: %.0f MiB", mib(p0.rss)))

	st := newSynthTier(keys)
	cfg := node.DefaultConfig()
	cfg.Listen = ""
	cfg.Memory = 16 << 20
	cfg.HeartbeatInterval, cfg.ReconcileInterval = time.Hour, time.Hour
	cfg.Logger = slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var n *node.Node
	f, err := measureStep(pid, func() (err error) {
		n, err = node.Start(ctx, cfg, m, node.WithTier(st), node.WithName("bench-node"))
		return err
	})
	if err != nil {
		return nil, err
	}
	defer n.Close()
	ms, err := m.Stats(ctx)
	if err != nil || ms.SSDReplicas != keys {
		return nil, fmt.Errorf("bench: reconcile: master lists %d SSD replicas after re-registration, want %d (%v)", ms.SSDReplicas, keys, err)
	}
	addStep(tb, "re-register (node start, chunks of 4096 in columns)", f, keys)
	perKey := float64(f.masterRSSGrowth) / float64(keys)
	res.Notes = append(res.Notes, fmt.Sprintf("master RSS per registered object: %.0f B; re-registration master CPU per key: %.2f us",
		perKey, float64(f.masterCPU.Microseconds())/float64(keys)))

	for _, d := range []struct {
		name          string
		lost, strays  int64
		dropped, kept int64
	}{
		{"reconcile, nothing changed", 0, 0, 0, 0},
		{"reconcile, 100 keys drifted (50 lost, 50 strays)", 50, 50, 50, 0},
		{"reconcile, 10000 keys drifted (5000 lost, 5000 strays)", 5000, 5000, 5000, 0},
	} {
		st.drift(d.lost, d.strays)
		before := n.Stats()
		msBefore, _ := m.Stats(ctx)
		f, err := measureStep(pid, func() error { return n.Reconcile(ctx) })
		if err != nil {
			// The steps measured so far are still reported.
			return res, fmt.Errorf("bench: %s after %.1f s: %w", d.name, f.wall.Seconds(), err)
		}
		after := n.Stats()
		msAfter, _ := m.Stats(ctx)
		if got := msBefore.SSDReplicas - msAfter.SSDReplicas; got != d.dropped {
			return nil, fmt.Errorf("bench: %s: master dropped %d replicas, want %d", d.name, got, d.dropped)
		}
		if got := after.ReconcileRemoved - before.ReconcileRemoved; got != d.strays {
			return nil, fmt.Errorf("bench: %s: node removed %d strays, want %d", d.name, got, d.strays)
		}
		addStep(tb, d.name, f, after.ReconcileKeysSent-before.ReconcileKeysSent)
	}
	return res, nil
}

func addStep(tb *table, name string, f stepFigures, sent int64) {
	tb.add(name, f.wall.Seconds(), f.masterCPU.Seconds(), f.nodeCPU.Seconds(), sent,
		mib(f.masterPeakRSS), mib(f.masterRSSGrowth), mib(f.nodePeakRSS), mib(f.nodeHeapGrowth))
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
