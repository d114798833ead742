package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
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
		Columns: []string{"objects", "buckets", "populate s", "open clean ms", "index ms", "reconcile ms",
			"open after kill -9 ms", "index ms", "reconcile ms", "orphans removed", "acked before kill", "lost"},
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
		"lost = objects acknowledged (Persisted) by the killed child that the reopened tier does not have: must be 0",
		"index = pebble open, WAL replay and the bucket records; reconcile = the bucket files listed and every bucket's trailer checked against its record (one read per bucket)")
	res.Elapsed = time.Since(start).Seconds()
	return res, nil
}

// recoveryRun populates a tier of n objects in a child, times Open after a
// clean close, then kills a writing child and times Open again.
func recoveryRun(ctx context.Context, e *env, n int, size int64) ([]any, error) {
	dir := filepath.Join(e.dir, fmt.Sprintf("tier-%d", n))
	defer os.RemoveAll(dir)
	if err := mkdir(dir); err != nil {
		return nil, err
	}
	b := e.progress(fmt.Sprintf("recovery %d populate", n), int64(n))
	t0 := time.Now()
	if _, err := runChild(ctx, dir, "populate", n, size, b, false); err != nil {
		return nil, err
	}
	b.Finish()
	populate := time.Since(t0).Seconds()
	clean, err := timedOpen(dir, n)
	if err != nil {
		return nil, err
	}
	acked, err := runChild(ctx, dir, "stream", n, size, quietBar{}, true)
	if err != nil {
		return nil, err
	}
	killed, err := timedOpen(dir, n+acked)
	if err != nil {
		return nil, err
	}
	return []any{n, clean.Buckets, populate, ms(clean.OpenTime), ms(clean.IndexOpenTime), ms(clean.OpenTime - clean.IndexOpenTime),
		ms(killed.OpenTime), ms(killed.IndexOpenTime), ms(killed.OpenTime - killed.IndexOpenTime),
		killed.OrphanFilesRemoved, acked, max(0, int64(n+acked)-killed.Objects)}, nil
}

// timedOpen drops the page cache of dir, opens the tier in it and returns its
// Stats (OpenTime among them). The tier must hold at least want objects.
func timedOpen(dir string, want int) (tier.Stats, error) {
	dropCache(dir)
	be, err := uring.Open(filepath.Join(dir, "buckets"), uring.Options{Direct: true, Logger: quietLogger()})
	if err != nil {
		return tier.Stats{}, err
	}
	eng, err := tier.Open(dir, tier.Options{Backend: be, Logger: quietLogger(), BucketKeysLimit: recoveryBucketKeys})
	if err != nil {
		be.Close()
		return tier.Stats{}, err
	}
	st := eng.Stats()
	if err := eng.Close(); err != nil {
		return st, err
	}
	if st.Objects < int64(want) {
		return st, fmt.Errorf("%w: reopened tier has %d objects, %d were acknowledged", errVerify, st.Objects, want)
	}
	return st, nil
}

// runChild runs this binary as a recovery child in mode populate (offload
// n objects, close, exit) or stream (reopen, offload a bucket of new objects
// at a time and print each acknowledgement). With kill, runChild sends
// SIGKILL after 3 acknowledged calls and returns the objects acknowledged.
func runChild(ctx context.Context, dir, mode string, n int, size int64, b bar, kill bool) (int, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, exe, childArg, "--dir", dir, "--mode", mode,
		"--objects", strconv.Itoa(n), "--object-size", strconv.FormatInt(size, 10))
	tscluster.DieWithParent(cmd)
	cmd.Env = append(os.Environ(), "TIERSTORE_BENCH_CHILD=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, err
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
	if kill {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			return 0, fmt.Errorf("recovery child was to be killed: %v", err)
		}
		return acked, nil
	}
	if err != nil {
		return 0, fmt.Errorf("recovery child %s: %w", mode, err)
	}
	return acked, nil
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
