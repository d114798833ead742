package master

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
)

// graceService is a Service whose puts may wait a minute for room and
// whose start-up grace lasts grace.
func graceService(t *testing.T, grace time.Duration) (*Service, *ManualClock) {
	t.Helper()
	return testService(t, func(c *Config) {
		c.PutStartMaxWait = time.Minute
		c.StartupGrace = grace
	})
}

// In the start-up grace a put that finds no segment mounted waits for the
// first mount (a restarted master's nodes mount again at their next call)
// instead of answering NO_AVAILABLE_HANDLE at once; a batch put likewise.
func TestPutStartWaitsForFirstMountInGrace(t *testing.T) {
	s, _ := graceService(t, time.Minute)
	done, _ := waitingPut(t, s, s, bg, "early", 100)
	mount(t, s, "a", 64<<10)
	if err := <-done; err != nil {
		t.Fatalf("the put waiting for a mount: %v", err)
	}
	if info, err := s.GetReplicaList(bg, "early"); err != nil || kinds(info) != "DRAM@a " {
		t.Fatalf("early: %s %v", kinds(info), err)
	}

	s2, _ := graceService(t, time.Minute)
	waiting := make(chan struct{}, 1)
	s2.hooks.putWaiting = func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	}
	res := make(chan []masterapi.PutStartResult, 1)
	go func() {
		r, _ := s2.BatchPutStart(bg, []masterapi.PutStartRequest{{Key: "b1", Size: 100, CRC: crcOf("b1")}, {Key: "b2", Size: 100, CRC: crcOf("b2")}})
		res <- r
	}()
	<-waiting
	mount(t, s2, "a", 64<<10)
	for i, r := range <-res {
		if r.Err != nil {
			t.Fatalf("batch put %d waiting for a mount: %v", i, r.Err)
		}
	}
}

// When the grace ends with no segment mounted, the waiting put fails with
// NO_AVAILABLE_HANDLE naming why, and later puts fail at once.
func TestPutStartGraceEnds(t *testing.T) {
	s, clk := graceService(t, 10*time.Second)
	done, _ := waitingPut(t, s, s, bg, "early", 100)
	clk.Advance(10 * time.Second)
	s.Tick() // rings the room broadcast: the put tries again
	err := <-done
	mustIs(t, err, errcode.ErrNoAvailableHandle)
	if !strings.Contains(err.Error(), "no segment mounted") {
		t.Fatalf("the error does not say why: %v", err)
	}
	s.hooks.putWaiting = func() { t.Error("waited after the grace") }
	_, err = s.PutStart(bg, masterapi.PutStartRequest{Key: "late", Size: 100})
	mustIs(t, err, errcode.ErrNoAvailableHandle)
}

// The grace ends by its own timer too (no Tick, real clock), well before
// put_start_max_wait.
func TestPutStartGraceEndsByTimer(t *testing.T) {
	s, _ := testService(t, func(c *Config) {
		c.Clock = SystemClock{}
		c.PutStartMaxWait = time.Hour
		c.StartupGrace = 200 * time.Millisecond
	})
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	_, err := s.PutStart(ctx, masterapi.PutStartRequest{Key: "early", Size: 100})
	mustIs(t, err, errcode.ErrNoAvailableHandle)
	if !strings.Contains(err.Error(), "no segment mounted") {
		t.Fatalf("the put did not end with the grace: %v", err)
	}
}

// Without a grace (0), or without waiting at all (put_start_max_wait 0),
// a put with no segment mounted fails at once; in the grace, a put no
// mounted segment can hold (too large) fails at once as after it.
func TestPutStartNoGraceAnswersAtOnce(t *testing.T) {
	for name, mut := range map[string]func(*Config){
		"grace 0":              func(c *Config) { c.PutStartMaxWait = time.Minute; c.StartupGrace = 0 },
		"put_start_max_wait 0": func(c *Config) { c.PutStartMaxWait = 0; c.StartupGrace = time.Minute },
	} {
		t.Run(name, func(t *testing.T) {
			s, _ := testService(t, mut)
			s.hooks.putWaiting = func() { t.Error("waited") }
			_, err := s.PutStart(bg, masterapi.PutStartRequest{Key: "k", Size: 100})
			mustIs(t, err, errcode.ErrNoAvailableHandle)
		})
	}
	s, _ := graceService(t, time.Minute)
	mount(t, s, "a", 64<<10)
	s.hooks.putWaiting = func() { t.Error("waited for a put no segment can hold") }
	_, err := s.PutStart(bg, masterapi.PutStartRequest{Key: "huge", Size: 1 << 20})
	mustIs(t, err, errcode.ErrNoAvailableHandle)
}

// A negative grace is refused by name.
func TestStartupGraceValidated(t *testing.T) {
	cfg := DefaultConfig()
	cfg.StartupGrace = -time.Second
	_, err := New(cfg)
	mustIs(t, err, ErrBadConfig)
	if !strings.Contains(err.Error(), "startup_grace") {
		t.Fatalf("the error does not name the flag: %v", err)
	}
}
