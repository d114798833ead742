// Command netlab-client is the client process of the network-fault
// scenarios (internal/partitions): it runs inside a lab host (ip netns
// exec), calls a tierstore cluster through package client, and records
// every call in a history file (internal/netlab/history) for the checker.
//
// Modes:
//
//	put    put every key once (workers share the keys), then wait (at
//	       most --duration) until the master lists them all on SSD
//	work   random calls on the keys for --duration (--mix weights)
//	final  read every key, each again until the cluster serves it or
//	       --duration has passed (the reads are marked final)
//
// In put and work mode a probe asks the master, every --probe, which of
// the objects this process put it lists on SSD (a lookup marked as the
// offload path's, so it counts toward no admission) and records what it
// saw. It prints "netlab-client done" and exits 0 when its calls are over,
// whatever they answered; 2 for a usage error.
package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/netlab/history"
	"github.com/tierstore/tierstore/internal/units"
	"github.com/tierstore/tierstore/masterapi"

	_ "github.com/tierstore/tierstore/ha" // etcd:// master addresses
)

type options struct {
	master, name, historyPath, mode, prefix, preferred, mix string
	keys, first, workers, batch                             int
	size                                                    int64
	duration, deadline, replicaTimeout, probe               time.Duration
	seed                                                    uint64
}

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("netlab-client", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.master, "master", "", "master address host:port or etcd://... (required)")
	fs.StringVar(&o.name, "name", "c", "client name in the history")
	fs.StringVar(&o.historyPath, "history", "", "history file to append to (required)")
	fs.StringVar(&o.mode, "mode", "work", "put, work or final")
	fs.StringVar(&o.prefix, "prefix", "k", "key prefix: keys are PREFIX00000 ...")
	fs.IntVar(&o.keys, "keys", 16, "number of keys")
	fs.IntVar(&o.first, "first", 0, "number of the first key")
	fs.IntVar(&o.workers, "workers", 2, "concurrent workers")
	size := fs.String("size", "64KiB", "value size")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "work: how long; final: bound of the retries")
	fs.DurationVar(&o.deadline, "deadline", 5*time.Second, "deadline of each call")
	fs.DurationVar(&o.replicaTimeout, "replica_timeout", 0, "client.Config.ReplicaTimeout (0: the client's default)")
	fs.DurationVar(&o.probe, "probe", 300*time.Millisecond, "SSD probe period (0: no probe)")
	fs.StringVar(&o.mix, "mix", "put:1,get:4,replace:1,exists:1", "work: call weights (put, get, replace = remove then put, remove, exists, bput and bget = BatchPut and BatchGet of --batch keys)")
	fs.IntVar(&o.batch, "batch", 4, "keys of one bput or bget")
	fs.StringVar(&o.preferred, "preferred", "", "node id puts prefer (client.Config.PreferredNode)")
	fs.Uint64Var(&o.seed, "seed", 1, "random seed")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	n, err := units.Parse(*size)
	switch {
	case err != nil:
		return o, fmt.Errorf("--size: %w", err)
	case n <= 0:
		return o, fmt.Errorf("--size: %d is not positive", n)
	case o.master == "" || o.historyPath == "":
		return o, errors.New("--master and --history are required")
	case o.mode != "put" && o.mode != "work" && o.mode != "final":
		return o, fmt.Errorf("--mode %q: want put, work or final", o.mode)
	case o.keys <= 0 || o.workers <= 0 || o.deadline <= 0 || o.batch <= 0:
		return o, errors.New("--keys, --workers, --batch and --deadline must be positive")
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	o.size = n
	if _, err := parseMix(o.mix); err != nil {
		return o, err
	}
	return o, nil
}

var validCall = map[string]bool{"put": true, "get": true, "replace": true, "remove": true, "exists": true, "bput": true, "bget": true}

// mixEntry is one call kind and its weight.
type mixEntry struct {
	call   string
	weight int
}

func parseMix(s string) ([]mixEntry, error) {
	var m []mixEntry
	total := 0
	for _, part := range strings.Split(s, ",") {
		name, w, ok := strings.Cut(part, ":")
		n, err := strconv.Atoi(w)
		switch {
		case !ok || err != nil || n < 0:
			return nil, fmt.Errorf("--mix: %q: want call:weight", part)
		case !validCall[name]:
			return nil, fmt.Errorf("--mix: unknown call %q", name)
		}
		m = append(m, mixEntry{name, n})
		total += n
	}
	if total == 0 {
		return nil, errors.New("--mix: every weight is 0")
	}
	return m, nil
}

func main() {
	o, err := parse(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "netlab-client:", err)
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "netlab-client:", err)
		os.Exit(1)
	}
	fmt.Println("netlab-client done")
}

// proc is one client process.
type proc struct {
	o     options
	c     *client.Client
	rec   *history.Recorder
	probe *probe
	mix   []mixEntry
}

func run(o options) error {
	rec, err := history.Create(o.historyPath)
	if err != nil {
		return err
	}
	defer rec.Close()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := client.New(context.Background(), client.Config{MasterAddr: o.master, Timeout: o.deadline,
		ReplicaTimeout: o.replicaTimeout, PreferredNode: o.preferred, Logger: log})
	if err != nil {
		return err
	}
	defer c.Close()
	p := &proc{o: o, c: c, rec: rec}
	p.mix, _ = parseMix(o.mix)
	stopProbe := func() {}
	if o.probe > 0 && o.mode != "final" {
		p.probe = &probe{c: c, rec: rec, name: o.name + "/probe", pending: map[string]uint32{}}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); p.probe.loop(ctx, o.probe) }()
		stopProbe = func() { cancel(); <-done }
	}
	var wg sync.WaitGroup
	for w := 0; w < o.workers; w++ {
		wg.Go(func() { p.worker(w) })
	}
	wg.Wait()
	if o.mode == "put" && p.probe != nil {
		p.probe.drain(o.duration)
	}
	stopProbe()
	return rec.Close()
}

func (p *proc) key(i int) string { return fmt.Sprintf("%s%05d", p.o.prefix, p.o.first+i) }

func (p *proc) worker(w int) {
	name := fmt.Sprintf("%s/%d", p.o.name, w)
	switch p.o.mode {
	case "put":
		for i := w; i < p.o.keys; i += p.o.workers {
			p.put(name, p.key(i), uint64(i))
		}
	case "final":
		end := time.Now().Add(p.o.duration)
		for i := w; i < p.o.keys; i += p.o.workers {
			for !history.Served(p.get(name, p.key(i), true)) && time.Now().Before(end) {
				time.Sleep(200 * time.Millisecond) // spacing of the retries of one key, bounded by --duration
			}
		}
	default:
		rng := rand.New(rand.NewPCG(p.o.seed, uint64(w)))
		end := time.Now().Add(p.o.duration)
		for seq := uint64(0); time.Now().Before(end); seq++ {
			p.call(name, rng, seq)
		}
	}
}

// call makes one random call of the mix.
func (p *proc) call(name string, rng *rand.Rand, seq uint64) {
	total := 0
	for _, m := range p.mix {
		total += m.weight
	}
	n := rng.IntN(total)
	call := p.mix[0].call
	for _, m := range p.mix {
		if n < m.weight {
			call = m.call
			break
		}
		n -= m.weight
	}
	key := p.key(rng.IntN(p.o.keys))
	switch call {
	case "bput":
		p.batchPut(name, p.batchKeys(rng), seq)
	case "bget":
		p.batchGet(name, p.batchKeys(rng))
	case "put":
		p.put(name, key, seq)
	case "get":
		p.get(name, key, false)
	case "replace":
		if p.remove(name, key) {
			p.put(name, key, seq)
		}
	case "remove":
		p.remove(name, key)
	case "exists":
		p.exists(name, key)
	}
}

// value returns the bytes of put seq of key by this worker: unique per
// (process, worker, key, seq).
func (p *proc) value(name, key string, seq uint64) []byte {
	s := sha256.Sum256([]byte(fmt.Sprintf("%s|%s|%d|%d", name, key, seq, p.o.seed)))
	b := make([]byte, p.o.size)
	_, _ = rand.NewChaCha8(s).Read(b)
	return b
}

// do times one call and records it; call may fill in what it read (the
// value's hash, exists's answer).
func (p *proc) do(op history.Op, call func(ctx context.Context, op *history.Op) error) history.Op {
	ctx, cancel := context.WithTimeout(context.Background(), p.o.deadline)
	defer cancel()
	op.Deadline = int64(p.o.deadline)
	op.Start = time.Now().UnixNano()
	err := call(ctx, &op)
	op.End = time.Now().UnixNano()
	if err != nil {
		op.Err = errcode.Of(err).String()
		op.Msg = err.Error()
	}
	_ = p.rec.Record(op) // a full disk ends the run's checks, not this call
	return op
}

func (p *proc) put(name, key string, seq uint64) {
	v := p.value(name, key, seq)
	op := history.Op{Client: name, Kind: history.Put, Key: key, Value: history.Hash(v), CRC: client.CRC32C(v)}
	op = p.do(op, func(ctx context.Context, _ *history.Op) error { return p.c.Put(ctx, key, v) })
	if op.Err == "" && p.probe != nil {
		p.probe.add(key, op.CRC)
	}
}

func (p *proc) get(name, key string, final bool) history.Op {
	return p.do(history.Op{Client: name, Kind: history.Get, Key: key, Final: final}, func(ctx context.Context, op *history.Op) error {
		v, err := p.c.Get(ctx, key)
		if err == nil {
			op.Value = history.Hash(v)
		}
		return err
	})
}

func (p *proc) remove(name, key string) bool {
	op := p.do(history.Op{Client: name, Kind: history.Remove, Key: key}, func(ctx context.Context, _ *history.Op) error {
		return p.c.Remove(ctx, key, true)
	})
	return op.Err == "" || op.Err == "OBJECT_NOT_FOUND"
}

func (p *proc) exists(name, key string) {
	p.do(history.Op{Client: name, Kind: history.Exists, Key: key}, func(ctx context.Context, op *history.Op) (err error) {
		op.Found, err = p.c.Exists(ctx, key)
		return err
	})
}

// batchKeys draws --batch distinct keys (fewer when there are fewer).
func (p *proc) batchKeys(rng *rand.Rand) []string {
	perm := rng.Perm(p.o.keys)
	ks := make([]string, 0, p.o.batch)
	for _, i := range perm[:min(p.o.batch, len(perm))] {
		ks = append(ks, p.key(i))
	}
	return ks
}

// batch times one batch call and records one operation per key, each
// with the batch's start and end and its own result (fill sets what an
// item read).
func (p *proc) batch(ops []history.Op, call func(ctx context.Context) []error, fill func(i int, op *history.Op)) {
	ctx, cancel := context.WithTimeout(context.Background(), p.o.deadline)
	defer cancel()
	start := time.Now().UnixNano()
	errs := call(ctx)
	end := time.Now().UnixNano()
	for i := range ops {
		ops[i].Start, ops[i].End, ops[i].Deadline = start, end, int64(p.o.deadline)
		if i < len(errs) && errs[i] != nil {
			ops[i].Err, ops[i].Msg = errcode.Of(errs[i]).String(), errs[i].Error()
		} else if fill != nil {
			fill(i, &ops[i])
		}
		_ = p.rec.Record(ops[i])
	}
}

func (p *proc) batchPut(name string, keys []string, seq uint64) {
	vals := make([][]byte, len(keys))
	ops := make([]history.Op, len(keys))
	for i, k := range keys {
		vals[i] = p.value(name, k, seq)
		ops[i] = history.Op{Client: name, Kind: history.Put, Key: k, Value: history.Hash(vals[i]), CRC: client.CRC32C(vals[i])}
	}
	p.batch(ops, func(ctx context.Context) []error { return p.c.BatchPut(ctx, keys, vals) }, nil)
	for _, op := range ops {
		if op.Err == "" && p.probe != nil {
			p.probe.add(op.Key, op.CRC)
		}
	}
}

func (p *proc) batchGet(name string, keys []string) {
	ops := make([]history.Op, len(keys))
	for i, k := range keys {
		ops[i] = history.Op{Client: name, Kind: history.Get, Key: k}
	}
	var vals [][]byte
	p.batch(ops, func(ctx context.Context) (errs []error) { vals, errs = p.c.BatchGet(ctx, keys); return errs },
		func(i int, op *history.Op) { op.Value = history.Hash(vals[i]) })
}

// probe records when the master lists the objects this process put on
// SSD.
type probe struct {
	c    *client.Client
	rec  *history.Recorder
	name string
	// mu guards pending: key -> CRC32C of the put not yet seen on SSD.
	mu      sync.Mutex
	pending map[string]uint32
}

func (pr *probe) add(key string, crc uint32) {
	pr.mu.Lock()
	pr.pending[key] = crc
	pr.mu.Unlock()
}

// drain waits until every object put is seen on SSD (or gone), at most
// bound.
func (pr *probe) drain(bound time.Duration) {
	end := time.Now().Add(bound)
	for time.Now().Before(end) {
		pr.mu.Lock()
		n := len(pr.pending)
		pr.mu.Unlock()
		if n == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond) // the probe loop empties pending; poll it, bounded
	}
}

func (pr *probe) loop(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			pr.once(context.Background()) // objects offloaded since the last tick
			return
		case <-t.C:
			pr.once(ctx)
		}
	}
}

func (pr *probe) once(ctx context.Context) {
	pr.mu.Lock()
	keys := make([]string, 0, len(pr.pending))
	for k := range pr.pending {
		keys = append(keys, k)
	}
	pr.mu.Unlock()
	if len(keys) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(masterapi.WithOffloadPath(ctx), 2*time.Second)
	defer cancel()
	res, err := pr.c.Master().BatchGetReplicaList(ctx, keys)
	if err != nil || len(res) != len(keys) {
		return // the master is unreachable from here now: try at the next tick
	}
	now := time.Now().UnixNano()
	pr.mu.Lock()
	defer pr.mu.Unlock()
	for i, r := range res {
		if r.Err != nil {
			if errors.Is(r.Err, errcode.ErrObjectNotFound) {
				delete(pr.pending, keys[i])
			}
			continue
		}
		for _, rep := range r.Info.Replicas {
			if rep.Kind == masterapi.SSD && rep.Status == masterapi.Complete {
				_ = pr.rec.Record(history.Op{Client: pr.name, Kind: history.OnSSD, Key: keys[i], Start: now, End: now, CRC: r.Info.CRC})
				if pr.pending[keys[i]] == r.Info.CRC {
					delete(pr.pending, keys[i])
				}
				break
			}
		}
	}
}
