package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/redis/go-redis/v9"

	"github.com/tierstore/tierstore/client"
	tscluster "github.com/tierstore/tierstore/internal/cluster"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/node"
)

// kvServer is one store of the serve scenario as the load generator sees
// it: started by the bench, reached over loopback, stopped at the end.
// Every call is safe for concurrent use by the workers.
type kvServer interface {
	// put stores v under key (the key is new); w is the worker.
	put(ctx context.Context, w int, key string, v []byte) error
	// get reads key into buf (exactly the value's size); false: a miss.
	get(ctx context.Context, w int, key string, buf []byte) (bool, error)
	// batchPut stores vals[i] under keys[i]; the number that failed.
	batchPut(ctx context.Context, w int, keys []string, vals [][]byte) (int, error)
	// batchGet reads keys[i] into bufs[i]; hit[i] false: a miss.
	batchGet(ctx context.Context, w int, keys []string, bufs [][]byte) ([]bool, error)
	// batchExists answers for every key whether the store has it.
	batchExists(ctx context.Context, w int, keys []string) ([]bool, error)
	// flush removes every object (tierstore RemoveAll with force,
	// memcached flush_all, Redis FLUSHALL): the warm-up's end.
	flush(ctx context.Context) error
	// stats: SSD bytes written so far and the path of its SSD file(s),
	// whose page cache the bench drops before a read phase.
	ssdWritten(ctx context.Context) (int64, error)
	ssdDir() string
	close()
}

// errNotStored: the store refused a put for lack of room (tierstore
// NO_AVAILABLE_HANDLE after its wait, memcached "SERVER_ERROR out of
// memory", Redis OOM): the value is not cached, as a cache may do; the
// bench counts it as a put failure, not an error.
var errNotStored = errors.New("bench: store refused the value for lack of room")

// notStored maps a store's refusal for lack of room to errNotStored.
func notStored(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, errcode.ErrNoAvailableHandle) || strings.Contains(err.Error(), "out of memory") || strings.HasPrefix(err.Error(), "OOM ") {
		return fmt.Errorf("%w: %v", errNotStored, err)
	}
	return err
}

// serveBudget is what every store gets: the same DRAM, and the same SSD
// where it has one.
type serveBudget struct {
	dram, ssd int64
	maxValue  int64 // the largest value of the run (memcached's -I)
	workers   int   // concurrent workers (connection pools)
}

// storeKind starts one store in dir; errUnavailable when its binary is
// missing.
type serveStoreKind struct {
	name  string
	start func(ctx context.Context, dir, bin string, b serveBudget) (kvServer, error)
}

var serveStores = []serveStoreKind{
	{"tierstore", startTierstore},
	{"memcached+extstore", startMemcached},
	{"redis", startRedis},
}

// --- tierstore: master + node processes built from cmd/ ---

type tierServer struct {
	cl      *cluster
	clients []*client.Client
	dir     string
	// layers > 1: each value is put gathered from, and read scattered
	// into, that many equal buffers (a vLLM block, one buffer per layer:
	// PutParts, BatchPutParts, GetIntoParts, BatchGetIntoParts).
	layers atomic.Int32
}

// layered is a store that can gather an object from several buffers and
// scatter it back; the vLLM workload hands it each block as layer buffers.
type layered interface {
	setLayers(n int)
}

func (s *tierServer) setLayers(n int) { s.layers.Store(int32(n)) }

// split cuts v into the server's layer buffers (nil when layers <= 1): n
// views of len(v)/n bytes, the last taking the remainder.
func (s *tierServer) split(v []byte) [][]byte {
	n := int(s.layers.Load())
	if n <= 1 {
		return nil
	}
	parts := make([][]byte, n)
	each := len(v) / n
	for i := range parts {
		end := (i + 1) * each
		if i == n-1 {
			end = len(v)
		}
		parts[i] = v[i*each : end]
	}
	return parts
}

func startTierstore(ctx context.Context, dir, bin string, b serveBudget) (_ kvServer, err error) {
	s := &tierServer{cl: &cluster{}, dir: filepath.Join(dir, "ssd")}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, s.cl.logTail())
			s.close()
		}
	}()
	line, err := s.cl.start(ctx, dir, filepath.Join(bin, "tierstore-master"), "tierstore-master listening on ",
		"--rpc_port=0", "--metrics_port=0", "--enable_offload=true", "--offload_admission_policy=tinylfu", "--log_level=warn",
		"--state_dir="+filepath.Join(dir, "master-state"))
	if err != nil {
		return nil, err
	}
	addr := strings.Fields(line)[0]
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, err
	}
	if line, err = s.cl.start(ctx, dir, filepath.Join(bin, "tierstore-node"), "tierstore-node listening on ",
		"--master="+addr, fmt.Sprintf("--memory=%d", b.dram), "--enable_offload", "--ssd_dir="+s.dir,
		fmt.Sprintf("--ssd_capacity=%d", b.ssd), "--bucket_eviction=worth", "--heartbeat_interval=100ms"); err != nil {
		return nil, err
	}
	s.cl.nodeEndpoint = strings.Fields(line)[0]
	log := slog.New(slog.DiscardHandler)
	for range b.workers {
		cfg := client.Config{MasterAddr: addr, Logger: log}
		if os.Getenv("TIERSTORE_SERVE_NOCACHE") != "" {
			cfg.LocationCacheEntries = -1 // every get looks its key up (A/B of the cache)
		}
		c, err := client.New(ctx, cfg)
		if err != nil {
			return nil, err
		}
		s.clients = append(s.clients, c)
	}
	return s, nil
}

func (s *tierServer) c(w int) *client.Client { return s.clients[w%len(s.clients)] }

func (s *tierServer) put(ctx context.Context, w int, key string, v []byte) error {
	if parts := s.split(v); parts != nil {
		return notStored(s.c(w).PutParts(ctx, key, parts, client.PutOptions{}))
	}
	return notStored(s.c(w).Put(ctx, key, v))
}

func tierMiss(err error) bool {
	// Not ready: another worker's put of the key is in progress.
	return errors.Is(err, errcode.ErrObjectNotFound) || errors.Is(err, errcode.ErrReplicaGone) || errors.Is(err, errcode.ErrReplicaNotReady)
}

func (s *tierServer) get(ctx context.Context, w int, key string, buf []byte) (bool, error) {
	var n int
	var err error
	if parts := s.split(buf); parts != nil {
		n, err = s.c(w).GetIntoParts(ctx, key, parts)
	} else {
		n, err = s.c(w).GetInto(ctx, key, buf)
	}
	switch {
	case tierMiss(err):
		return false, nil
	case err != nil:
		return false, err
	case n != len(buf):
		return false, fmt.Errorf("bench: tierstore get %s: %d bytes, want %d", key, n, len(buf))
	}
	return true, nil
}

func (s *tierServer) batchPut(ctx context.Context, w int, keys []string, vals [][]byte) (int, error) {
	failed := 0
	var errs []error
	if s.layers.Load() > 1 {
		parts := make([][][]byte, len(vals))
		for i, v := range vals {
			parts[i] = s.split(v)
		}
		errs = s.c(w).BatchPutParts(ctx, keys, parts, client.PutOptions{})
	} else {
		errs = s.c(w).BatchPut(ctx, keys, vals)
	}
	for _, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, errcode.ErrObjectExists):
			// Another worker's overlapping window put it first.
		case errors.Is(notStored(err), errNotStored):
			failed++ // DRAM full of objects that cannot go yet: not cached
		default:
			return failed, err
		}
	}
	return failed, nil
}

func (s *tierServer) batchGet(ctx context.Context, w int, keys []string, bufs [][]byte) ([]bool, error) {
	var ns []int
	var errs []error
	if s.layers.Load() > 1 {
		parts := make([][][]byte, len(bufs))
		for i, b := range bufs {
			parts[i] = s.split(b)
		}
		ns, errs = s.c(w).BatchGetIntoParts(ctx, keys, parts)
	} else {
		ns, errs = s.c(w).BatchGetInto(ctx, keys, bufs)
	}
	hit := make([]bool, len(keys))
	for i, err := range errs {
		switch {
		case tierMiss(err):
		case err != nil:
			return hit, err
		case ns[i] != len(bufs[i]):
			return hit, fmt.Errorf("bench: tierstore batch get %s: %d bytes, want %d", keys[i], ns[i], len(bufs[i]))
		default:
			hit[i] = true
		}
	}
	return hit, nil
}

func (s *tierServer) batchExists(ctx context.Context, w int, keys []string) ([]bool, error) {
	ok, errs := s.c(w).BatchExists(ctx, keys)
	return ok, errors.Join(errs...)
}

func (s *tierServer) ssdWritten(ctx context.Context) (int64, error) {
	st, err := node.PeerStats(ctx, s.cl.nodeEndpoint)
	return st.Tier.BytesWritten, err
}

func (s *tierServer) ssdDir() string { return s.dir }

func (s *tierServer) flush(ctx context.Context) error {
	_, err := s.c(0).RemoveAll(ctx, true)
	return err
}

func (s *tierServer) close() {
	var hits, misses, stale int64
	for _, c := range s.clients {
		st := c.ReadStats()
		hits, misses, stale = hits+st.CacheHits, misses+st.CacheMisses, stale+st.CacheStale
		c.Close()
	}
	if hits+misses > 0 {
		// The gets of the store's start (warm-up and every row), one line
		// on stderr: how often a get skipped the master.
		fmt.Fprintf(os.Stderr, "serve: tierstore clients' location cache: %d hits, %d misses, %d stale (%.0f%% of cached-path gets)\n",
			hits, misses, stale, 100*float64(hits)/float64(hits+misses))
	}
	s.cl.stop()
}

// --- peers: Debian's memcached and redis-server ---

// peerProc is a peer server process started by the bench.
type peerProc struct {
	cmd  *exec.Cmd
	addr string
	log  string
}

// startPeer runs bin with args (stdout and stderr in a log file under dir)
// and waits, bounded, until addr accepts connections.
func startPeer(ctx context.Context, dir, bin, addr string, args ...string) (*peerProc, error) {
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not installed (apt-get install -y %s)", errUnavailable, bin, strings.TrimSuffix(bin, "-server"))
	}
	p := &peerProc{addr: addr, log: filepath.Join(dir, bin+".log")}
	logf, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	p.cmd = exec.Command(path, args...)
	tscluster.DieWithParent(p.cmd)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start %s: %w", bin, err)
	}
	for deadline := time.Now().Add(15 * time.Second); ; {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return p, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.stop()
			out, _ := os.ReadFile(p.log)
			return nil, fmt.Errorf("bench: %s did not listen on %s within 15s: %v\n%s", bin, addr, err, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *peerProc) stop() {
	if p == nil || p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
	p.cmd = nil
}

func freeAddr() (string, error) {
	port, err := tscluster.FreePort()
	return fmt.Sprintf("127.0.0.1:%d", port), err
}

// peerChunk bounds the bytes of one pipelined request to a peer, so that
// a batch of 1 GiB is sent (and its reply buffered by the server) in
// parts, as a careful client would.
const peerChunk = 64 << 20

// chunks calls f on consecutive index ranges of sizes whose bytes stay
// within peerChunk (at least one item each).
func chunks(sizes func(i int) int, n int, f func(lo, hi int) error) error {
	for lo := 0; lo < n; {
		hi, bytes := lo, 0
		for hi < n && (hi == lo || bytes+sizes(hi) <= peerChunk) {
			bytes += sizes(hi)
			hi++
		}
		if err := f(lo, hi); err != nil {
			return err
		}
		lo = hi
	}
	return nil
}

// memcached with extstore: gomemcache for data, a raw connection for the
// meta no-op lookups (mg without flags) and stats it does not offer.
type memcachedServer struct {
	p    *peerProc
	mc   *memcache.Client
	dir  string
	meta []*textConn // one per worker
}

func startMemcached(ctx context.Context, dir, _ string, b serveBudget) (_ kvServer, err error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	s := &memcachedServer{dir: filepath.Join(dir, "ext")}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, err
	}
	host, port, _ := net.SplitHostPort(addr)
	// -I: the largest value plus room for its header. memcached refuses an
	// -I above extstore's write buffer, so the buffer is as large.
	item := max(2<<20, b.maxValue+1<<20)
	wbuf := max(4, (item>>20+1)&^1) // MB, even (extstore's rule)
	args := []string{"-l", host, "-p", port, "-U", "0", "-t", "4",
		"-m", strconv.FormatInt(b.dram>>20, 10), "-I", fmt.Sprintf("%dm", item>>20), "-c", "1024",
		"-o", fmt.Sprintf("ext_page_size=%d,ext_wbuf_size=%d,ext_path=%s:%dm", max(64, 2*wbuf), wbuf, filepath.Join(s.dir, "extstore"), b.ssd>>20)}
	if os.Geteuid() == 0 {
		args = append(args, "-u", "root") // memcached refuses root without it (CI runs as root)
	}
	s.p, err = startPeer(ctx, dir, "memcached", addr, args...)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	s.mc = memcache.New(addr)
	s.mc.MaxIdleConns = 2 * b.workers
	s.mc.Timeout = 30 * time.Second
	for range b.workers {
		c, err := dialText(addr)
		if err != nil {
			return nil, err
		}
		s.meta = append(s.meta, c)
	}
	return s, nil
}

func (s *memcachedServer) put(_ context.Context, _ int, key string, v []byte) error {
	return notStored(s.mc.Set(&memcache.Item{Key: key, Value: v}))
}

func (s *memcachedServer) get(_ context.Context, _ int, key string, buf []byte) (bool, error) {
	it, err := s.mc.Get(key)
	if errors.Is(err, memcache.ErrCacheMiss) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if len(it.Value) != len(buf) {
		return false, fmt.Errorf("bench: memcached get %s: %d bytes, want %d", key, len(it.Value), len(buf))
	}
	copy(buf, it.Value)
	return true, nil
}

func (s *memcachedServer) batchPut(ctx context.Context, _ int, keys []string, vals [][]byte) (int, error) {
	// gomemcache has no multi-set: one Set per item, as its users do.
	failed := 0
	for i := range keys {
		switch err := s.put(ctx, 0, keys[i], vals[i]); {
		case errors.Is(err, errNotStored):
			failed++
		case err != nil:
			return failed, err
		}
	}
	return failed, nil
}

func (s *memcachedServer) batchGet(_ context.Context, _ int, keys []string, bufs [][]byte) ([]bool, error) {
	hit := make([]bool, len(keys))
	err := chunks(func(i int) int { return len(bufs[i]) }, len(keys), func(lo, hi int) error {
		items, err := s.mc.GetMulti(keys[lo:hi])
		if err != nil {
			return err
		}
		for i := lo; i < hi; i++ {
			if it, ok := items[keys[i]]; ok {
				if len(it.Value) != len(bufs[i]) {
					return fmt.Errorf("bench: memcached get %s: %d bytes, want %d", keys[i], len(it.Value), len(bufs[i]))
				}
				copy(bufs[i], it.Value)
				hit[i] = true
			}
		}
		return nil
	})
	return hit, err
}

func (s *memcachedServer) batchExists(_ context.Context, w int, keys []string) ([]bool, error) {
	return s.meta[w%len(s.meta)].metaExists(keys)
}

func (s *memcachedServer) ssdWritten(context.Context) (int64, error) {
	st, err := s.meta[0].stats()
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(st["extstore_bytes_written"], 10, 64)
}

func (s *memcachedServer) ssdDir() string { return s.dir }

func (s *memcachedServer) flush(context.Context) error { return s.mc.FlushAll() }

func (s *memcachedServer) close() {
	for _, c := range s.meta {
		c.Close()
	}
	s.p.stop()
}

// textConn is a memcached text-protocol connection for what gomemcache
// lacks. Not safe for concurrent use: one per worker.
type textConn struct {
	net.Conn
	r *bufio.Reader
}

func dialText(addr string) (*textConn, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	return &textConn{Conn: c, r: bufio.NewReader(c)}, nil
}

// metaExists sends "mg KEY" (no flags: no value, "HD" hit, "EN" miss) for
// every key back to back, then "mn", and reads the answers.
func (c *textConn) metaExists(keys []string) ([]bool, error) {
	var b strings.Builder
	for _, k := range keys {
		b.WriteString("mg " + k + "\r\n")
	}
	b.WriteString("mn\r\n")
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, b.String()); err != nil {
		return nil, err
	}
	out := make([]bool, len(keys))
	for i := 0; ; i++ {
		line, err := c.r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		switch line = strings.TrimSpace(line); {
		case line == "MN":
			if i != len(keys) {
				return nil, fmt.Errorf("bench: memcached mg: %d answers for %d keys", i, len(keys))
			}
			return out, nil
		case i >= len(keys):
			return nil, fmt.Errorf("bench: memcached mg: unexpected %q", line)
		case strings.HasPrefix(line, "HD"):
			out[i] = true
		case strings.HasPrefix(line, "EN"):
		default:
			return nil, fmt.Errorf("bench: memcached mg %s: %q", keys[i], line)
		}
	}
}

func (c *textConn) stats() (map[string]string, error) {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "stats\r\n"); err != nil {
		return nil, err
	}
	st := map[string]string{}
	for {
		line, err := c.r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		f := strings.Fields(line)
		if len(f) == 1 && f[0] == "END" {
			return st, nil
		}
		if len(f) == 3 && f[0] == "STAT" {
			st[f[1]] = f[2]
		}
	}
}

// redis 7: DRAM only, allkeys-lru at maxmemory (a cache), no persistence;
// go-redis with one pool shared by the workers.
type redisServer struct {
	p   *peerProc
	rdb *redis.Client
}

func startRedis(ctx context.Context, dir, _ string, b serveBudget) (_ kvServer, err error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	s := &redisServer{}
	s.p, err = startPeer(ctx, dir, "redis-server", addr, "--bind", "127.0.0.1", "--port", port,
		"--save", "", "--appendonly", "no", "--dir", dir, "--maxmemory", strconv.FormatInt(b.dram, 10),
		"--maxmemory-policy", "allkeys-lru", "--protected-mode", "no")
	if err != nil {
		return nil, err
	}
	s.rdb = redis.NewClient(&redis.Options{Addr: addr, PoolSize: 2 * b.workers,
		ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, DisableIdentity: true})
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		s.close()
		return nil, fmt.Errorf("bench: redis ping: %w", err)
	}
	return s, nil
}

func (s *redisServer) put(ctx context.Context, _ int, key string, v []byte) error {
	return notStored(s.rdb.Set(ctx, key, v, 0).Err())
}

func (s *redisServer) get(ctx context.Context, _ int, key string, buf []byte) (bool, error) {
	v, err := s.rdb.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if len(v) != len(buf) {
		return false, fmt.Errorf("bench: redis get %s: %d bytes, want %d", key, len(v), len(buf))
	}
	copy(buf, v)
	return true, nil
}

func (s *redisServer) batchPut(ctx context.Context, _ int, keys []string, vals [][]byte) (int, error) {
	failed := 0
	err := chunks(func(i int) int { return len(vals[i]) }, len(keys), func(lo, hi int) error {
		cmds := make([]*redis.StatusCmd, hi-lo)
		_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := lo; i < hi; i++ {
				cmds[i-lo] = p.Set(ctx, keys[i], vals[i], 0)
			}
			return nil
		})
		for _, c := range cmds {
			switch err := notStored(c.Err()); {
			case errors.Is(err, errNotStored):
				failed++
			case err != nil:
				return err
			}
		}
		return nil
	})
	return failed, err
}

func (s *redisServer) batchGet(ctx context.Context, _ int, keys []string, bufs [][]byte) ([]bool, error) {
	hit := make([]bool, len(keys))
	err := chunks(func(i int) int { return len(bufs[i]) }, len(keys), func(lo, hi int) error {
		cmds := make([]*redis.StringCmd, hi-lo)
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := lo; i < hi; i++ {
				cmds[i-lo] = p.Get(ctx, keys[i])
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		for i := lo; i < hi; i++ {
			v, err := cmds[i-lo].Bytes()
			if errors.Is(err, redis.Nil) {
				continue
			}
			if err != nil {
				return err
			}
			if len(v) != len(bufs[i]) {
				return fmt.Errorf("bench: redis get %s: %d bytes, want %d", keys[i], len(v), len(bufs[i]))
			}
			copy(bufs[i], v)
			hit[i] = true
		}
		return nil
	})
	return hit, err
}

func (s *redisServer) batchExists(ctx context.Context, _ int, keys []string) ([]bool, error) {
	cmds := make([]*redis.IntCmd, len(keys))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.Exists(ctx, k)
		}
		return nil
	})
	out := make([]bool, len(keys))
	for i, c := range cmds {
		out[i] = c.Val() == 1
	}
	return out, err
}

func (s *redisServer) ssdWritten(context.Context) (int64, error) { return 0, nil }

func (s *redisServer) ssdDir() string { return "" }

func (s *redisServer) flush(ctx context.Context) error { return s.rdb.FlushAll(ctx).Err() }

func (s *redisServer) close() {
	if s.rdb != nil {
		s.rdb.Close()
	}
	s.p.stop()
}
