package node

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/crc32c"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/grant"
	"github.com/tierstore/tierstore/internal/testkit"
	"github.com/tierstore/tierstore/internal/wire"
	"github.com/tierstore/tierstore/master"
	"github.com/tierstore/tierstore/masterapi"
)

// writeGrantSecret writes a fresh secret to path (by rename, as an
// operator's tooling would) and returns it.
func writeGrantSecret(t testing.TB, path string) grant.Secret {
	t.Helper()
	s, err := grant.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".tmp", []byte(hex.EncodeToString(s[:])+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
	return s
}

// rotations is how many times rotateUnderLoad replaces the secret.
const rotations = 5

// rotateUnderLoad runs op(i, j) on workers goroutines (worker i, its j-th
// call) while it replaces the grant secret at path rotations times, telling
// the master's keys mk after each write and waiting, before the next, for
// per more completed operations and for every worker to finish two more:
// the one it was in when the master took the new secret (its grants may be
// of the secret before) and one begun after. A node verifies with the
// newest secret and the one before it only, so an operation holding a
// grant two secrets old fails; rotations are meant to be further apart
// than an operation lasts, and without the wait a worker descheduled
// across two rotations failed (about 1 run in 30 at load). It fails the
// test if any operation failed, naming the first error and the number of
// what operations, or if the node's keys nk did not read each new secret
// once.
func rotateUnderLoad(t *testing.T, path string, mk, nk *grant.Keys, workers int, per int64, what string, op func(i, j int) error) {
	t.Helper()
	var done, failed atomic.Int64
	finished := make([]atomic.Int64, workers) // operations each worker completed
	var errMu sync.Mutex
	var firstErr error
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := op(i, j); err != nil {
					failed.Add(1)
					errMu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					errMu.Unlock()
				}
				done.Add(1)
				finished[i].Add(1)
			}
		})
	}
	stopAll := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopAll()
	for range rotations {
		writeGrantSecret(t, path)
		if changed, err := mk.Refresh(); !changed || err != nil {
			t.Fatalf("master refresh: %v %v", changed, err)
		}
		target := done.Load() + per
		each := make([]int64, workers)
		for i := range finished {
			each[i] = finished[i].Load() + 2
		}
		testkit.Eventually(t, what+" after a rotation", func() bool {
			if failed.Load() != 0 {
				return true
			}
			for i := range finished {
				if finished[i].Load() < each[i] {
					return false
				}
			}
			return done.Load() >= target
		})
	}
	stopAll()
	if f := failed.Load(); f != 0 {
		t.Fatalf("%d of %d %s failed across %d rotations, first: %v", f, done.Load(), what, rotations, firstErr)
	}
	if r, err := nk.Reloads(); r != rotations || err != nil {
		t.Fatalf("the node read the secret %d times (%v), want %d", r, err, rotations)
	}
}

func loadKeys(t testing.TB, path string) *grant.Keys {
	t.Helper()
	k, err := grant.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// startGrantNode starts a node listening on 127.0.0.1 with grant keys k
// (nil: none) and SSD tier tr (nil: none).
func startGrantNode(t *testing.T, m masterapi.API, k *grant.Keys, tr SSDTier) *Node {
	t.Helper()
	cfg := testNodeConfig("127.0.0.1:0")
	cfg.Grants = k
	var opts []Option
	if tr != nil {
		opts = append(opts, WithTier(tr))
	}
	n, err := Start(context.Background(), cfg, m, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// tampered is the real master, whose lookups' grants a test rewrites
// before the client sees them (the client's side of a refused grant).
type tampered struct {
	*master.Service
	f atomic.Pointer[func(*masterapi.ObjectInfo)]
}

func (m *tampered) GetReplicaList(ctx context.Context, key string) (masterapi.ObjectInfo, error) {
	info, err := m.Service.GetReplicaList(ctx, key)
	if f := m.f.Load(); err == nil && f != nil {
		(*f)(&info)
	}
	return info, err
}

// With a grant secret on master and node: gets, batch gets and streamed
// SSD reads work; a read with no grant, with a grant of another key,
// another range of the key, another node, or past its expiry is refused
// PERMISSION_DENIED with the grant's sentinel on the client side and
// counted on the node; the good read works after them.
func TestGrantsBindReadsToLookups(t *testing.T) {
	path := filepath.Join(t.TempDir(), "grant.secret")
	sec := writeGrantSecret(t, path)
	mc := testMasterConfig()
	mc.Grants = loadKeys(t, path)
	m := newMaster(t, mc)
	tr := newMemTier()
	n := startGrantNode(t, m, loadKeys(t, path), tr)
	other := startGrantNode(t, m, loadKeys(t, path), nil)
	c := newTestClient(t, client.Config{MasterAddr: serveMaster(t, m), PreferredNode: n.Name()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	vals := map[string][]byte{"k1": rnd(1 << 20), "k2": rnd(70000), "s": rnd(300 << 10)}
	for _, k := range []string{"k1", "k2", "s"} {
		if err := c.Put(ctx, k, vals[k]); err != nil {
			t.Fatal(err)
		}
	}
	// The SSD read: offloaded, evicted from DRAM, streamed from the tier.
	n.OffloadNow()
	if d, err := c.EvictDRAM(ctx, []string{"s"}, false); err != nil || d.Dropped != 1 {
		t.Fatalf("evict: %+v %v", d, err)
	}
	good := func() {
		t.Helper()
		for k, v := range vals {
			if got, err := c.Get(ctx, k); err != nil || !bytes.Equal(got, v) {
				t.Fatalf("get %s with grants: %v", k, err)
			}
		}
		got, errs := c.BatchGet(ctx, []string{"k1", "k2", "s"})
		for i, k := range []string{"k1", "k2", "s"} {
			if errs[i] != nil || !bytes.Equal(got[i], vals[k]) {
				t.Fatalf("batch get %s with grants: %v", k, errs[i])
			}
		}
	}
	good()
	if rs := c.ReadStats(); rs.RemoteSSD != 2 || rs.RemoteDRAM != 4 {
		t.Fatalf("read stats %+v: want 2 SSD and 4 DRAM reads", rs)
	}

	lookup := func(k string, kind masterapi.ReplicaKind) masterapi.Replica {
		t.Helper()
		info, err := m.GetReplicaList(ctx, k)
		if err != nil {
			t.Fatalf("lookup %s: %v", k, err)
		}
		for _, r := range info.Replicas {
			if r.Kind == kind && len(r.Grant) == grant.Size {
				return r
			}
		}
		t.Fatalf("lookup %s: no %v replica with a grant: %+v", k, kind, info)
		return masterapi.Replica{}
	}
	r1, r2, rs := lookup("k1", masterapi.DRAM), lookup("k2", masterapi.DRAM), lookup("s", masterapi.SSD)
	if r1.Kind != masterapi.DRAM || rs.Kind != masterapi.SSD {
		t.Fatalf("replicas %+v %+v", r1, rs)
	}
	// A grant lasts as long as its lookup's read lease (plus the skew).
	info1, err := m.GetReplicaList(ctx, "k1")
	if err != nil {
		t.Fatal(err)
	}
	v := grant.NewVerifier(sec)
	for _, r := range info1.Replicas {
		sc := grant.Scope{Node: r.Node, Key: []byte("k1"), Length: uint64(info1.Size)}
		if r.Kind == masterapi.DRAM {
			sc.Segment, sc.Offset, sc.Length = r.Segment, uint64(r.Offset), uint64(r.Length)
		}
		end := info1.LeaseDeadline.Add(v.Skew)
		if err := v.Verify(sc, []byte(r.Grant), end.Add(-time.Millisecond)); err != nil {
			t.Fatalf("%v grant before its lease ended: %v", r.Kind, err)
		}
		if err := v.Verify(sc, []byte(r.Grant), end.Add(time.Millisecond)); !errors.Is(err, grant.ErrExpired) {
			t.Fatalf("%v grant after its lease ended: %v", r.Kind, err)
		}
	}
	signer := grant.NewSigner(sec)
	sign := func(sc grant.Scope, exp time.Time) []byte { g := signer.Sign(sc, exp); return g[:] }
	scope1 := grant.Scope{Node: n.Name(), Key: []byte("k1"), Segment: r1.Segment, Offset: uint64(r1.Offset), Length: uint64(r1.Length)}
	later := time.Now().Add(time.Minute)
	otherRange, otherNode := scope1, scope1
	otherRange.Offset += 4096
	otherNode.Node = other.Name()

	dc, err := wire.DialData(ctx, n.Endpoint(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	buf := make([]byte, len(vals["k1"]))
	readDRAM := func(g []byte) error {
		return dc.ReadRangeParts(ctx, r1.Segment, r1.Offset, [][]byte{buf}, crc32c.Checksum(vals["k1"]), g)
	}
	sbuf := make([]byte, len(vals["s"]))
	readSSD := func(g []byte) error {
		return dc.ReadSSDParts(ctx, []byte("s"), [][]byte{sbuf}, crc32c.Checksum(vals["s"]), g)
	}
	expired := sign(scope1, time.Now().Add(-time.Minute))
	for name, c := range map[string]struct {
		read func() error
		want error
	}{
		"no grant":              {func() error { return readDRAM(nil) }, grant.ErrMissing},
		"another key's grant":   {func() error { return readDRAM([]byte(r2.Grant)) }, grant.ErrForged},
		"another range's grant": {func() error { return readDRAM(sign(otherRange, later)) }, grant.ErrForged},
		"another node's grant":  {func() error { return readDRAM(sign(otherNode, later)) }, grant.ErrForged},
		"an expired grant":      {func() error { return readDRAM(expired) }, grant.ErrExpired},
		"SSD without a grant":   {func() error { return readSSD(nil) }, grant.ErrMissing},
		"SSD with a DRAM grant": {func() error { return readSSD([]byte(r1.Grant)) }, grant.ErrForged},
	} {
		err := c.read()
		if !errors.Is(err, errcode.ErrPermissionDenied) || !strings.Contains(err.Error(), c.want.Error()) {
			t.Errorf("%s: %v, want PERMISSION_DENIED naming %q", name, err, c.want)
		}
	}
	st := n.Stats()
	if st.GrantsMissing != 2 || st.GrantsForged != 4 || st.GrantsExpired != 1 {
		t.Fatalf("node counts missing %d forged %d expired %d, want 2 4 1", st.GrantsMissing, st.GrantsForged, st.GrantsExpired)
	}
	if err := readDRAM([]byte(r1.Grant)); err != nil || !bytes.Equal(buf, vals["k1"]) {
		t.Fatalf("the good DRAM read after the refused ones: %v", err)
	}
	if err := readSSD([]byte(rs.Grant)); err != nil || !bytes.Equal(sbuf, vals["s"]) {
		t.Fatalf("the good SSD read after the refused ones: %v", err)
	}

	// The client's side: a refused grant is PERMISSION_DENIED with the
	// grant's sentinel (a lookup whose grants this test rewrites).
	tm := &tampered{Service: m}
	tc := newTestClient(t, client.Config{Master: tm})
	for name, cs := range map[string]struct {
		g    func(r masterapi.Replica) string
		want error
	}{
		"missing": {func(masterapi.Replica) string { return "" }, grant.ErrMissing},
		"forged":  {func(masterapi.Replica) string { return r2.Grant }, grant.ErrForged},
		"expired": {func(r masterapi.Replica) string {
			sc := grant.Scope{Node: r.Node, Key: []byte("k1"), Length: uint64(len(vals["k1"]))}
			if r.Kind == masterapi.DRAM {
				sc.Segment, sc.Offset, sc.Length = r.Segment, uint64(r.Offset), uint64(r.Length)
			}
			return string(sign(sc, time.Now().Add(-time.Minute)))
		}, grant.ErrExpired},
	} {
		f := func(info *masterapi.ObjectInfo) {
			for i := range info.Replicas {
				info.Replicas[i].Grant = cs.g(info.Replicas[i])
			}
		}
		tm.f.Store(&f)
		if _, err := tc.Get(ctx, "k1"); !errors.Is(err, errcode.ErrPermissionDenied) || !errors.Is(err, cs.want) {
			t.Errorf("client get with a %s grant: %v, want PERMISSION_DENIED and %v", name, err, cs.want)
		}
	}
	tm.f.Store(nil)
	if got, err := tc.Get(ctx, "k1"); err != nil || !bytes.Equal(got, vals["k1"]) {
		t.Fatalf("client get after the refused ones: %v", err)
	}
	good()
}

// A master with grants and a node without: the node ignores the grants,
// puts and reads work. A master without grants and a node with: every
// remote put and read is refused PERMISSION_DENIED (no grant), the client
// sees ErrMissing; the object is then written by a client in the node's
// process (not checked) for the reads.
func TestGrantsOnOneSideOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "grant.secret")
	writeGrantSecret(t, path)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name             string
		masterKeys, node bool
	}{{"master only", true, false}, {"node only", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			mc := testMasterConfig()
			if tc.masterKeys {
				mc.Grants = loadKeys(t, path)
			}
			m := newMaster(t, mc)
			var k *grant.Keys
			if tc.node {
				k = loadKeys(t, path)
			}
			n := startGrantNode(t, m, k, nil)
			addr := serveMaster(t, m)
			c := newTestClient(t, client.Config{MasterAddr: addr})
			val := rnd(64 << 10)
			err := c.Put(ctx, "k", val)
			if tc.node {
				if !errors.Is(err, errcode.ErrPermissionDenied) || !errors.Is(err, grant.ErrMissing) {
					t.Fatalf("a node with a secret took a write without a grant: %v", err)
				}
				if st := n.Stats(); st.WriteGrantsMissing != 1 || st.PeerWrites != 0 {
					t.Fatalf("write refusal not counted, or the write counted: %+v", st)
				}
				in := newTestClient(t, client.Config{MasterAddr: addr, LocalNode: n})
				err = in.Put(ctx, "k", val)
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.Get(ctx, "k")
			_, berrs := c.BatchGet(ctx, []string{"k"})
			if !tc.node {
				if err != nil || !bytes.Equal(got, val) || berrs[0] != nil {
					t.Fatalf("a node without a secret refused: %v %v", err, berrs[0])
				}
				return
			}
			for _, err := range []error{err, berrs[0]} {
				if !errors.Is(err, errcode.ErrPermissionDenied) || !errors.Is(err, grant.ErrMissing) {
					t.Fatalf("a node with a secret served a read without a grant: %v", err)
				}
			}
			if st := n.Stats(); st.GrantsMissing < 2 {
				t.Fatalf("refusals not counted: %d", st.GrantsMissing)
			}
		})
	}
}

// Rotating the secret file under live reads fails none: the master signs
// with the newest secret once it re-reads the file, the node takes the
// newest and the previous and re-reads the file at once when a grant of a
// secret it has not read arrives. Readers run throughout; after each
// rotation the test waits (without sleeping) for reads signed with the new
// secret to complete before the next.
func TestGrantRotationUnderLiveReads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "grant.secret")
	writeGrantSecret(t, path)
	mk := loadKeys(t, path)
	mc := testMasterConfig()
	mc.Grants = mk
	m := newMaster(t, mc)
	nk := loadKeys(t, path)
	n := startGrantNode(t, m, nk, nil)
	// Every read carries its own lookup's grant (a cached answer's grant,
	// signed with the previous secret, is still accepted).
	c := newTestClient(t, client.Config{MasterAddr: serveMaster(t, m), LocationCacheEntries: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	keys := []string{"r0", "r1", "r2", "r3"}
	vals := map[string][]byte{}
	for _, k := range keys {
		vals[k] = rnd(32 << 10)
		if err := c.Put(ctx, k, vals[k]); err != nil {
			t.Fatal(err)
		}
	}
	rotateUnderLoad(t, path, mk, nk, 4, 8, "reads", func(i, j int) error {
		k := keys[(i+j)%len(keys)]
		if j%2 == 1 {
			_, errs := c.BatchGet(ctx, keys)
			return errors.Join(errs...)
		}
		got, err := c.Get(ctx, k)
		if err == nil && !bytes.Equal(got, vals[k]) {
			err = errors.New("wrong bytes")
		}
		return err
	})
	if st := n.Stats(); st.GrantsMissing+st.GrantsForged+st.GrantsExpired != 0 {
		t.Fatalf("refusals across the rotation: %+v", st)
	}
}

// tamperedPuts is the real master, whose PutStart answers' write grants a
// test rewrites before the client sees them.
type tamperedPuts struct {
	*master.Service
	f atomic.Pointer[func(*masterapi.Replica)]
}

func (m *tamperedPuts) rewrite(p *masterapi.PutStartReply) {
	if f := m.f.Load(); f != nil {
		(*f)(&p.Replica)
		for i := range p.More {
			(*f)(&p.More[i])
		}
	}
}

func (m *tamperedPuts) PutStart(ctx context.Context, req masterapi.PutStartRequest) (masterapi.PutStartReply, error) {
	p, err := m.Service.PutStart(ctx, req)
	if err == nil {
		m.rewrite(&p)
	}
	return p, err
}

func (m *tamperedPuts) BatchPutStart(ctx context.Context, reqs []masterapi.PutStartRequest) ([]masterapi.PutStartResult, error) {
	out, err := m.Service.BatchPutStart(ctx, reqs)
	for i := range out {
		if out[i].Err == nil {
			m.rewrite(&out[i].PutStartReply)
		}
	}
	return out, err
}

// writeScope is the write grant's scope of put replica r of key.
func writeScope(key string, r masterapi.Replica) grant.Scope {
	return grant.Scope{Kind: grant.Write, Node: r.Node, Key: []byte(key), Segment: r.Segment,
		Offset: uint64(r.Offset), Length: uint64(r.Length), Token: r.PutToken}
}

// With a grant secret on master and node, a data-plane write must carry
// the write grant PutStart made for it: the attack (a complete
// object's range claimed with a made-up larger put token) and a write to
// a put's own range are refused PERMISSION_DENIED naming why without a
// grant, with a forged one, with a grant of another range, put token, key
// or node, with a read grant, or past its expiry; each is counted and
// writes nothing (the range's bytes and the claims stay: the object still
// reads). A write grant is no read grant. The put's own grant works, for a
// single put, a put of 2 replicas and a batch put; the client sees the
// sentinels.
func TestGrantsBindWritesToPutStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "grant.secret")
	sec := writeGrantSecret(t, path)
	mc := testMasterConfig()
	mc.Grants = loadKeys(t, path)
	m := newMaster(t, mc)
	n := startGrantNode(t, m, loadKeys(t, path), nil)
	other := startGrantNode(t, m, loadKeys(t, path), nil)
	c := newTestClient(t, client.Config{MasterAddr: serveMaster(t, m), PreferredNode: n.Name()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Puts through the client: single, 2 replicas, batch.
	victim := rnd(256 << 10)
	if err := c.Put(ctx, "victim", victim); err != nil {
		t.Fatalf("put with grants: %v", err)
	}
	two := rnd(64 << 10)
	if err := c.PutWith(ctx, "two", two, client.PutOptions{Replicas: 2}); err != nil {
		t.Fatalf("put of 2 replicas with grants: %v", err)
	}
	bkeys := []string{"b0", "b1", "b2", "b3"}
	bvals := [][]byte{rnd(16 << 10), rnd(16 << 10), rnd(16 << 10), rnd(16 << 10)}
	if err := errors.Join(c.BatchPut(ctx, bkeys, bvals)...); err != nil {
		t.Fatalf("batch put with grants: %v", err)
	}
	for k, v := range map[string][]byte{"victim": victim, "two": two, "b0": bvals[0], "b3": bvals[3]} {
		if got, err := c.Get(ctx, k); err != nil || !bytes.Equal(got, v) {
			t.Fatalf("get %s: %v", k, err)
		}
	}
	if st1, st2 := n.Stats(), other.Stats(); st1.PeerWrites+st2.PeerWrites != 7 {
		t.Fatalf("peer writes %d + %d, want 7", st1.PeerWrites, st2.PeerWrites)
	}

	info, err := m.GetReplicaList(ctx, "victim")
	if err != nil {
		t.Fatal(err)
	}
	vr := info.Replicas[0]
	if vr.Kind != masterapi.DRAM || vr.Node != n.Name() {
		t.Fatalf("victim replica %+v, want DRAM on %s", vr, n.Name())
	}
	// A put in progress on n, whose grant the test holds.
	val := rnd(128 << 10)
	crc := crc32c.Checksum(val)
	ps, err := m.PutStart(ctx, masterapi.PutStartRequest{Key: "p", Size: int64(len(val)), CRC: crc, PreferredNode: n.Name()})
	if err != nil {
		t.Fatal(err)
	}
	pr := ps.Replica
	if pr.Node != n.Name() || len(pr.Grant) != grant.Size {
		t.Fatalf("PutStart's replica %+v: want one on %s with a write grant", pr, n.Name())
	}
	// The grant expires at the put's discard deadline (plus the node's skew).
	v := grant.NewVerifier(sec)
	end := time.Now().Add(mc.PutStartDiscardTimeout + v.Skew)
	if err := v.Verify(writeScope("p", pr), []byte(pr.Grant), end.Add(-time.Second)); err != nil {
		t.Fatalf("the write grant before the discard deadline: %v", err)
	}
	if err := v.Verify(writeScope("p", pr), []byte(pr.Grant), end.Add(time.Second)); !errors.Is(err, grant.ErrExpired) {
		t.Fatalf("the write grant after the discard deadline: %v", err)
	}

	dc, err := wire.DialData(ctx, n.Endpoint(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	signer := grant.NewSigner(sec)
	sign := func(sc grant.Scope, exp time.Time) []byte { g := signer.Sign(sc, exp); return g[:] }
	later := time.Now().Add(time.Minute)
	write := func(key string, r masterapi.Replica, token uint64, g []byte, b []byte) error {
		wctx := wire.WithObject(ctx, wire.Object{Key: key})
		return dc.WriteParts(wctx, r.Segment, r.Offset, [][]byte{b}, crc32c.Checksum(b), token, g)
	}
	junk := rnd(len(victim))
	big := vr.PutToken + 1<<40 // the attack: a made-up larger token
	atk := writeScope("victim", vr)
	atk.Token = big
	flipped := []byte(pr.Grant)
	flipped[grant.Size-1] ^= 1
	anotherRange, anotherNode, anotherKey, readKind := atk, atk, atk, atk
	anotherRange.Offset += 4096
	anotherNode.Node = other.Name()
	anotherKey.Key = []byte("p")
	readKind.Kind, readKind.Token = grant.Read, 0
	pTokenUp := writeScope("p", pr)
	pTokenUp.Token++
	type refusal struct {
		write func() error
		want  error
	}
	refusals := map[string]refusal{
		"no grant":                  {func() error { return write("victim", vr, big, nil, junk) }, grant.ErrMissing},
		"a made-up grant":           {func() error { return write("victim", vr, big, rnd(grant.Size), junk) }, grant.ErrForged},
		"another range's grant":     {func() error { return write("victim", vr, big, sign(anotherRange, later), junk) }, grant.ErrForged},
		"another node's grant":      {func() error { return write("victim", vr, big, sign(anotherNode, later), junk) }, grant.ErrForged},
		"another key's grant":       {func() error { return write("victim", vr, big, sign(anotherKey, later), junk) }, grant.ErrForged},
		"a read grant of the range": {func() error { return write("victim", vr, big, sign(readKind, later), junk) }, grant.ErrForged},
		"the lookup's read grant":   {func() error { return write("victim", vr, vr.PutToken, []byte(vr.Grant), junk) }, grant.ErrForged},
		"an expired grant":          {func() error { return write("victim", vr, big, sign(atk, time.Now().Add(-time.Minute)), junk) }, grant.ErrExpired},
		// The put in progress's own range.
		"p: no grant":                 {func() error { return write("p", pr, pr.PutToken, nil, val) }, grant.ErrMissing},
		"p: a flipped bit":            {func() error { return write("p", pr, pr.PutToken, flipped, val) }, grant.ErrForged},
		"p: its grant, a later token": {func() error { return write("p", pr, pr.PutToken+1, []byte(pr.Grant), val) }, grant.ErrForged},
		"p: its grant, another key":   {func() error { return write("victim", pr, pr.PutToken, []byte(pr.Grant), val) }, grant.ErrForged},
		"p: its grant, no key": {func() error {
			return dc.WriteParts(ctx, pr.Segment, pr.Offset, [][]byte{val}, crc, pr.PutToken, []byte(pr.Grant))
		}, grant.ErrForged},
		"p: an expired grant": {func() error {
			return write("p", pr, pr.PutToken, sign(writeScope("p", pr), time.Now().Add(-time.Minute)), val)
		}, grant.ErrExpired},
		"p: a grant of a later token":  {func() error { return write("p", pr, pr.PutToken, sign(pTokenUp, later), val) }, grant.ErrForged},
		"p: victim's range, p's grant": {func() error { return write("p", vr, pr.PutToken, []byte(pr.Grant), junk[:len(val)]) }, grant.ErrForged},
	}
	before, err := n.ReadRange(ctx, pr.Segment, pr.Offset, pr.Length)
	if err != nil {
		t.Fatal(err)
	}
	stBefore := n.Stats()
	var missing, forged, expired int64
	for name, r := range refusals {
		err := r.write()
		if !errors.Is(err, errcode.ErrPermissionDenied) || !strings.Contains(err.Error(), r.want.Error()) || !strings.Contains(err.Error(), "refuses the write") {
			t.Errorf("%s: %v, want PERMISSION_DENIED refusing the write, naming %q", name, err, r.want)
		}
		switch r.want {
		case grant.ErrMissing:
			missing++
		case grant.ErrForged:
			forged++
		default:
			expired++
		}
	}
	st := n.Stats()
	if st.WriteGrantsMissing != missing || st.WriteGrantsForged != forged || st.WriteGrantsExpired != expired {
		t.Errorf("node counts write refusals missing %d forged %d expired %d, want %d %d %d",
			st.WriteGrantsMissing, st.WriteGrantsForged, st.WriteGrantsExpired, missing, forged, expired)
	}
	if st.GrantsMissing+st.GrantsForged+st.GrantsExpired != stBefore.GrantsMissing+stBefore.GrantsForged+stBefore.GrantsExpired || st.PeerWrites != stBefore.PeerWrites {
		t.Errorf("refused writes counted as read refusals or as writes: %+v", st)
	}
	// Nothing was written: the victim's bytes and claim stand (it reads,
	// through the node's read check), the put's range is as it was.
	if got, err := n.ReadRange(ctx, vr.Segment, vr.Offset, vr.Length); err != nil || !bytes.Equal(got, victim) {
		t.Fatalf("the victim's range after the refused writes: %v (changed: %v)", err, !bytes.Equal(got, victim))
	}
	if got, err := c.Get(ctx, "victim"); err != nil || !bytes.Equal(got, victim) {
		t.Fatalf("get victim after the refused writes: %v", err)
	}
	if got, err := n.ReadRange(ctx, pr.Segment, pr.Offset, pr.Length); err != nil || !bytes.Equal(got, before) {
		t.Fatalf("the put's range after the refused writes: %v (changed: %v)", err, !bytes.Equal(got, before))
	}
	// A write grant is no read grant.
	vbuf := make([]byte, len(victim))
	if err := dc.ReadRangeParts(ctx, vr.Segment, vr.Offset, [][]byte{vbuf}, crc32c.Checksum(victim), sign(writeScope("victim", vr), later)); !errors.Is(err, errcode.ErrPermissionDenied) || !strings.Contains(err.Error(), grant.ErrForged.Error()) {
		t.Errorf("a read with the range's write grant: %v, want PERMISSION_DENIED (forged)", err)
	}
	// The put's own grant works.
	if err := write("p", pr, pr.PutToken, []byte(pr.Grant), val); err != nil {
		t.Fatalf("the write with its grant: %v", err)
	}
	if err := m.PutEnd(ctx, "p", pr.PutToken); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, "p"); err != nil || !bytes.Equal(got, val) {
		t.Fatalf("get p: %v", err)
	}

	// The client's side: a put whose grant is wrong fails PERMISSION_DENIED
	// with the sentinel, single or batch, and is revoked (the key can be
	// put again).
	tm := &tamperedPuts{Service: m}
	tc := newTestClient(t, client.Config{Master: tm, PreferredNode: n.Name()})
	for name, cs := range map[string]struct {
		g    func(r masterapi.Replica, key string) string
		want error
	}{
		"missing": {func(masterapi.Replica, string) string { return "" }, grant.ErrMissing},
		"forged":  {func(masterapi.Replica, string) string { return vr.Grant }, grant.ErrForged},
		"expired": {func(r masterapi.Replica, key string) string {
			return string(sign(writeScope(key, r), time.Now().Add(-time.Minute)))
		}, grant.ErrExpired},
	} {
		for _, batch := range []bool{false, true} {
			key := "t-" + name
			f := func(r *masterapi.Replica) { r.Grant = cs.g(*r, key) }
			tm.f.Store(&f)
			var err error
			if batch {
				err = tc.BatchPut(ctx, []string{key}, [][]byte{val})[0]
			} else {
				err = tc.Put(ctx, key, val)
			}
			if !errors.Is(err, errcode.ErrPermissionDenied) || !errors.Is(err, cs.want) {
				t.Errorf("client put (batch %v) with a %s grant: %v, want PERMISSION_DENIED and %v", batch, name, err, cs.want)
			}
		}
	}
	tm.f.Store(nil)
	if err := tc.Put(ctx, "t-forged", val); err != nil {
		t.Fatalf("a put after the refused ones: %v", err)
	}
}

// Rotating the secret file under live puts fails none: PutStart's write
// grants are signed with the master's newest secret, the node takes the
// newest and the previous and re-reads the file at once when a grant of a
// secret it has not read arrives. Writers (single puts and batch puts,
// each key read back and removed by force) run throughout; after each rotation the
// test waits for puts started after it to complete before the next.
func TestGrantRotationUnderLivePuts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "grant.secret")
	writeGrantSecret(t, path)
	mk := loadKeys(t, path)
	mc := testMasterConfig()
	mc.Grants = mk
	m := newMaster(t, mc)
	nk := loadKeys(t, path)
	n := startGrantNode(t, m, nk, nil)
	c := newTestClient(t, client.Config{MasterAddr: serveMaster(t, m)})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rotateUnderLoad(t, path, mk, nk, 3, 6, "puts", func(i, j int) error {
		keys := []string{fmt.Sprintf("w%d-%d", i, j)}
		if j%2 == 1 {
			keys = append(keys, keys[0]+"-b1", keys[0]+"-b2", keys[0]+"-b3")
		}
		vals := make([][]byte, len(keys))
		for k := range vals {
			vals[k] = rnd(16 << 10)
		}
		var err error
		if len(keys) == 1 {
			err = c.Put(ctx, keys[0], vals[0])
		} else {
			err = errors.Join(c.BatchPut(ctx, keys, vals)...)
		}
		for k, key := range keys {
			if err != nil {
				break
			}
			var got []byte
			if got, err = c.Get(ctx, key); err == nil && !bytes.Equal(got, vals[k]) {
				err = fmt.Errorf("%s: wrong bytes", key)
			}
			if err == nil {
				err = c.Remove(ctx, key, true) // leased by the get
			}
		}
		return err
	})
	if st := n.Stats(); st.WriteGrantsMissing+st.WriteGrantsForged+st.WriteGrantsExpired+st.GrantsMissing+st.GrantsForged+st.GrantsExpired != 0 || st.PeerWrites == 0 {
		t.Fatalf("refusals across the rotation, or no write: %+v", st)
	}
}
