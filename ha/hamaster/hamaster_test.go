package hamaster_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierstore/tierstore/ha"
	"github.com/tierstore/tierstore/ha/hamaster"
	"github.com/tierstore/tierstore/ha/hatest"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/master"
	"github.com/tierstore/tierstore/mastergrpc"
)

// change is one OnChange call of one candidate.
type change struct {
	c       *candidate
	term    uint64
	leading bool
}

// candidate is one Master running in the test.
type candidate struct {
	m      *hamaster.Master
	addr   string
	cancel context.CancelFunc
	ended  chan struct{} // closed when Run returns
	err    error         // Run's result, once ended is closed
}

// start runs a candidate whose changes go to changes.
func start(t *testing.T, etcd *hatest.Etcd, mcfg master.Config, changes chan<- change) *candidate {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	c := &candidate{addr: lis.Addr().String(), ended: make(chan struct{})}
	log := slog.New(slog.DiscardHandler)
	mcfg.Logger = log
	c.m = hamaster.New(lis, hamaster.Config{
		Master:   mcfg,
		Election: ha.Config{Endpoints: etcd.Endpoints(), Address: c.addr, SessionTTL: time.Second, Logger: log},
		OnChange: func(term uint64, leading bool) { changes <- change{c, term, leading} },
	})
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go func() { c.err = c.m.Run(ctx); close(c.ended) }()
	t.Cleanup(func() {
		cancel()
		if !c.wait() {
			t.Errorf("Run of %s did not return 30 s after its context ended", c.addr)
		}
	})
	return c
}

// wait waits (at most 30 s) for Run to return and says whether it did.
func (c *candidate) wait() bool {
	select {
	case <-c.ended:
		return true
	case <-time.After(30 * time.Second):
		return false
	}
}

// next waits (at most 30 s) for the next change.
func next(t *testing.T, changes <-chan change) change {
	t.Helper()
	select {
	case ch := <-changes:
		return ch
	case <-time.After(30 * time.Second):
		t.Fatal("no leadership change within 30 s")
		return change{}
	}
}

// exists asks addr whether a key exists, as a client would.
func exists(t *testing.T, addr string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := mastergrpc.Dial(ctx, addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = c.ExistKey(ctx, "k")
	return err
}

func metricsStatus(m *hamaster.Master) int {
	rec := httptest.NewRecorder()
	m.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Code
}

// One of two candidates leads and serves; the other answers "not the
// leader" and has no Service. When the leader's Run ends (it resigns), the
// standby leads a newer term at once, and the old leader's listener is
// closed.
func TestStandbyTakesOverWhenLeaderResigns(t *testing.T) {
	etcd := hatest.Start(t)
	changes := make(chan change, 16)
	a := start(t, etcd, master.DefaultConfig(), changes)
	b := start(t, etcd, master.DefaultConfig(), changes)
	won := next(t, changes)
	require.True(t, won.leading)
	leader, standby := won.c, b
	if leader == b {
		standby = a
	}
	require.NotNil(t, leader.m.Service())
	require.True(t, standby.m.Service() == nil, "no Service outside a term")
	require.NoError(t, exists(t, leader.addr))
	err := exists(t, standby.addr)
	require.ErrorIs(t, err, errcode.ErrUnavailable, "a standby answers not the leader")
	require.Contains(t, err.Error(), "standby")
	require.Equal(t, http.StatusOK, metricsStatus(leader.m))
	require.Equal(t, http.StatusServiceUnavailable, metricsStatus(standby.m))

	leader.cancel()
	require.Equal(t, change{leader, won.term, false}, next(t, changes), "the leader's term ends")
	require.True(t, leader.wait())
	require.NoError(t, leader.err)
	again := next(t, changes)
	require.Equal(t, standby, again.c)
	require.True(t, again.leading)
	require.Greater(t, again.term, won.term)
	require.NotNil(t, standby.m.Service())
	require.True(t, leader.m.Service() == nil, "no Service outside a term")
	require.NoError(t, exists(t, standby.addr))
	_, err = net.DialTimeout("tcp", leader.addr, time.Second)
	require.Error(t, err, "Run closes its listener when it returns")
}

// A term whose Service cannot start ends Run with master.New's error; the
// leadership is given up, so another candidate can lead.
func TestRunFailsWhenTheServiceCannotStart(t *testing.T) {
	etcd := hatest.Start(t)
	changes := make(chan change, 16)
	bad := master.DefaultConfig()
	bad.ClientTTL = 0
	c := start(t, etcd, bad, changes)
	require.True(t, c.wait(), "Run did not fail within 30 s")
	require.ErrorIs(t, c.err, master.ErrBadConfig)
	good := start(t, etcd, master.DefaultConfig(), changes)
	ch := next(t, changes)
	require.Equal(t, change{good, ch.term, true}, ch, "another candidate leads")
	require.NoError(t, exists(t, good.addr))
}
