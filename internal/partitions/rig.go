//go:build linux

package partitions

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tierstore/tierstore/internal/cluster"
	"github.com/tierstore/tierstore/internal/netlab"
	"github.com/tierstore/tierstore/internal/netlab/history"
)

// ClientBinary is the client process of the scenarios, built into the
// Binaries' directory by Run.
const (
	ClientBinary  = "netlab-client"
	clientPackage = "./internal/netlab/cmd/netlab-client"
	masterPort    = 50051
	etcdPort      = 2379
)

// Config selects and sizes the scenarios.
type Config struct {
	// Full runs the durations of `go run ./bench partitions` (60 s of
	// delay and loss, 60 s of flapping, ...); the default is the short
	// form CI runs.
	Full bool
	// Only names the scenarios to run (nil: all).
	Only []string
	// Bins: binaries already built (with netlab-client added); Run builds
	// them when nil.
	Bins *cluster.Binaries
	Race bool      // build with -race (when Run builds)
	Dir  string    // working directory; default a temporary one
	Log  io.Writer // progress and the first violations; default discard
}

// rig is one scenario's network and processes.
type rig struct {
	cfg  Config
	lab  *netlab.Lab
	dir  string
	log  io.Writer
	ha   bool
	etcd *cluster.Proc
	// masters and nodes in start order; procHost says where each runs.
	masters, nodes []*cluster.Proc
	procHost       map[*cluster.Proc]*netlab.Host

	mu        sync.Mutex // guards histories, notes, heal, cutHealed and seq
	histories []string
	notes     []string
	heal      int64 // Unix ns of the last heal
	cutHealed int64 // Unix ns of the last heal of one fault (cutFor)
	seq       int
}

// dur picks the short or the full form of a duration.
func (r *rig) dur(short, full time.Duration) time.Duration {
	if r.cfg.Full {
		return full
	}
	return short
}

// host returns host name, adding it to the lab the first time.
func (r *rig) host(name string) *netlab.Host {
	if h := r.lab.Host(name); h != nil {
		return h
	}
	h, err := r.lab.AddHost(name)
	if err != nil {
		panic(fmt.Sprintf("partitions: %v", err)) // the lab was probed at start: a failure here is a broken machine
	}
	return h
}

func (r *rig) hosts(names ...string) []*netlab.Host {
	hs := make([]*netlab.Host, len(names))
	for i, n := range names {
		hs[i] = r.host(n)
	}
	return hs
}

func (r *rig) note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

func (r *rig) start(host, binary string, wait time.Duration, args ...string) (*cluster.Proc, error) {
	h := r.host(host)
	p, err := h.Start(binary, wait, args...)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.procHost[p] = h
	r.mu.Unlock()
	return p, nil
}

// startEtcd starts tierstore-etcd on host "etcd"; masters then campaign in
// it and nodes and clients find the leader through it.
func (r *rig) startEtcd() error {
	h := r.host("etcd")
	p, err := r.start("etcd", "tierstore-etcd", 30*time.Second, "--data-dir", filepath.Join(r.dir, "etcd"),
		"--listen-client", fmt.Sprintf("%s:%d", h.IP, etcdPort))
	r.etcd, r.ha = p, err == nil
	return err
}

// masterAddr is what nodes and clients are given as --master.
func (r *rig) masterAddr() string {
	if r.ha {
		return fmt.Sprintf("etcd://%s:%d", r.host("etcd").IP, etcdPort)
	}
	return fmt.Sprintf("%s:%d", r.host("m1").IP, masterPort)
}

// startMaster starts a master on host (a highly available one when etcd
// runs): the test flags of cluster.MasterArgs on the host's address.
func (r *rig) startMaster(host string, extra ...string) (*cluster.Proc, error) {
	ip := r.host(host).IP
	var args []string
	if r.ha {
		args = cluster.HAMasterArgs(fmt.Sprintf("%s:%d", r.host("etcd").IP, etcdPort), append([]string{"--rpc_address=" + ip}, extra...)...)
	} else {
		args = cluster.MasterArgs(masterPort, append([]string{"--rpc_address=" + ip, "--state_dir=" + filepath.Join(r.dir, "state-"+host)}, extra...)...)
	}
	p, err := r.start(host, "tierstore-master", 30*time.Second, args...)
	if err == nil {
		r.masters = append(r.masters, p)
	}
	return p, err
}

// startNode starts a node on host with its SSD directory in the rig's
// directory: cluster.NodeArgs on the host's address, 128 MiB of DRAM,
// small buckets (offload rounds are frequent) and a fast reconcile.
func (r *rig) startNode(host string, extra ...string) (*cluster.Proc, error) {
	ssd := filepath.Join(r.dir, "ssd-"+host)
	if err := os.MkdirAll(ssd, 0o755); err != nil {
		return nil, err
	}
	args := cluster.NodeArgs(r.masterAddr(), ssd, append([]string{"--listen=" + r.host(host).IP + ":0",
		"--memory=128MiB", "--bucket_keys_limit=8", "--reconcile_interval=1s"}, extra...)...)
	p, err := r.start(host, "tierstore-node", 30*time.Second, args...)
	if err == nil {
		r.nodes = append(r.nodes, p)
	}
	return p, err
}

// client starts a netlab-client on host with its own history file.
func (r *rig) client(host, mode string, flags ...string) (*cluster.Proc, error) {
	r.mu.Lock()
	r.seq++
	name := fmt.Sprintf("%s.%d", host, r.seq)
	path := filepath.Join(r.dir, name+".jsonl")
	r.histories = append(r.histories, path)
	r.mu.Unlock()
	args := append([]string{"--master=" + r.masterAddr(), "--name=" + name, "--history=" + path, "--mode=" + mode}, flags...)
	return r.start(host, ClientBinary, 0, args...)
}

// clientRun runs a client to its end (bounded by bound).
func (r *rig) clientRun(host, mode string, bound time.Duration, flags ...string) error {
	p, err := r.client(host, mode, flags...)
	if err != nil {
		return err
	}
	return r.wait(p, bound)
}

// wait waits for a client to exit 0.
func (r *rig) wait(p *cluster.Proc, bound time.Duration) error {
	if err := p.Wait(bound); err != nil {
		return fmt.Errorf("partitions: %s %s: %w\n%s", p.Name, strings.Join(p.Args, " "), err, tail(p.Output(), 20))
	}
	return nil
}

// group runs clients at once and waits for all of them.
type group struct {
	r     *rig
	procs []*cluster.Proc
	err   error
}

func (g *group) add(host, mode string, flags ...string) {
	if g.err != nil {
		return
	}
	p, err := g.r.client(host, mode, flags...)
	if err != nil {
		g.err = err
		return
	}
	g.procs = append(g.procs, p)
}

func (g *group) wait(bound time.Duration) error {
	errs := []error{g.err}
	for _, p := range g.procs {
		errs = append(errs, g.r.wait(p, bound))
	}
	return errors.Join(errs...)
}

// inject injects f, noting it.
func (r *rig) inject(f netlab.Fault) error {
	fmt.Fprintf(r.log, "    inject %s\n", f)
	return r.lab.Inject(f)
}

// healAll heals every fault and records the moment.
func (r *rig) healAll() error {
	err := r.lab.HealAll()
	r.mu.Lock()
	r.heal = time.Now().UnixNano()
	r.mu.Unlock()
	fmt.Fprintf(r.log, "    healed\n")
	return err
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// check reads every client's history and checks it.
func (r *rig) check() (*history.Report, error) {
	ops, err := history.Read(r.histories...)
	if err != nil {
		return nil, err
	}
	return history.Check(ops, history.Options{Heal: r.heal}), nil
}

var (
	leadingRE = regexp.MustCompile(`leading term=(\d+)`)
	endedRE   = regexp.MustCompile(`standby \(term (\d+) ended\)`)
)

// leader waits (up to bound) for a master that leads a term above after
// and has not printed its end, and returns it with its term.
func (r *rig) leader(after int, bound time.Duration) (*cluster.Proc, int, error) {
	deadline := time.Now().Add(bound)
	for {
		for _, m := range r.masters {
			out := m.Output()
			lead := leadingRE.FindAllStringSubmatch(out, -1)
			if len(lead) == 0 {
				continue
			}
			term, _ := strconv.Atoi(lead[len(lead)-1][1])
			ended := false
			for _, e := range endedRE.FindAllStringSubmatch(out, -1) {
				ended = ended || e[1] == lead[len(lead)-1][1]
			}
			if term > after && !ended {
				return m, term, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, 0, fmt.Errorf("partitions: no master leads a term above %d after %v", after, bound)
		}
		time.Sleep(20 * time.Millisecond) // poll the masters' output, bounded
	}
}

// hostOf is the host a process runs in.
func (r *rig) hostOf(p *cluster.Proc) *netlab.Host {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.procHost[p]
}

// saveLogs writes every process's output to DIR/logs/HOST.NAME.log (kept
// with the histories when Config.Dir is given).
func (r *rig) saveLogs() {
	dir := filepath.Join(r.dir, "logs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for p, h := range r.procHost {
		n++
		_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s.%s.%d.log", h.Name, p.Name, n)), []byte(strings.Join(p.Args, " ")+"\n"+p.Output()), 0o644)
	}
}

// dumpLogs writes the last lines of every server process's output.
func (r *rig) dumpLogs(w io.Writer) {
	procs := append(append([]*cluster.Proc{r.etcd}, r.masters...), r.nodes...)
	for _, p := range procs {
		if p != nil {
			fmt.Fprintf(w, "--- %s on %s:\n%s\n", p.Name, r.hostOf(p).Name, tail(p.Output(), 25))
		}
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
