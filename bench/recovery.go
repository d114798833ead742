package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tierstore/tierstore/backend/uring"
	tscluster "github.com/tierstore/tierstore/internal/cluster"
	"github.com/tierstore/tierstore/tier"
)

func init() {
	register(scenario{
		name: "recovery",
		help: "tier engine Open time with N objects, after a clean close and after kill -9 of the process writing",
		run:  runRecovery,
	})
}

// childArg is the first argument that makes the bench binary (or a test
// binary, see TestMain) run recoveryChild instead of a scenario.
const childArg = "recovery-child"

// recoveryBucketKeys is the objects per bucket of the recovery runs (the
// node's default bucket_keys_limit).
const recoveryBucketKeys = 500

func runRecovery(ctx context.Context, e *env) (*result, error) {
	start := time.Now()
	counts := []int{100_000, 1_000_000}
	switch {
	case e.objects > 0:
		counts = []int{e.objects}
	case e.quick:
		counts = []int{20_000}
	}
	size := e.objSize
	if size == 0 {
		size = 4 << 10
	}
	res := &result{Options: map[string]string{
		"object_size": fmtBytes(size),
		"bucket":      fmt.Sprintf("%d objects", recoveryBucketKeys),
		"backend":     "uring+direct",
	}}
	t := &table{
		Title: "tier.Open: after a clean Close, and after kill -9 of a child process offloading (page cache of the tier dropped before each Open)",
		Columns: []string{"objects", "buckets", "populate s", "populate CPU s", "populate peak RSS MiB",
			"open clean ms", "index ms", "reconcile ms", "buckets read", "CPU ms", "RSS MiB",
			"open after kill -9 ms", "index ms", "reconcile ms", "buckets read", "CPU ms", "RSS MiB",
			"orphans removed", "acked before kill", "lost", "wrong bytes"},
	}
	for _, n := range counts {
		row, err := recoveryRun(ctx, e, n, size)
		if err != nil {
			return nil, fmt.Errorf("recovery with %d objects: %w", n, err)
		}
		t.add(row...)
	}
	res.Tables = append(res.Tables, t)
	res.Notes = append(res.Notes,
		"a child process (this binary) offloads the objects and closes; Open is timed in this process; a second child reopens the tier, offloads a bucket at a time and is killed with SIGKILL after 3 acknowledged Offload calls; Open is timed again",
		"lost = objects acknowledged (Persisted) by the killed child that the reopened tier does not have; wrong bytes = acknowledged objects of the killed child, and one in 1000 of the populated ones, read back with other bytes than written: both must be 0",
		"index = pebble open, WAL replay and the bucket records; reconcile = the bucket files listed and the buckets the session record does not cover (tier format 3: none after a clean close, the killed session's after kill -9) read and checked against their records; buckets read = those",
		"CPU = user+system of the process for the phase (populate: the child's rusage; open: this process's getrusage around tier.Open); RSS = peak resident set of the phase (the child's maxrss; for an open, this process's VmHWM after resetting it, /proc/self/clear_refs 5)")
	res.Elapsed = time.Since(start).Seconds()
	return res, nil
}

// recoveryRun populates a tier of n objects in a child, times Open after a
// clean close, then kills a writing child, times Open again and reads back
// what the killed child acknowledged.
func recoveryRun(ctx context.Context, e *env, n int, size int64) ([]any, error) {
	dir := filepath.Join(e.dir, fmt.Sprintf("tier-%d", n))
	defer os.RemoveAll(dir)
	if err := mkdir(dir); err != nil {
		return nil, err
	}
	b := e.progress(fmt.Sprintf("recovery %d populate", n), int64(n))
	t0 := time.Now()
	pop, err := runChild(ctx, dir, "populate", n, size, b, false)
	if err != nil {
		return nil, err
	}
	b.Finish()
	populate := time.Since(t0).Seconds()
	clean, err := timedOpen(dir, n, nil)
	if err != nil {
		return nil, err
	}
	streamed, err := runChild(ctx, dir, "stream", n, size, quietBar{}, true)
	if err != nil {
		return nil, err
	}
	acked := streamed.acked
	var wrong int
	killed, err := timedOpen(dir, n+acked, func(eng *tier.Engine) error {
		wrong, err = verifyRecovered(eng, n, acked, int(size))
		return err
	})
	if err != nil {
		return nil, err
	}
	if wrong > 0 {
		err = fmt.Errorf("%w: %d objects read back with wrong bytes after kill -9", errVerify, wrong)
	}
	return []any{n, clean.Buckets, populate, pop.cpu.Seconds(), mib(pop.maxRSS),
		ms(clean.OpenTime), ms(clean.IndexOpenTime), ms(clean.OpenTime - clean.IndexOpenTime), clean.OpenBucketReads, ms(clean.cpu), mib(clean.peakRSS),
		ms(killed.OpenTime), ms(killed.IndexOpenTime), ms(killed.OpenTime - killed.IndexOpenTime), killed.OpenBucketReads, ms(killed.cpu), mib(killed.peakRSS),
		killed.OrphanFilesRemoved, acked, max(0, int64(n+acked)-killed.Objects), wrong}, err
}

// verifyRecovered reads back every object the killed child acknowledged
// (stream/i for i < acked) and one in 1000 of the populated ones (obj/i),
// and returns how many have other bytes than written (or none).
func verifyRecovered(eng *tier.Engine, n, acked, size int) (wrong int, err error) {
	vs := newValueSource(size, 7)
	check := func(prefix string, idx []int) {
		for len(idx) > 0 {
			c := idx[:min(len(idx), 256)]
			idx = idx[len(c):]
			keys := make([][]byte, len(c))
			for j, i := range c {
				keys[j] = fmt.Appendf(nil, "%s/%09d", prefix, i)
			}
			for j, r := range eng.Load(context.Background(), keys) {
				if r.Err != nil || !bytes.Equal(r.Value, vs.value(c[j])) {
					wrong++
				}
			}
		}
	}
	idx := make([]int, 0, acked)
	for i := range acked {
		idx = append(idx, i)
	}
	check("stream", idx)
	idx = idx[:0]
	for i := 0; i < n; i += 1000 {
		idx = append(idx, i)
	}
	check("obj", idx)
	return wrong, nil
}

// openFigures is a timed Open's Stats and cost.
type openFigures struct {
	tier.Stats
	cpu     time.Duration // this process's CPU during Open
	peakRSS int64         // this process's peak RSS during Open
}

// timedOpen drops the page cache of dir, opens the tier in it and returns its
// Stats (OpenTime among them) and the Open's CPU and peak RSS. The tier must
// hold at least want objects; check, if not nil, runs on the open tier.
func timedOpen(dir string, want int, check func(*tier.Engine) error) (openFigures, error) {
	dropCache(dir)
	runtime.GC()
	resetPeakRSS()
	c0 := selfCPU()
	be, err := uring.Open(filepath.Join(dir, "buckets"), uring.Options{Direct: true, Logger: quietLogger()})
	if err != nil {
		return openFigures{}, err
	}
	eng, err := tier.Open(dir, tier.Options{Backend: be, Logger: quietLogger(), BucketKeysLimit: recoveryBucketKeys})
	if err != nil {
		be.Close()
		return openFigures{}, err
	}
	f := openFigures{Stats: eng.Stats(), cpu: selfCPU() - c0}
	if p, err := readProc(os.Getpid()); err == nil {
		f.peakRSS = p.hwm
	}
	if check != nil {
		err = check(eng)
	}
	if err := errors.Join(err, eng.Close()); err != nil {
		return f, err
	}
	if f.Objects < int64(want) {
		return f, fmt.Errorf("%w: reopened tier has %d objects, %d were acknowledged", errVerify, f.Objects, want)
	}
	return f, nil
}

// resetPeakRSS resets this process's VmHWM to its current RSS (Linux
// 4.0+); without it the peak is the process's lifetime peak.
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// childRun is what a recovery child did: objects acknowledged, and its
// CPU and peak RSS (rusage).
type childRun struct {
	acked  int
	cpu    time.Duration
	maxRSS int64
}

// runChild runs this binary as a recovery child in mode populate (offload
// n objects, close, exit) or stream (reopen, offload a bucket of new objects
// at a time and print each acknowledgement). With kill, runChild sends
// SIGKILL after 3 acknowledged calls and returns the objects acknowledged.
func runChild(ctx context.Context, dir, mode string, n int, size int64, b bar, kill bool) (childRun, error) {
	exe, err := os.Executable()
	if err != nil {
		return childRun{}, err
	}
	cmd := exec.CommandContext(ctx, exe, childArg, "--dir", dir, "--mode", mode,
		"--objects", strconv.Itoa(n), "--object-size", strconv.FormatInt(size, 10))
	tscluster.DieWithParent(cmd)
	cmd.Env = append(os.Environ(), "TIERSTORE_BENCH_CHILD=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return childRun{}, err
	}
	if err := cmd.Start(); err != nil {
		return childRun{}, err
	}
	acked, calls := 0, 0
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var k int
		if _, err := fmt.Sscanf(sc.Text(), "acked %d", &k); err != nil {
			continue
		}
		acked += k
		calls++
		b.Add(k)
		if kill && calls == 3 {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			break
		}
	}
	_, _ = io.Copy(io.Discard, out)
	err = cmd.Wait()
	r := childRun{acked: acked}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		r.maxRSS = ru.Maxrss << 10
	}
	if kill {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			return childRun{}, fmt.Errorf("recovery child was to be killed: %v", err)
		}
		return r, nil
	}
	if err != nil {
		return childRun{}, fmt.Errorf("recovery child %s: %w", mode, err)
	}
	return r, nil
}

// recoveryChild is the child process: see runChild. It prints "acked N"
// after every Offload call that persisted N objects.
func recoveryChild(args []string) error {
	fs := flag.NewFlagSet(childArg, flag.ContinueOnError)
	dir := fs.String("dir", "", "tier directory")
	mode := fs.String("mode", "", "populate or stream")
	n := fs.Int("objects", 0, "objects to populate")
	size := fs.Int64("object-size", 4096, "object size")
	if err := fs.Parse(args); err != nil {
		return err
	}
	be, err := uring.Open(filepath.Join(*dir, "buckets"), uring.Options{Direct: true, Logger: quietLogger()})
	if err != nil {
		return err
	}
	eng, err := tier.Open(*dir, tier.Options{Backend: be, Logger: quietLogger(), BucketKeysLimit: recoveryBucketKeys})
	if err != nil {
		be.Close()
		return err
	}
	vs := newValueSource(int(*size), 7)
	w := bufio.NewWriter(os.Stdout)
	offload := func(prefix string, first, count int) error {
		tasks := make([]tier.Task, count)
		for i := range tasks {
			tasks[i] = tier.Task{Key: fmt.Appendf(nil, "%s/%09d", prefix, first+i), Value: vs.value(first + i)}
		}
		for _, o := range eng.Offload(context.Background(), tasks, nil) {
			if o.Status != tier.Persisted {
				return fmt.Errorf("offload %s: %s: %v", o.Key, o.Status, o.Err)
			}
		}
		fmt.Fprintf(w, "acked %d\n", count)
		return w.Flush()
	}
	const perCall = 10 * recoveryBucketKeys // ten buckets, pipelined
	switch *mode {
	case "populate":
		for i := 0; i < *n; i += perCall {
			if err := offload("obj", i, min(perCall, *n-i)); err != nil {
				return err
			}
		}
		return errors.Join(eng.Close())
	case "stream":
		for i := 0; ; i += recoveryBucketKeys {
			if err := offload("stream", i, recoveryBucketKeys); err != nil {
				return err
			}
		}
	}
	return fmt.Errorf("%w: --mode %q", errUsage, *mode)
}

// isRecoveryChild reports whether args (without the program name) ask for
// the recovery child.
func isRecoveryChild(args []string) bool {
	return len(args) > 0 && args[0] == childArg && strings.TrimSpace(os.Getenv("TIERSTORE_BENCH_CHILD")) == "1"
}
