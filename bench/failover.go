package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tierstore/tierstore/client"
	tscluster "github.com/tierstore/tierstore/internal/cluster"
)

func init() {
	register(scenario{
		name: "failover",
		help: "highly available masters: kill -9 of the leader (20x, 3x with --quick), time to the first Get through the new leader, objects lost; then puts/gets of 8 clients through 5 failovers",
		run:  runFailover,
	})
}

// Failover shape (docs/benchmarks.md, failover): a tierstore-etcd and 3
// masters with the default HA settings (session TTL 3 s, rebuild window
// 2 s), store nodes with their default ping and heartbeat, all built from
// this module and run on 127.0.0.1.
const (
	foMasters      = 3
	foObjects      = 60 // per category
	foObjectSize   = 64 << 10
	foSoakNodes    = 8
	foSoakClients  = 8
	foSoakFailover = 5
)

// foCluster is the etcd, the masters and the nodes of a failover run.
type foCluster struct {
	bins    *tscluster.Binaries
	dir     string
	etcd    *tscluster.Proc
	url     string
	masters []*tscluster.Proc
	nodes   []*tscluster.Proc
	quiet   *slog.Logger
}

func startFailoverCluster(ctx context.Context, dir string, ssdNodes, dramNodes int) (*foCluster, error) {
	bins, err := tscluster.Build(ctx, false)
	if err != nil {
		return nil, fmt.Errorf("%w: failover needs the go tool inside the tierstore module: %v", errUnavailable, err)
	}
	fc := &foCluster{bins: bins, dir: dir, quiet: slog.New(slog.DiscardHandler)}
	if err := fc.start(ctx, ssdNodes, dramNodes); err != nil {
		fc.stop()
		return nil, err
	}
	return fc, nil
}

func (fc *foCluster) start(ctx context.Context, ssdNodes, dramNodes int) error {
	var err error
	if fc.etcd, err = fc.bins.Start("tierstore-etcd", 30*time.Second, tscluster.EtcdArgs(filepath.Join(fc.dir, "etcd"), 0)...); err != nil {
		return err
	}
	fc.url = tscluster.EtcdURL(fc.etcd)
	for range foMasters {
		if err := fc.addMaster(); err != nil {
			return err
		}
	}
	if _, err := fc.leader(ctx, 0); err != nil {
		return err
	}
	for i := range ssdNodes + dramNodes {
		args := []string{"--master=" + fc.url, "--listen=127.0.0.1:0", "--memory=32MiB"}
		if i < ssdNodes {
			ssd := filepath.Join(fc.dir, fmt.Sprintf("ssd%d", i))
			if err := os.MkdirAll(ssd, 0o755); err != nil {
				return fmt.Errorf("bench: failover: %w", err)
			}
			args = append(args, "--enable_offload", "--ssd_dir="+ssd, "--ssd_capacity=128MiB", "--bucket_size_limit=4MiB")
		}
		n, err := fc.bins.Start("tierstore-node", 30*time.Second, args...)
		if err != nil {
			return err
		}
		fc.nodes = append(fc.nodes, n)
	}
	return nil
}

// addMaster starts a master with the default HA settings (a supervisor
// restarting a killed one does the same).
func (fc *foCluster) addMaster() error {
	m, err := fc.bins.Start("tierstore-master", 30*time.Second, "--rpc_address=127.0.0.1", "--rpc_port=0", "--metrics_port=0",
		"--enable_offload=true", "--log_level=warn", "--enable_ha=true", "--etcd_endpoints="+fc.etcd.Addr)
	if err != nil {
		return err
	}
	fc.masters = append(fc.masters, m)
	return nil
}

// leader waits for the leader of a term above after that says it leads.
func (fc *foCluster) leader(ctx context.Context, after uint64) (*tscluster.Proc, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		l, err := tscluster.WaitLeader(ctx, fc.url, after)
		if err != nil {
			return nil, err
		}
		for _, m := range fc.masters {
			if m.Addr == l.Addr && m.WaitOutput(fmt.Sprintf("leading term=%d", l.Term), 2*time.Second) == nil {
				m.Node = fmt.Sprint(l.Term) // the term it leads
				return m, nil
			}
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("bench: failover: no master says it leads term %d", l.Term)
		}
	}
}

// killLeader kills the leader with SIGKILL, starts a standby in its place
// and returns the kill time and the dead leader's term.
func (fc *foCluster) killLeader(ctx context.Context) (time.Time, uint64, error) {
	l, err := fc.leader(ctx, 0)
	if err != nil {
		return time.Time{}, 0, err
	}
	var term uint64
	fmt.Sscan(l.Node, &term)
	l.Kill(syscall.SIGKILL)
	killed := time.Now()
	fc.masters = slices.DeleteFunc(fc.masters, func(m *tscluster.Proc) bool { return m == l })
	return killed, term, fc.addMaster()
}

func (fc *foCluster) stop() {
	for i := len(fc.nodes) - 1; i >= 0; i-- {
		fc.nodes[i].Kill(syscall.SIGTERM)
	}
	for _, n := range fc.nodes {
		if n.Wait(20*time.Second) != nil {
			n.Kill(syscall.SIGKILL)
		}
	}
	for _, m := range fc.masters {
		m.Kill(syscall.SIGKILL)
	}
	if fc.etcd != nil {
		fc.etcd.Kill(syscall.SIGKILL)
	}
	if fc.bins != nil {
		fc.bins.Close()
	}
}

func (fc *foCluster) client(ctx context.Context, preferred string) (*client.Client, error) {
	return client.New(ctx, client.Config{MasterAddr: fc.url, PreferredNode: preferred, Timeout: 30 * time.Second, Logger: fc.quiet})
}

func runFailover(ctx context.Context, e *env) (*result, error) {
	start := time.Now()
	rounds := 20
	soakRounds := foSoakFailover
	if e.quick {
		rounds, soakRounds = 3, 2
	}
	res := &result{Options: map[string]string{"masters": fmt.Sprint(foMasters), "session_ttl": "3s (default)",
		"rebuild_window": "2s (default)", "failovers": fmt.Sprint(rounds), "objects": fmt.Sprintf("3 x %d x 64KiB", foObjects)}}
	dist, lost, err := failoverRounds(ctx, e, rounds)
	if dist != nil {
		res.Tables = append(res.Tables, dist, lost)
	}
	if err != nil {
		return res, err
	}
	soak, err := failoverSoak(ctx, e, soakRounds)
	if soak != nil {
		res.Tables = append(res.Tables, soak)
	}
	res.Notes = append(res.Notes, "failover time: from kill -9 of the leader to the end of the first Get of a pre-existing object, sent right after the kill by a client that knows only etcd://")
	res.Elapsed = time.Since(start).Seconds()
	return res, err
}

// foSet is the pre-existing objects of one category.
type foSet struct {
	name string
	vals map[string][]byte
}

// failoverRounds measures rounds failovers on a cluster of 3 masters, 2 SSD
// nodes and 1 DRAM-only node holding objects of three categories.
func failoverRounds(ctx context.Context, e *env, rounds int) (*table, *table, error) {
	fc, err := startFailoverCluster(ctx, filepath.Join(e.dir, "rounds"), 2, 1)
	if err != nil {
		return nil, nil, err
	}
	defer fc.stop()
	sets, probe, err := fc.populate(ctx)
	if err != nil {
		return nil, nil, err
	}
	c, err := fc.client(ctx, "")
	if err != nil {
		return nil, nil, err
	}
	defer c.Close()
	var times []time.Duration
	lostBy := map[string]int{}
	var wrong int
	for r := range rounds {
		killed, term, err := fc.killLeader(ctx)
		if err != nil {
			return nil, nil, err
		}
		if _, err := c.Get(ctx, probe); err != nil {
			return nil, nil, fmt.Errorf("bench: failover %d: the first Get after the kill failed: %w", r+1, err)
		}
		times = append(times, time.Since(killed))
		if _, err := fc.leader(ctx, term); err != nil {
			return nil, nil, err
		}
		time.Sleep(2500 * time.Millisecond) // the new leader's rebuild window (2 s) is over
		for _, s := range sets {
			l, w := verifySet(ctx, c, s)
			lostBy[s.name] += l
			wrong += w
		}
		fmt.Fprintf(e.stderr, "failover %d/%d: %v\n", r+1, rounds, times[len(times)-1].Round(time.Millisecond))
	}
	dist := durationTable("failover: kill -9 of the leader to the first successful Get (s)", times)
	lost := &table{Title: "failover: objects lost over all failovers", Columns: []string{"category", "objects", "lost", "wrong bytes"}}
	for _, s := range sets {
		lost.add(s.name, float64(len(s.vals)), float64(lostBy[s.name]), 0.0)
	}
	lost.Rows[0][3] = float64(wrong)
	if wrong > 0 {
		return dist, lost, fmt.Errorf("%w: failover: %d reads returned wrong bytes", errVerify, wrong)
	}
	for _, s := range sets {
		if lostBy[s.name] > 0 {
			return dist, lost, fmt.Errorf("bench: failover: %d %s objects lost", lostBy[s.name], s.name)
		}
	}
	return dist, lost, nil
}

// populate puts the three categories: on the DRAM-only node, on an SSD
// node (offloaded, DRAM kept), and on SSD only (DRAM dropped). It returns
// them and a key to probe.
func (fc *foCluster) populate(ctx context.Context) ([]foSet, string, error) {
	sets := []foSet{{name: "DRAM only (node without SSD)"}, {name: "DRAM and SSD"}, {name: "SSD only"}}
	prefs := []string{fc.nodes[2].Node, fc.nodes[0].Node, fc.nodes[1].Node}
	for i := range sets {
		c, err := fc.client(ctx, prefs[i])
		if err != nil {
			return nil, "", err
		}
		sets[i].vals = map[string][]byte{}
		for j := range foObjects {
			k := fmt.Sprintf("fo-%d-%03d", i, j)
			v := soakValue(k, foObjectSize)
			if err := c.Put(ctx, k, v); err != nil {
				c.Close()
				return nil, "", fmt.Errorf("bench: failover: put %s: %w", k, err)
			}
			sets[i].vals[k] = v
		}
		c.Close()
	}
	c, err := fc.client(ctx, "")
	if err != nil {
		return nil, "", err
	}
	defer c.Close()
	if err := waitOffloaded(ctx, c, 2*foObjects); err != nil {
		return nil, "", err
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range sets[2].vals {
			if !yield(k) {
				return
			}
		}
	})
	if _, err := c.EvictDRAM(ctx, keys, false); err != nil {
		return nil, "", fmt.Errorf("bench: failover: evict: %w", err)
	}
	return sets, "fo-0-000", nil
}

func waitOffloaded(ctx context.Context, c *client.Client, n int64) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := c.Stats(ctx)
		if err == nil && st.SSDReplicas >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: failover: %d of %d objects offloaded after 60s (%v)", st.SSDReplicas, n, err)
		}
		time.Sleep(100 * time.Millisecond) // poll the master's counters
	}
}

// verifySet reads every object of s: the lost ones and those read with
// wrong bytes.
func verifySet(ctx context.Context, c *client.Client, s foSet) (lost, wrong int) {
	for k, v := range s.vals {
		got, err := c.Get(ctx, k)
		switch {
		case err != nil:
			lost++
		case !bytes.Equal(got, v):
			wrong++
		}
	}
	return lost, wrong
}

func durationTable(title string, ds []time.Duration) *table {
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	pct := func(p float64) float64 { return s[min(len(s)-1, int(p*float64(len(s))))].Seconds() }
	t := &table{Title: title, Columns: []string{"failovers", "min", "p50", "mean", "p90", "max"}}
	t.add(float64(len(s)), s[0].Seconds(), pct(0.5), (sum / time.Duration(len(s))).Seconds(), pct(0.9), s[len(s)-1].Seconds())
	return t
}

// failoverSoak runs the soak's 8 clients (puts, gets, removes, every read
// checked against what was put) on 3 masters and 8 nodes while the leader
// is killed rounds times.
func failoverSoak(ctx context.Context, e *env, rounds int) (*table, error) {
	fc, err := startFailoverCluster(ctx, filepath.Join(e.dir, "soak"), foSoakNodes, 0)
	if err != nil {
		return nil, err
	}
	defer fc.stop()
	var cnt soakCounts
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for id := range foSoakClients {
		wg.Go(func() { _ = soakClient(sctx, fc.url, id, &cnt) })
	}
	var kills []time.Duration
	var killErr error
	for r := range rounds {
		time.Sleep(4 * time.Second) // load through the current leader
		killed, term, err := fc.killLeader(ctx)
		if err == nil {
			_, err = fc.leader(ctx, term)
		}
		if err != nil {
			killErr = err
			break
		}
		kills = append(kills, time.Since(killed))
		fmt.Fprintf(e.stderr, "soak failover %d/%d\n", r+1, rounds)
	}
	time.Sleep(4 * time.Second) // load through the last leader
	cancel()
	wg.Wait()
	t := &table{Title: "failover soak: 3 masters, 8 nodes, 8 clients", Columns: []string{"figure", "value", "verdict"}}
	t.add("failovers", float64(len(kills)), verdictOf(len(kills) == rounds))
	t.add("puts acknowledged / sent", fmt.Sprintf("%d / %d", cnt.putsOK.Load(), cnt.puts.Load()), "")
	t.add("gets (hits)", fmt.Sprintf("%d (%d)", cnt.gets.Load(), cnt.hits.Load()), "")
	t.add("wrong bytes (reads)", float64(cnt.wrong.Load()), verdictOf(cnt.wrong.Load() == 0))
	cnt.putErrs.Range(func(k, v any) bool {
		first, _ := cnt.firstErr.Load(k)
		t.add(fmt.Sprintf("puts failed: %s", k), float64(v.(*atomic.Int64).Load()), fmt.Sprint("first: ", first))
		return true
	})
	if killErr != nil {
		return t, killErr
	}
	if cnt.wrong.Load() > 0 {
		return t, fmt.Errorf("%w: failover soak: %d reads returned wrong bytes", errVerify, cnt.wrong.Load())
	}
	if cnt.putsOK.Load() == 0 {
		return t, errors.New("bench: failover soak: no put succeeded")
	}
	return t, nil
}

func verdictOf(ok bool) string {
	if ok {
		return "ok"
	}
	return "FAIL"
}
