//go:build linux

package partitions

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tierstore/tierstore/internal/cluster"
	"github.com/tierstore/tierstore/internal/netlab"
)

// all is every scenario, in the order Run runs them.
var all = []scenario{
	{"node-cut-from-master", "a node cut off from the master (not from clients) past client_ttl, clients reading it and writing its keys elsewhere; heal", always, nodeCutFromMaster},
	{"node-paused", "the same with n1 paused (SIGSTOP: its sockets stay open, nothing answers) instead of cut off", always, nodePaused},
	{"node-isolated-offload", "a node cut off from everyone during its offload rounds, then healed", always, nodeIsolatedOffload},
	{"client-node-cut-32MiB", "a client cut off from a node in the middle of a 32 MiB put, then of a 32 MiB get", needTBF, clientNodeCut},
	{"client-master-cut-32MiB", "a client cut off from the master (not from the node) in the middle of a 32 MiB put: its PutEnd is lost", needTBF, clientMasterCut},
	{"ha-leader-cut-from-etcd", "the HA leader cut off from etcd but not from nodes and clients", always, haLeaderFromEtcd},
	{"ha-leader-cut-from-cluster", "the HA leader cut off from nodes and clients but not from etcd", always, haLeaderFromCluster},
	{"split-halves", "the cluster split in two halves with a master in each (the leader in the half without etcd)", always, splitHalves},
	{"delay-loss", "150 ms delay with 50 ms jitter (relay) and 10% loss between 4 clients and the nodes, 1 MiB puts and gets", needRelay, delayLoss},
	{"dup-reorder", "5% duplicated and 10% reordered packets with 5 ms jitter between clients and nodes (relay)", needRelay, dupReorder},
	{"flapping-link", "the link between the master and a node up 2 s, down 1 s, clients working throughout", always, flapping},
}

func always(netlab.Caps) string { return "" }

func needTBF(c netlab.Caps) string {
	if !c.TBF {
		return "needs tc tbf (bandwidth cap) to cut a transfer in its middle: " + c.Notes
	}
	return ""
}

func needRelay(c netlab.Caps) string {
	if !c.Relay {
		return "needs the relay (tun devices): " + c.Notes
	}
	return ""
}

// keys is a client's key set flags.
func keys(prefix string, n int, size string) []string {
	return []string{"--prefix=" + prefix, fmt.Sprintf("--keys=%d", n), "--size=" + size}
}

func with(base []string, more ...string) []string {
	return append(append([]string(nil), base...), more...)
}

func durFlag(d time.Duration) string { return "--duration=" + d.String() }

// basic starts one master (m1) and the named nodes.
func (r *rig) basic(nodes ...string) error {
	if _, err := r.startMaster("m1"); err != nil {
		return err
	}
	for _, n := range nodes {
		if _, err := r.startNode(n); err != nil {
			return err
		}
	}
	return nil
}

// final reads every key of ks from c1 after the heal, retrying each until
// it is served (bounded).
func (r *rig) final(ks []string) error {
	return r.clientRun("c1", "final", 2*time.Minute, with(ks, "--workers=4", "--duration=30s")...)
}

// finalBig reads n keys of 32 MiB after the heal, one at a time: two at
// once through a 100 Mbit/s cap take 5.4 s each, past the client's 5 s
// replica timeout (docs/reliability.md, operator guidance).
func (r *rig) finalBig(prefix string, n int) error {
	return r.clientRun("c1", "final", 2*time.Minute, with(keys(prefix, n, "32MiB"), "--deadline=20s", "--workers=1", "--duration=30s")...)
}

// faultWindow runs g's clients, injects f after lead, heals everything
// hold later and waits for the clients (which must outlive the heal).
func (r *rig) faultWindow(ctx context.Context, g *group, lead, hold, clientTime time.Duration, f ...netlab.Fault) error {
	if g.err != nil {
		return g.wait(time.Second)
	}
	err := sleep(ctx, lead)
	for _, x := range f {
		if err == nil {
			err = r.inject(x)
		}
	}
	if err == nil {
		err = sleep(ctx, hold)
	}
	if herr := r.healAll(); err == nil {
		err = herr
	}
	if werr := g.wait(clientTime + time.Minute); err == nil {
		err = werr
	}
	return err
}

func nodeCutFromMaster(ctx context.Context, r *rig) error {
	return r.nodeAway(ctx, func() netlab.Fault { return netlab.Cut(r.hosts("n1"), r.hosts("m1")) })
}

func nodePaused(ctx context.Context, r *rig) error {
	return r.nodeAway(ctx, func() netlab.Fault { return netlab.Pause("n1", r.nodes[0]) })
}

// nodeAway puts 32 keys on n1 (DRAM and SSD), then takes n1 away with the
// fault fault makes, past client_ttl, while c1 reads every key and c2
// removes and puts half of them again, on n2; heals; reads them all.
func (r *rig) nodeAway(ctx context.Context, fault func() netlab.Fault) error {
	if err := r.basic("n1", "n2"); err != nil {
		return err
	}
	n1, n2 := r.nodes[0], r.nodes[1]
	ks := keys("k", 32, "256KiB")
	if err := r.clientRun("c1", "put", time.Minute, with(ks, "--preferred="+n1.Node, "--duration=20s")...); err != nil {
		return err
	}
	hold := r.dur(5*time.Second, 8*time.Second) // client_ttl is 2 s
	work := time.Second + hold + r.dur(8*time.Second, 15*time.Second)
	g := &group{r: r}
	g.add("c1", "work", with(ks, "--mix=get:4,exists:1", "--seed=11", durFlag(work))...)
	g.add("c2", "work", with(keys("k", 16, "256KiB"), "--mix=replace:2,remove:1,get:1", "--preferred="+n2.Node, "--seed=12", durFlag(work))...)
	if err := r.faultWindow(ctx, g, time.Second, hold, work, fault()); err != nil {
		return err
	}
	r.noteLog(n1, "master asks for a remount", "n1 was expired and remounted")
	return r.final(ks)
}

func nodeIsolatedOffload(ctx context.Context, r *rig) error {
	if err := r.basic("n1", "n2"); err != nil {
		return err
	}
	n1 := r.nodes[0]
	ks := keys("o", 1500, "256KiB")
	hold := r.dur(5*time.Second, 8*time.Second)
	work := 2*time.Second + hold + r.dur(6*time.Second, 15*time.Second)
	g := &group{r: r}
	g.add("c1", "work", with(ks, "--mix=put:3,get:1", "--preferred="+n1.Node, "--seed=21", durFlag(work))...)
	g.add("c2", "work", with(ks, "--mix=get:3,exists:1", "--seed=22", durFlag(work))...)
	if err := r.faultWindow(ctx, g, 2*time.Second, hold, work, netlab.Partition(r.host("n1"))); err != nil {
		return err
	}
	r.noteLog(n1, "notify not answered", "the cut fell in an offload round of n1 (its notify went unanswered)")
	r.noteLog(n1, "bucket kept unannounced", "n1 kept a durable bucket the master did not hear of, to re-register it")
	if out := n1.Output(); !strings.Contains(out, "notify not answered") && !strings.Contains(out, "bucket kept unannounced") {
		r.note("the cut fell in no offload round of n1 this time (neither an unanswered notify nor a bucket kept unannounced)")
	}
	return r.final(ks)
}

// noteLog notes what, and how many times, when p printed s.
func (r *rig) noteLog(p interface{ Output() string }, s, what string) {
	if n := strings.Count(p.Output(), s); n > 0 {
		r.note("%s (%dx)", what, n)
	}
}

func clientNodeCut(ctx context.Context, r *rig) error {
	if _, err := r.startMaster("m1"); err != nil {
		return err
	}
	if _, err := r.startNode("n1", "--memory=256MiB"); err != nil {
		return err
	}
	c1, n1 := r.host("c1"), r.host("n1")
	// 100 Mbit/s both ways: a 32 MiB transfer takes about 2.7 s, and the
	// cut falls 1 s into it.
	for _, f := range []netlab.Fault{netlab.Bandwidth(c1, "100mbit"), netlab.Bandwidth(n1, "100mbit")} {
		if err := r.inject(f); err != nil {
			return err
		}
	}
	// The probe records the big objects that reach SSD: their final
	// reads check that none is lost.
	big := func(prefix string) []string { return with(keys(prefix, 1, "32MiB"), "--deadline=20s") }
	cut := netlab.Cut([]*netlab.Host{c1}, []*netlab.Host{n1})
	hold := r.dur(7*time.Second, 10*time.Second) // past the client's 5 s replica timeout
	// The put: one call, cut in its middle.
	p, err := r.client("c1", "put", big("bp")...)
	if err == nil {
		err = r.cutFor(ctx, time.Second, hold, cut)
	}
	if err == nil {
		err = r.wait(p, time.Minute)
	}
	// The get: the object is stored first, then read again and again.
	if err == nil {
		err = r.clientRun("c1", "put", time.Minute, big("bg")...)
	}
	var g *group
	if err == nil {
		g = &group{r: r}
		g.add("c1", "work", with(big("bg"), "--mix=get:1", "--workers=1", durFlag(time.Second+hold+r.dur(10*time.Second, 20*time.Second)))...)
		err = r.cutFor(ctx, time.Second, hold, cut)
	}
	if g != nil {
		if werr := g.wait(2 * time.Minute); err == nil {
			err = werr
		}
	}
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.heal = r.cutHealed
	r.mu.Unlock()
	// New large puts through the same client host after the heals.
	if err := r.clientRun("c1", "put", time.Minute, with(keys("after", 2, "32MiB"), "--deadline=20s")...); err != nil {
		return err
	}
	for _, k := range []struct {
		prefix string
		n      int
	}{{"bp", 1}, {"bg", 1}, {"after", 2}} {
		if err := r.finalBig(k.prefix, k.n); err != nil {
			return err
		}
	}
	return nil
}

func clientMasterCut(ctx context.Context, r *rig) error {
	if _, err := r.startMaster("m1"); err != nil {
		return err
	}
	if _, err := r.startNode("n1", "--memory=256MiB"); err != nil {
		return err
	}
	c1 := r.host("c1")
	if err := r.inject(netlab.Bandwidth(c1, "100mbit")); err != nil {
		return err
	}
	// Three puts one after the other, each cut off from the master 1 s
	// into its 2.7 s of data: the bytes reach the node, the PutEnd waits
	// in the partition until the put's 8 s deadline.
	hold := r.dur(10*time.Second, 12*time.Second)
	for i := 0; i < 3; i++ {
		p, err := r.client("c1", "put", with(keys(fmt.Sprintf("mp%d-", i), 1, "32MiB"), "--deadline=8s", "--probe=0")...)
		if err == nil {
			err = r.cutFor(ctx, time.Second, hold, netlab.Cut([]*netlab.Host{c1}, r.hosts("m1")))
		}
		if err == nil {
			err = r.wait(p, time.Minute)
		}
		if err != nil {
			return err
		}
	}
	r.mu.Lock()
	r.heal = r.cutHealed
	r.mu.Unlock()
	// The keys can be put again (their puts were revoked) and read.
	for i := 0; i < 3; i++ {
		if err := r.clientRun("c1", "work", time.Minute, with(keys(fmt.Sprintf("mp%d-", i), 1, "32MiB"), "--deadline=20s", "--workers=1", "--mix=put:1,get:1", "--duration=5s")...); err != nil {
			return err
		}
	}
	for i := 0; i < 3; i++ {
		if err := r.finalBig(fmt.Sprintf("mp%d-", i), 1); err != nil {
			return err
		}
	}
	return nil
}

// cutFor injects f after lead, heals it (only it) hold later, and records
// the heal.
func (r *rig) cutFor(ctx context.Context, lead, hold time.Duration, f netlab.Fault) error {
	if err := sleep(ctx, lead); err != nil {
		return err
	}
	if err := r.inject(f); err != nil {
		return err
	}
	err := sleep(ctx, hold)
	if herr := r.lab.Heal(f); err == nil {
		err = herr
	}
	r.mu.Lock()
	r.cutHealed = time.Now().UnixNano()
	r.mu.Unlock()
	fmt.Fprintf(r.log, "    healed %s\n", f)
	return err
}

// haRig starts etcd, masters on the named hosts (the first one leads) and
// nodes n1 and n2, and puts 32 keys.
func (r *rig) haRig(masters ...string) ([]string, error) {
	if err := r.startEtcd(); err != nil {
		return nil, err
	}
	for i, m := range masters {
		if _, err := r.startMaster(m); err != nil {
			return nil, err
		}
		if i == 0 {
			if _, _, err := r.leader(0, 30*time.Second); err != nil {
				return nil, err
			}
		}
	}
	for _, n := range []string{"n1", "n2"} {
		if _, err := r.startNode(n); err != nil {
			return nil, err
		}
	}
	ks := keys("h", 32, "256KiB")
	return ks, r.clientRun("c1", "put", time.Minute, with(ks, "--duration=20s")...)
}

// haWorkload is the clients of the HA scenarios: reads, replaces, exists
// and batch reads and puts from c1 and c2.
func (r *rig) haWorkload(ks []string, work time.Duration) *group {
	g := &group{r: r}
	g.add("c1", "work", with(ks, "--mix=get:3,replace:1,exists:1,bget:1", "--seed=41", durFlag(work))...)
	g.add("c2", "work", with(ks, "--mix=get:3,replace:1,exists:1,bput:1", "--seed=42", durFlag(work))...)
	return g
}

// haLeaderRun is a scenario that cuts the leader of two masters off: its
// keys, how long the cut holds, how long the clients work, the clients,
// and the leader (of term) before the cut.
type haLeaderRun struct {
	ks         []string
	hold, work time.Duration
	g          *group
	old        *cluster.Proc
	term       int
}

// haLeaderStart starts the two-master rig (m1 leads) and its workload,
// lets it run 2 s and finds the leader. When no leader answers it waits
// for the clients before it returns the error.
func (r *rig) haLeaderStart(ctx context.Context) (x haLeaderRun, err error) {
	if x.ks, err = r.haRig("m1", "m2"); err != nil {
		return x, err
	}
	x.hold = r.dur(6*time.Second, 10*time.Second)
	x.work = 2*time.Second + x.hold + r.dur(8*time.Second, 15*time.Second)
	x.g = r.haWorkload(x.ks, x.work)
	if err := sleep(ctx, 2*time.Second); err != nil {
		return x, err
	}
	if x.old, x.term, err = r.leader(0, time.Second); err != nil {
		_ = x.g.wait(x.work + time.Minute)
	}
	return x, err
}

func haLeaderFromEtcd(ctx context.Context, r *rig) error {
	x, err := r.haLeaderStart(ctx)
	if err != nil {
		return err
	}
	cutAt := time.Now()
	if err = r.inject(netlab.Cut([]*netlab.Host{r.hostOf(x.old)}, r.hosts("etcd"))); err == nil {
		err = r.noteTakeover(x.old, x.term, cutAt)
	}
	if err == nil {
		err = r.faultWindow(ctx, x.g, 0, x.hold, x.work)
	} else {
		_ = r.healAll()
		_ = x.g.wait(x.work + time.Minute)
	}
	if err != nil {
		return err
	}
	return r.final(x.ks)
}

// noteTakeover watches, from the cut on, for the old leader to lose its
// leadership (its fence down: it answers "not the leader" from then on),
// for it to switch to its standby server, and for a new leader to be
// elected, and notes how long each took after the cut.
func (r *rig) noteTakeover(old interface{ Output() string }, term int, cutAt time.Time) error {
	const lostLine = "leadership lost"
	standby := fmt.Sprintf("standby (term %d ended)", term)
	lostBefore := strings.Count(old.Output(), lostLine)
	var lost, down, elected time.Duration
	nt := 0
	for lost == 0 || down == 0 || elected == 0 {
		out := old.Output()
		now := time.Since(cutAt)
		if lost == 0 && strings.Count(out, lostLine) > lostBefore {
			lost = now
		}
		if down == 0 && strings.Contains(out, standby) {
			down = now
		}
		if elected == 0 {
			if _, t, err := r.leader(term, 0); err == nil {
				elected, nt = now, t
			}
		}
		if now > 20*time.Second {
			return fmt.Errorf("partitions: 20 s after the leader of term %d was cut off from etcd: leadership lost after %v, standby after %v, a new term elected after %v (0: not seen)", term, lost, down, elected)
		}
		time.Sleep(20 * time.Millisecond) // poll the masters' output, bounded
	}
	r.note("the leader of term %d lost its leadership %v after the cut and was standby %v after it; term %d was elected %v after it",
		term, lost.Round(10*time.Millisecond), down.Round(10*time.Millisecond), nt, elected.Round(10*time.Millisecond))
	return nil
}

func haLeaderFromCluster(ctx context.Context, r *rig) error {
	x, err := r.haLeaderStart(ctx)
	if err != nil {
		return err
	}
	cut := netlab.Cut([]*netlab.Host{r.hostOf(x.old)}, r.hosts("n1", "n2", "c1", "c2"))
	if err := r.faultWindow(ctx, x.g, 0, x.hold, x.work, cut); err != nil {
		return err
	}
	if now, nt, err := r.leader(0, time.Second); err == nil {
		r.note("leader after the heal: term %d (before the cut: %d, %s)", nt, x.term, map[bool]string{true: "the same master", false: "another master"}[now == x.old])
	}
	return r.final(x.ks)
}

func splitHalves(ctx context.Context, r *rig) error {
	// m2 leads first: the half that keeps etcd (m1's) has no leader when
	// the split comes.
	ks, err := r.haRig("m2", "m1")
	if err != nil {
		return err
	}
	hold := r.dur(8*time.Second, 12*time.Second)
	work := 2*time.Second + hold + r.dur(8*time.Second, 15*time.Second)
	g := r.haWorkload(ks, work)
	_, term, _ := r.leader(0, time.Second)
	if err := r.faultWindow(ctx, g, 2*time.Second, hold, work, netlab.Split(r.hosts("etcd", "m1", "n1", "c1"))); err != nil {
		return err
	}
	if _, nt, err := r.leader(0, time.Second); err == nil {
		r.note("leader term %d before the split, %d after the heal", term, nt)
	}
	return r.final(ks)
}

// shapedWork runs 4 clients of 1 MiB puts and gets through faults between
// the clients and the nodes for d, heals, and lets them run on.
func (r *rig) shapedWork(ctx context.Context, d time.Duration, faults func(clients, nodes []*netlab.Host) []netlab.Fault) error {
	if err := r.basic("n1", "n2"); err != nil {
		return err
	}
	clients := r.hosts("c1", "c2", "c3", "c4")
	ks := keys("d", 16, "1MiB")
	after := r.dur(8*time.Second, 15*time.Second)
	g := &group{r: r}
	for i, c := range clients {
		// The client's own defaults: 30 s per call, 5 s per replica.
		g.add(c.Name, "work", with(ks, "--workers=1", "--mix=put:1,get:2,replace:1,bput:1,bget:1", "--deadline=30s", fmt.Sprintf("--seed=%d", 60+i), durFlag(d+after))...)
	}
	before := r.lab.RelayStats()
	err := r.faultWindow(ctx, g, 0, d, d+after, faults(clients, r.hosts("n1", "n2"))...)
	st := r.lab.RelayStats()
	r.note("relay: %d packets relayed, %d dropped, %d duplicated, %d reordered", st.Relayed-before.Relayed, st.Dropped-before.Dropped, st.Duplicated-before.Duplicated, st.Reordered-before.Reordered)
	if err != nil {
		return err
	}
	return r.final(ks)
}

func delayLoss(ctx context.Context, r *rig) error {
	return r.shapedWork(ctx, r.dur(15*time.Second, 60*time.Second), func(c, n []*netlab.Host) []netlab.Fault {
		return []netlab.Fault{netlab.Delay(c, n, netlab.Shape{Delay: 150 * time.Millisecond, Jitter: 50 * time.Millisecond}), netlab.Loss(c, n, 0.10)}
	})
}

func dupReorder(ctx context.Context, r *rig) error {
	return r.shapedWork(ctx, r.dur(10*time.Second, 30*time.Second), func(c, n []*netlab.Host) []netlab.Fault {
		return []netlab.Fault{netlab.Delay(c, n, netlab.Shape{Delay: 5 * time.Millisecond, Jitter: 5 * time.Millisecond, Dup: 0.05, Reorder: 0.10})}
	})
}

func flapping(ctx context.Context, r *rig) error {
	if err := r.basic("n1", "n2"); err != nil {
		return err
	}
	n1 := r.nodes[0]
	ks := keys("f", 64, "256KiB")
	d := r.dur(15*time.Second, 60*time.Second)
	after := r.dur(6*time.Second, 15*time.Second)
	g := &group{r: r}
	g.add("c1", "work", with(ks, "--mix=put:1,get:3,replace:1", "--preferred="+n1.Node, "--seed=71", durFlag(d+after))...)
	g.add("c2", "work", with(ks, "--mix=get:3,exists:1,bget:1", "--seed=72", durFlag(d+after))...)
	flap := netlab.Flap(netlab.Cut(r.hosts("m1"), r.hosts("n1")), 2*time.Second, time.Second)
	if err := r.faultWindow(ctx, g, 0, d, d+after, flap); err != nil {
		return err
	}
	r.note("the link went down %d times", netlab.Downs(flap))
	r.noteLog(n1, "master asks for a remount", "n1 was expired by the master and remounted")
	return r.final(ks)
}
