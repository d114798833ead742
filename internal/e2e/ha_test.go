package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/cluster"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/testkit"
	"github.com/tierstore/tierstore/masterapi"
	"github.com/tierstore/tierstore/mastergrpc"

	_ "github.com/tierstore/tierstore/ha" // etcd:// master addresses
)

// Highly available masters with real processes: a tierstore-etcd, masters
// campaigning in it (session TTL 2 s), nodes and clients finding the
// leader at etcd://.

// haCluster is an etcd and the masters campaigning in it.
type haCluster struct {
	t       *testing.T
	etcd    *proc
	etcdDir string
	url     string // etcd://127.0.0.1:PORT
	masters []*proc
}

func startHA(t *testing.T, masters int) *haCluster {
	t.Helper()
	h := &haCluster{t: t, etcdDir: t.TempDir()}
	h.etcd = start(t, "tierstore-etcd", cluster.EtcdArgs(h.etcdDir, 0)...)
	h.url = cluster.EtcdURL(h.etcd.Proc)
	for i := range masters {
		h.masters = append(h.masters, start(t, "tierstore-master", cluster.HAMasterArgs(h.etcd.Addr)...))
		if i == 0 {
			h.leader(0) // the first one leads
		}
	}
	return h
}

// leader waits for a leader of a term above after that prints it leads,
// and returns its process and term.
// A candidate's key can name it for a moment before its Campaign gives up
// (etcd restarted meanwhile) and it campaigns again under a newer term:
// the leader is the one that says it leads.
func (h *haCluster) leader(after uint64) (*proc, uint64) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		l, err := cluster.WaitLeader(ctx, h.url, after)
		if err != nil {
			h.t.Fatal(err)
		}
		for _, m := range h.masters {
			if m.Addr == l.Addr && m.WaitOutput(fmt.Sprintf("leading term=%d", l.Term), 2*time.Second) == nil {
				return m, l.Term
			}
		}
		if ctx.Err() != nil {
			h.t.Fatalf("no master says it leads term %d (%s)", l.Term, l.Addr)
		}
	}
}

// load puts fresh keys and reads back acknowledged ones from several
// goroutines until stop; every acknowledged put is remembered.
type load struct {
	mu    sync.Mutex // protects acked
	acked map[string][]byte

	putFails, getFails, wrong atomic.Int64
	lastErr                   atomic.Pointer[error]
	stop                      chan struct{}
	wg                        sync.WaitGroup
}

func startLoad(c *client.Client, prefix string, writers, readers int) *load {
	l := &load{acked: map[string][]byte{}, stop: make(chan struct{})}
	for w := range writers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				k := fmt.Sprintf("%s-w%d-%05d", prefix, w, i)
				v := randomValue(16<<10 + rand.IntN(48<<10))
				if err := c.Put(context.Background(), k, v); err != nil {
					l.putFails.Add(1)
					l.lastErr.Store(&err)
					continue
				}
				l.mu.Lock()
				l.acked[k] = v
				l.mu.Unlock()
			}
		}()
	}
	for range readers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				k, v := l.pick()
				if k == "" {
					time.Sleep(time.Millisecond) // nothing acknowledged yet
					continue
				}
				got, err := c.Get(context.Background(), k)
				switch {
				case err != nil:
					l.getFails.Add(1)
					l.lastErr.Store(&err)
				case !bytes.Equal(got, v):
					l.wrong.Add(1)
				}
			}
		}()
	}
	return l
}

func (l *load) pick() (string, []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, v := range l.acked {
		return k, v
	}
	return "", nil
}

func (l *load) end() map[string][]byte {
	close(l.stop)
	l.wg.Wait()
	return l.acked
}

// readAll reads every key of vals (within the client's deadline, which
// covers a failover) and fails on a missing object or a wrong byte.
func readAll(t *testing.T, c *client.Client, vals map[string][]byte) {
	t.Helper()
	for k, v := range vals {
		got, err := c.Get(context.Background(), k)
		if err != nil {
			t.Fatalf("%s lost: %v", k, err)
		}
		if !bytes.Equal(got, v) {
			t.Fatalf("%s read with wrong bytes", k)
		}
	}
}

func haClient(t *testing.T, url string) *client.Client {
	t.Helper()
	c, err := client.New(context.Background(), client.Config{MasterAddr: url, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// kill -9 of the leader during puts, gets and offloads: a standby takes
// over (about 2.5 s at TTL 2 s); every acknowledged put stays readable
// with its bytes, DRAM and SSD objects alike; no read returns wrong bytes;
// offload tasks the dead leader had issued are answered to the new leader
// or issued again, so every object reaches SSD.
func TestHAKill9LeaderUnderLoad(t *testing.T) {
	h := startHA(t, 2)
	a := startNode(t, h.url, t.TempDir())
	b := startNode(t, h.url, t.TempDir())
	_, _ = a, b
	c := haClient(t, h.url)
	pre, _ := putAll(t, c, "pre", 16, 64<<10)
	waitSSDReplicas(t, c, 16)
	old, term := h.leader(0)

	ld := startLoad(c, "load", 2, 2)
	time.Sleep(500 * time.Millisecond) // load running before the kill
	old.Kill(syscall.SIGKILL)
	killed := time.Now()
	_, newTerm := h.leader(term)
	var first time.Duration
	for k, v := range pre {
		got, err := c.Get(context.Background(), k)
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("pre-existing %s after the failover: %v", k, err)
		}
		if first == 0 {
			first = time.Since(killed)
		}
	}
	time.Sleep(time.Second) // load through the new leader
	acked := ld.end()
	t.Logf("failover: term %d -> %d, first read of a pre-existing object %v after kill -9; load: %d puts acknowledged, %d put and %d get failures (last: %v)",
		term, newTerm, first.Round(time.Millisecond), len(acked), ld.putFails.Load(), ld.getFails.Load(), lastErr(ld))
	if ld.wrong.Load() != 0 {
		t.Fatalf("%d reads returned wrong bytes", ld.wrong.Load())
	}
	if ld.getFails.Load() != 0 {
		t.Fatalf("%d reads of acknowledged objects failed (last: %v)", ld.getFails.Load(), lastErr(ld))
	}
	readAll(t, c, pre)
	readAll(t, c, acked)
	// Offload: every acknowledged object reaches SSD under the new leader.
	waitSSDReplicas(t, c, int64(len(pre)+len(acked)))
}

func lastErr(l *load) error {
	if p := l.lastErr.Load(); p != nil {
		return *p
	}
	return nil
}

// A leader paused with SIGSTOP is replaced; resumed, it answers nothing
// but "not the leader" (its fence is down: the clock it checks kept running
// while it was stopped) and becomes a standby; a call it received while
// paused is refused too. The cluster keeps serving through the new leader.
func TestHASIGSTOPLeaderIsFenced(t *testing.T) {
	h := startHA(t, 2)
	startNode(t, h.url, t.TempDir())
	c := haClient(t, h.url)
	vals, _ := putAll(t, c, "s", 8, 32<<10)
	old, term := h.leader(0)
	direct, err := mastergrpc.Dial(context.Background(), old.Addr) // host:port: no failover
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	if _, err := direct.Stats(context.Background()); err != nil { // connected before the pause
		t.Fatal(err)
	}

	old.Kill(syscall.SIGSTOP)
	t.Cleanup(func() { old.Kill(syscall.SIGCONT) })
	paused := make(chan error, 1)
	go func() { // reaches the paused leader's socket; handled after SIGCONT
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_, err := direct.PutStart(ctx, masterapi.PutStartRequest{Key: "while-paused", Size: 100, CRC: 1})
		paused <- err
	}()
	_, newTerm := h.leader(term)
	more, _ := putAll(t, c, "after", 8, 32<<10)
	readAll(t, c, vals)

	old.Kill(syscall.SIGCONT)
	// Refused by the fence, or cut off when the resumed process stops
	// serving: never applied.
	if err := <-paused; !errors.Is(err, errcode.ErrUnavailable) && !errors.Is(err, errcode.ErrRPCFail) {
		t.Fatalf("the call received while paused: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	refused := func(what string, call func() error) {
		t.Helper()
		// A connection reset while the process switches servers is a
		// refusal too: ask again.
		testkit.Within(t, 10*time.Second, "the resumed leader refusing "+what, func() error {
			err := call()
			if errors.Is(err, errcode.ErrUnavailable) {
				return nil
			}
			if !errors.Is(err, errcode.ErrRPCFail) {
				t.Fatalf("the resumed leader answered %s: %v", what, err)
			}
			return err
		})
	}
	refused("a lookup", func() error { _, err := direct.GetReplicaList(ctx, "s-000"); return err })
	refused("a remove", func() error { return direct.Remove(ctx, "s-001", true) })
	if err := old.WaitOutput(fmt.Sprintf("standby (term %d ended)", term), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	readAll(t, c, vals)
	readAll(t, c, more)
	if ok, err := c.Exists(context.Background(), "while-paused"); ok || err != nil {
		t.Fatalf("the put sent to the paused leader exists: %v %v", ok, err)
	}
	if cur, _ := h.leader(newTerm - 1); cur == old {
		t.Fatal("the resumed leader leads again")
	}
}

// etcd itself restarted (kill -9, then started again on its data and
// port): the leader cannot confirm its session and steps down; once etcd
// is back a leader of a newer term is elected, the nodes re-register, and
// nothing stored is lost.
func TestHAEtcdRestart(t *testing.T) {
	h := startHA(t, 2)
	startNode(t, h.url, t.TempDir())
	c := haClient(t, h.url)
	vals, _ := putAll(t, c, "e", 8, 32<<10)
	waitSSDReplicas(t, c, 8)
	more, _ := putAll(t, c, "dram", 4, 16<<10) // DRAM only, or not offloaded yet
	old, term := h.leader(0)

	port := h.etcd.Addr[len("127.0.0.1:"):]
	h.etcd.Kill(syscall.SIGKILL)
	if err := old.WaitOutput(fmt.Sprintf("standby (term %d ended)", term), 15*time.Second); err != nil {
		t.Fatal(err)
	}
	h.etcd = start(t, "tierstore-etcd", "--data-dir", h.etcdDir, "--listen-client", "127.0.0.1:"+port)
	_, newTerm := h.leader(term)
	t.Logf("etcd restarted: term %d -> %d", term, newTerm)
	readAll(t, c, vals)
	readAll(t, c, more)
	if err := c.Put(context.Background(), "after-etcd", randomValue(1000)); err != nil {
		t.Fatal(err)
	}
}
