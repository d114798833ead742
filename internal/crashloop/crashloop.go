package crashloop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/cluster"
	"github.com/tierstore/tierstore/internal/crc32c"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/wire"
	"github.com/tierstore/tierstore/masterapi"
)

// Config sizes a crash loop.
type Config struct {
	// NodeCycles and MasterCycles: how many kill -9 of a node and of the
	// master. Every fifth cycle kills the master while MasterCycles last.
	NodeCycles, MasterCycles int
	Nodes                    int // store nodes (default 2)
	// Replicas: DRAM replicas of every put, each on another node (default
	// 1; at most Nodes). With more than one, a node kill must also lose
	// none of the objects with a replica on another node.
	Replicas   int
	Clients    int // concurrent writers per cycle (default 4)
	ObjectSize int // bytes per object (default 64 KiB)
	PerWriter  int // most objects one writer puts per cycle (default 40)
	// PutWindow: how long writers run before the kill, at most (a random
	// moment in [PutWindow/4, PutWindow]). Default 600 ms.
	PutWindow time.Duration
	Dir       string // working directory (SSD dirs); default a temporary one
	Race      bool   // build the binaries with -race
	// Bins: binaries already built (Run builds them when nil).
	Bins *cluster.Binaries
	Seed uint64 // random seed (0: time-based)
	Log  io.Writer
}

func (c *Config) defaults() {
	if c.Nodes <= 0 {
		c.Nodes = 2
	}
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	if c.Clients <= 0 {
		c.Clients = 4
	}
	if c.ObjectSize <= 0 {
		c.ObjectSize = 64 << 10
	}
	if c.PerWriter <= 0 {
		c.PerWriter = 40
	}
	if c.PutWindow <= 0 {
		c.PutWindow = 600 * time.Millisecond
	}
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano())
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// Report is what a crash loop counted over all cycles.
type Report struct {
	NodeCycles, MasterCycles int
	// Acknowledged: puts that returned nil.
	Acknowledged int
	// AnnouncedOnSSD: distinct acknowledged objects the master listed with
	// a SSD replica just before a kill (checked after each restart;
	// AnnouncedChecks counts those checks).
	AnnouncedOnSSD, AnnouncedChecks int
	// HeldElsewhere, HeldElsewhereChecks: with Replicas > 1, the distinct
	// acknowledged objects the master listed with a complete replica on a
	// node other than the victim just before a node kill, and the checks.
	HeldElsewhere, HeldElsewhereChecks int
	// Lost: announced-on-SSD (or held-elsewhere) objects that could not be
	// read after the restart. Must be 0.
	Lost int
	// WrongBytes: reads that returned bytes other than those put. Must be 0.
	WrongBytes int
	// Phantoms: SSD replicas the master listed on a node that does
	// not hold the object, after the restart and a reconcile. Must be 0.
	Phantoms int
	// Duplicates: replica lists naming the same replica twice. Must be 0.
	Duplicates int
	// DRAMOnlyLost: acknowledged objects whose only replica was the killed
	// process's DRAM (or metadata, for a master): allowed losses, counted.
	DRAMOnlyLost int
	Seed         uint64
}

// OK reports whether the run kept every promise.
func (r Report) OK() bool {
	return r.Lost == 0 && r.WrongBytes == 0 && r.Phantoms == 0 && r.Duplicates == 0
}

func (r Report) String() string {
	return fmt.Sprintf("cycles: %d node, %d master; acknowledged %d; announced on SSD %d (%d checks); held on another node %d (%d checks); lost %d; wrong bytes %d; phantom replicas %d; duplicate replicas %d; DRAM-only objects lost with their process %d (seed %d)",
		r.NodeCycles, r.MasterCycles, r.Acknowledged, r.AnnouncedOnSSD, r.AnnouncedChecks, r.HeldElsewhere, r.HeldElsewhereChecks, r.Lost, r.WrongBytes, r.Phantoms, r.Duplicates, r.DRAMOnlyLost, r.Seed)
}

// loop is one crash loop's state.
type loop struct {
	cfg    Config
	bins   *cluster.Binaries
	rng    *rand.Rand
	port   int
	dir    string
	master *cluster.Proc
	nodes  []*cluster.Proc
	ssd    []string
	// objects: every acknowledged key and its value. Only the writer
	// goroutines of a cycle add to it, under mu.
	mu      sync.Mutex
	objects map[string][]byte
	// everAnnounced, everElsewhere: keys counted in Report.AnnouncedOnSSD
	// and HeldElsewhere (the main goroutine only).
	everAnnounced, everElsewhere map[string]bool
	rep                          Report
	peers                        wire.DataPool
}

// Run builds the binaries, starts a master and cfg.Nodes nodes, and runs
// the cycles. It returns the report, and an error for a failure of the
// harness itself (a process that does not come back); broken promises are
// in the report (Report.OK).
func Run(ctx context.Context, cfg Config) (Report, error) {
	cfg.defaults()
	l := &loop{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed>>1|1)), objects: map[string][]byte{},
		everAnnounced: map[string]bool{}, everElsewhere: map[string]bool{}}
	l.rep.Seed = cfg.Seed
	if cfg.Replicas > cfg.Nodes {
		return l.rep, fmt.Errorf("crashloop: %d replicas on %d nodes", cfg.Replicas, cfg.Nodes)
	}
	defer l.peers.Close()
	var err error
	if l.bins = cfg.Bins; l.bins == nil {
		if l.bins, err = cluster.Build(ctx, cfg.Race); err != nil {
			return l.rep, err
		}
		defer l.bins.Close()
	}
	l.dir = cfg.Dir
	if l.dir == "" {
		if l.dir, err = os.MkdirTemp("", "tierstore-crashloop-*"); err != nil {
			return l.rep, err
		}
		defer os.RemoveAll(l.dir)
	}
	if l.port, err = cluster.FreePort(); err != nil {
		return l.rep, err
	}
	defer l.stopAll()
	if err := l.startMaster(); err != nil {
		return l.rep, err
	}
	for i := 0; i < cfg.Nodes; i++ {
		l.ssd = append(l.ssd, filepath.Join(l.dir, fmt.Sprintf("node%d", i)))
		if err := os.MkdirAll(l.ssd[i], 0o755); err != nil {
			return l.rep, err
		}
		p, err := l.startNode(i)
		if err != nil {
			return l.rep, err
		}
		l.nodes = append(l.nodes, p)
	}
	nodeLeft, masterLeft := cfg.NodeCycles, cfg.MasterCycles
	for cycle := 1; nodeLeft+masterLeft > 0; cycle++ {
		if err := ctx.Err(); err != nil {
			return l.rep, err
		}
		killMaster := masterLeft > 0 && (cycle%5 == 0 || nodeLeft == 0)
		if err := l.cycle(ctx, cycle, killMaster); err != nil {
			return l.rep, fmt.Errorf("crashloop: cycle %d: %w", cycle, err)
		}
		if killMaster {
			masterLeft--
			l.rep.MasterCycles++
		} else {
			nodeLeft--
			l.rep.NodeCycles++
		}
	}
	return l.rep, nil
}

func (l *loop) stopAll() {
	for _, n := range l.nodes {
		if n != nil {
			n.Kill(syscall.SIGKILL)
		}
	}
	if l.master != nil {
		l.master.Kill(syscall.SIGKILL)
	}
}

func (l *loop) startMaster() error {
	// The removal log in a state directory survives the master's kill -9.
	p, err := l.bins.Start("tierstore-master", 30*time.Second, cluster.MasterArgs(l.port, "--state_dir="+filepath.Join(l.dir, "master"))...)
	if err != nil {
		return err
	}
	l.master = p
	return nil
}

func (l *loop) startNode(i int) (*cluster.Proc, error) {
	return l.bins.Start("tierstore-node", 30*time.Second,
		cluster.NodeArgs(l.master.Addr, l.ssd[i], "--memory=32MiB", "--bucket_keys_limit=8", "--reconcile_interval=500ms")...)
}

// cycle: writers put objects until a random moment, the victim is killed
// with SIGKILL (writers still running), restarted, and every promise is
// checked.
func (l *loop) cycle(ctx context.Context, cycle int, killMaster bool) error {
	c, err := client.New(ctx, client.Config{MasterAddr: l.master.Addr, Timeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer c.Close()
	victim := l.rng.IntN(len(l.nodes))
	window := l.cfg.PutWindow/4 + time.Duration(l.rng.Int64N(int64(l.cfg.PutWindow*3/4)+1))
	wctx, stopWriters := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := 0; w < l.cfg.Clients; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.write(wctx, c, cycle, w)
		}()
	}
	time.Sleep(window) // the random moment of the kill: writers and offload rounds are running
	announced, elsewhere, err := l.announced(ctx, c, killMaster, victim)
	if err != nil {
		stopWriters()
		wg.Wait()
		return err
	}
	if killMaster {
		l.master.Kill(syscall.SIGKILL)
	} else {
		l.nodes[victim].Kill(syscall.SIGKILL)
	}
	stopWriters()
	wg.Wait()
	what := fmt.Sprintf("node %d", victim)
	if killMaster {
		what = "master"
		if err := l.startMaster(); err != nil {
			return err
		}
	} else if l.nodes[victim], err = l.startNode(victim); err != nil {
		return err
	}
	fmt.Fprintf(l.cfg.Log, "cycle %d: kill -9 %s after %v; %d objects announced on SSD, %d held on another node\n", cycle, what, window.Round(time.Millisecond), len(announced), len(elsewhere))
	return l.check(ctx, announced, elsewhere)
}

// write puts fresh objects until ctx ends, recording each acknowledged one.
// Puts are paced over PutWindow so that the kill lands while writers and
// offload rounds are busy.
func (l *loop) write(ctx context.Context, c *client.Client, cycle, w int) {
	pace := time.NewTicker(l.cfg.PutWindow / time.Duration(l.cfg.PerWriter))
	defer pace.Stop()
	for i := 0; i < l.cfg.PerWriter; i++ {
		select {
		case <-ctx.Done():
			return
		case <-pace.C:
		}
		key := fmt.Sprintf("c%03d-w%d-%05d", cycle, w, i)
		val := make([]byte, l.cfg.ObjectSize)
		for j := range val {
			val[j] = byte(cycle*31 + w*7 + i + j*13)
		}
		if err := c.PutWith(ctx, key, val, client.PutOptions{Replicas: l.cfg.Replicas}); err == nil {
			l.mu.Lock()
			l.objects[key] = val
			l.rep.Acknowledged++
			l.mu.Unlock()
		}
	}
}

// announced lists the acknowledged keys the master holds a SSD
// replica of that the coming kill must not lose: every such key for a
// master kill, the victim node's for a node kill. With Replicas > 1 and a
// node kill, elsewhere lists the keys with a complete replica (DRAM or
// SSD) on another node, which the kill must not lose either.
func (l *loop) announced(ctx context.Context, c *client.Client, all bool, victim int) (onSSD, elsewhere []string, err error) {
	keys := l.keys()
	res, err := c.Master().BatchGetReplicaList(masterapi.WithOffloadPath(ctx), keys)
	if err != nil {
		return nil, nil, err
	}
	for i, r := range res {
		if r.Err != nil {
			continue
		}
		ssd, other := false, false
		for _, rep := range r.Info.Replicas {
			mine := rep.Node == l.nodes[victim].Node
			ssd = ssd || rep.Kind == masterapi.SSD && rep.Status == masterapi.Complete && (all || mine)
			other = other || rep.Status == masterapi.Complete && !mine
		}
		if ssd {
			onSSD = append(onSSD, keys[i])
		}
		if other && !all && l.cfg.Replicas > 1 {
			elsewhere = append(elsewhere, keys[i])
		}
	}
	return onSSD, elsewhere, nil
}

func (l *loop) keys() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	keys := make([]string, 0, len(l.objects))
	for k := range l.objects {
		keys = append(keys, k)
	}
	return keys
}

// check waits until the restarted process has re-registered (bounded), then
// reads every announced (and held-elsewhere) object back, reads a sample
// of all acknowledged objects (none may return wrong bytes), and asks each
// node for every SSD replica the master lists on it.
func (l *loop) check(ctx context.Context, announced, elsewhere []string) error {
	c, err := client.New(ctx, client.Config{MasterAddr: l.master.Addr, Timeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer c.Close()
	l.rep.AnnouncedChecks += len(announced)
	l.rep.HeldElsewhereChecks += len(elsewhere)
	l.rep.AnnouncedOnSSD += countNew(l.everAnnounced, announced)
	l.rep.HeldElsewhere += countNew(l.everElsewhere, elsewhere)
	deadline := time.Now().Add(20 * time.Second)
	l.mustRead(ctx, c, announced, deadline, "announced object")
	l.mustRead(ctx, c, elsewhere, deadline, "object held on another node")
	return l.checkAll(ctx, c)
}

// countNew marks keys in seen and returns how many were not there.
func countNew(seen map[string]bool, keys []string) int {
	n := 0
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			n++
		}
	}
	return n
}

// mustRead reads every key back, retrying until deadline: a key still not
// readable then is lost (Report.Lost), wrong bytes are counted.
func (l *loop) mustRead(ctx context.Context, c *client.Client, keys []string, deadline time.Time, what string) {
	for _, k := range keys {
		for {
			got, err := c.Get(ctx, k)
			if err == nil {
				if !bytes.Equal(got, l.value(k)) {
					l.rep.WrongBytes++
				}
				break
			}
			// A restarted node re-registers within a ping interval or two;
			// until then the object may be unknown or its replica gone.
			if time.Now().After(deadline) {
				l.rep.Lost++
				fmt.Fprintf(l.cfg.Log, "  lost %s %s: %v\n", what, k, err)
				break
			}
			time.Sleep(50 * time.Millisecond) // poll interval of a bounded wait
		}
	}
}

func (l *loop) value(k string) []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.objects[k]
}

// checkAll reads every acknowledged object: wrong bytes are counted,
// objects gone for good are forgotten (DRAM-only losses), and each listed
// replica is checked for phantoms and duplicates.
func (l *loop) checkAll(ctx context.Context, c *client.Client) error {
	keys := l.keys()
	res, err := c.Master().BatchGetReplicaList(masterapi.WithOffloadPath(ctx), keys)
	if err != nil {
		return err
	}
	for i, r := range res {
		k := keys[i]
		if r.Err != nil {
			if errors.Is(r.Err, errcode.ErrObjectNotFound) || errors.Is(r.Err, errcode.ErrReplicaGone) {
				l.forget(k)
			}
			continue
		}
		seen := map[masterapi.Replica]bool{}
		for _, rep := range r.Info.Replicas {
			id := masterapi.Replica{Kind: rep.Kind, Node: rep.Node, Segment: rep.Segment, Offset: rep.Offset}
			if seen[id] {
				l.rep.Duplicates++
			}
			seen[id] = true
			if rep.Kind == masterapi.SSD && rep.Status == masterapi.Complete {
				l.checkSSDReplica(ctx, k, rep, r.Info.Size)
			}
		}
		if got, err := c.Get(ctx, k); err == nil && !bytes.Equal(got, l.value(k)) {
			l.rep.WrongBytes++
		}
	}
	return nil
}

// checkSSDReplica asks rep's node for k over the data plane: a node that
// answers it does not hold the object is a phantom replica; a copy the
// node serves whose bytes are not the acknowledged value is wrong bytes (a
// copy the node itself finds corrupt is refused, not served: invariant 5).
func (l *loop) checkSSDReplica(ctx context.Context, k string, rep masterapi.Replica, size int64) {
	dc, err := l.peers.Get(ctx, rep.Endpoint)
	if err != nil {
		return
	}
	err = dc.ReadSSD(ctx, []byte(k), make([]byte, size), crc32c.Checksum(l.value(k)))
	switch {
	case errors.Is(err, errcode.ErrObjectNotFound):
		l.rep.Phantoms++
		fmt.Fprintf(l.cfg.Log, "  phantom: master lists %s on node %s, which does not hold it\n", k, rep.Node)
	case errors.Is(err, wire.ErrBadChecksum):
		l.rep.WrongBytes++
	}
}

func (l *loop) forget(k string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.objects[k]; ok {
		delete(l.objects, k)
		l.rep.DRAMOnlyLost++
	}
}
