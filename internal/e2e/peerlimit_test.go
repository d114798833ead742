package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/crc32c"
	"github.com/tierstore/tierstore/internal/testkit"
	"github.com/tierstore/tierstore/internal/wire"
)

// The bounds of a test cluster under attack.
const (
	attackConnsPerPeer = 16
	attackTimeout      = 2 * time.Second // --tls_handshake_timeout, --data_frame_timeout
	attackNoFile       = 128             // the processes' RLIMIT_NOFILE: an attack of more connections would exhaust it
	attackConns        = 300             // connections the attacker keeps trying to hold, per port
)

// limitFlags are the bounds the attacked processes run with;
// conns is --max_conns_per_peer.
func limitFlags(conns int) []string {
	return []string{fmt.Sprintf("--max_conns_per_peer=%d", conns), "--tls_handshake_timeout=" + attackTimeout.String()}
}

// setNoFile lowers a child process's open-file limit (prlimit(2)).
func setNoFile(t *testing.T, pid int, n uint64) {
	t.Helper()
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: n, Max: n}, nil); err != nil {
		t.Fatalf("prlimit of %d: %v", pid, err)
	}
}

// attacker is two hostile peers: 127.0.0.2 keeps up to attackConns
// connections open to each target, each made to look alive (a node's
// data-plane hello; a master's HTTP/2 preface and SETTINGS), re-dialling
// each one the server closes; 127.0.0.3 trickles frames to a node's data
// plane (slowloris: a write whose header and payload come one byte every
// 100 ms) on a few connections.
type attacker struct {
	stop chan struct{}
	wg   sync.WaitGroup
}

func startAttack(t *testing.T, node, master string) *attacker {
	a := &attacker{stop: make(chan struct{})}
	t.Cleanup(a.end)
	flood := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: time.Second}
	slowloris := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 3)}, Timeout: time.Second}
	hello := []byte{'T', 'S', 'D', 'P', wire.DataVersion, 0, 0, 0}
	h2 := append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0) // preface + empty SETTINGS
	hold := func(d *net.Dialer, target string, first []byte, trickle func(c net.Conn) bool) {
		defer a.wg.Done()
		for {
			select {
			case <-a.stop:
				return
			default:
			}
			c, err := d.Dial("tcp", target)
			if err != nil {
				select {
				case <-a.stop:
					return
				case <-time.After(10 * time.Millisecond): // the server's backlog is full: try again
				}
				continue
			}
			done := make(chan struct{})
			go func() {
				select {
				case <-a.stop:
				case <-done:
				}
				c.Close()
			}()
			if _, err := c.Write(first); err == nil && (trickle == nil || trickle(c)) {
				_, _ = io.Copy(io.Discard, c) // hold it until the server closes it
			}
			close(done)
		}
	}
	for range attackConns {
		a.wg.Add(2)
		go hold(&flood, node, hello, nil)
		go hold(&flood, master, h2, nil)
	}
	// Slowloris: one byte every 100 ms, for ever.
	slow := func(frame []byte) func(c net.Conn) bool {
		return func(c net.Conn) bool {
			if _, err := io.ReadFull(c, make([]byte, wire.HelloLen)); err != nil {
				return false
			}
			for i := 0; i < len(frame); i++ {
				if _, err := c.Write(frame[i : i+1]); err != nil {
					return false
				}
				select {
				case <-a.stop:
					return false
				case <-time.After(100 * time.Millisecond):
				}
			}
			return true
		}
	}
	val := make([]byte, 64<<10)
	wmeta := (&wire.Request{Op: wire.OpWrite, Segment: "seg", Token: 1}).AppendMeta(nil)
	wh := wire.Header{Op: wire.OpWrite, ID: 1, Flags: wire.FlagCRC, CRC: crc32c.Checksum(val), MetaLen: uint32(len(wmeta)), PayloadLen: uint64(len(val))}
	frame := make([]byte, wire.HeaderLen)
	wh.Encode(frame)
	frame = append(append(frame, wmeta...), val...)
	for range 4 {
		a.wg.Add(1)
		go hold(&slowloris, node, hello, slow(frame))
	}
	return a
}

func (a *attacker) end() {
	select {
	case <-a.stop:
	default:
		close(a.stop)
	}
	a.wg.Wait()
}

var refusalRE = regexp.MustCompile(`(?m)^tierstore_peer_refusals_total\{([^}]*)\} (\S+)$`)

// refusals scrapes a process's tierstore_peer_refusals_total by limit.
func refusals(t *testing.T, port int) map[string]float64 {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, m := range refusalRE.FindAllStringSubmatch(string(body), -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		lim := regexp.MustCompile(`limit="([^"]*)"`).FindStringSubmatch(m[1])
		if lim != nil {
			out[lim[1]] += v
		}
	}
	return out
}

// TestPeerLimitsUnderAttack: a hostile peer (127.0.0.2) keeps hundreds of
// connections open to a master and a node whose open-file limit is 128,
// and another (127.0.0.3) trickles frames to the node; a well-behaved client (127.0.0.1) that
// connects afterwards still puts and gets, every get within its deadline.
// The refusals are counted on both processes' metrics. Without the bound
// on connections per address (--max_conns_per_peer=100000) the attack
// takes every descriptor and the client cannot connect.
func TestPeerLimitsUnderAttack(t *testing.T) {
	mmetrics, nmetrics := testkit.FreePort(t), testkit.FreePort(t)
	m := startMaster(t, 0, append(limitFlags(attackConnsPerPeer), fmt.Sprintf("--metrics_port=%d", mmetrics))...)
	n := startNode(t, m.Addr, "", append(limitFlags(attackConnsPerPeer),
		"--data_frame_timeout="+attackTimeout.String(), fmt.Sprintf("--metrics_port=%d", nmetrics))...)
	setNoFile(t, m.Pid(), attackNoFile)
	setNoFile(t, n.Pid(), attackNoFile)

	startAttack(t, n.Addr, m.Addr)
	// Let the attack take hold for more than a handshake and a frame
	// timeout, so that the slow frames have been cut.
	time.Sleep(2 * attackTimeout) // the attack's duration, not synchronisation

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{MasterAddr: m.Addr, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("a well-behaved client under attack cannot connect: %v", err)
	}
	defer c.Close()
	vals := map[string][]byte{}
	for i := range 8 {
		k := fmt.Sprintf("k%d", i)
		vals[k] = randomValue(256 << 10)
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
		err := c.Put(pctx, k, vals[k])
		pcancel()
		if err != nil {
			t.Fatalf("put %s under attack: %v", k, err)
		}
	}
	// Gets for longer than a timeout of the attack's connections (they
	// are cut and re-dialled meanwhile), each within a 5 s deadline.
	gets := 0
	for start := time.Now(); time.Since(start) < attackTimeout+time.Second; {
		for k, v := range vals {
			gctx, gcancel := context.WithTimeout(ctx, 5*time.Second)
			got, err := c.Get(gctx, k)
			gcancel()
			if err != nil {
				t.Fatalf("get %s under attack (after %d gets): %v", k, gets, err)
			}
			if !bytes.Equal(got, v) {
				t.Fatalf("get %s: other bytes", k)
			}
			gets++
		}
	}
	nr, mr := refusals(t, nmetrics), refusals(t, mmetrics)
	t.Logf("%d gets; node refusals %v; master refusals %v", gets, nr, mr)
	for _, want := range []struct {
		who   string
		got   map[string]float64
		limit string
	}{{"node", nr, "conns_per_peer"}, {"node", nr, "frame_timeout"}, {"master", mr, "conns_per_peer"}} {
		if want.got[want.limit] < 1 {
			t.Errorf("%s counted no %s refusal: %v", want.who, want.limit, want.got)
		}
	}
}
