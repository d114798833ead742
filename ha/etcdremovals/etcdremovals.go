// Package etcdremovals keeps the master's removal log (docs/design.md,
// "Object lifecycle", invariant 10) in etcd, for highly available masters:
// the leader of each term appends to it, the next one loads it, so a
// removal acknowledged by one leader is known to the next.
//
// Layout under its prefix (ha_prefix + Suffix: beside the election's
// prefix, never under it, where every key is a candidate):
//
//	meta                      "<id> <origin> <floor>"
//	e/<seq %016x>/<i %04x>/<n %04x>   chunk i of n of entry seq (master.AppendRemoval's bytes)
//
// An entry is split into chunks of at most chunkBytes (a RemoveAll's
// spared list may be long; etcd refuses values above 1.5 MiB); Load keeps
// an entry only when all its chunks are there (a crash between two
// transactions of one Append leaves a partial entry, never acknowledged,
// and the next Append writes it again). Every write is a transaction
// guarded by the leader's election key (ha.Leadership.Guard): a deposed
// leader appends nothing.
//
// Concurrency: the master calls a Store from one goroutine at a time.
package etcdremovals

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tierstore/tierstore/master"
	"github.com/tierstore/tierstore/masterapi"
)

// Guarded is what the store needs of a leadership (ha.Leadership
// implements it).
type Guarded interface {
	Guard() clientv3.Cmp
	KV() clientv3.KV
}

// Suffix is appended to the HA prefix to name the log's prefix
// ("/tierstore/master-removals"): a key under the election prefix itself
// would be taken for a candidate and block every campaign.
const Suffix = "-removals"

// Bounds of one transaction: chunk size, operations and bytes.
const (
	chunkBytes = 512 << 10
	txnOps     = 64
	txnBytes   = 1 << 20
)

// ErrDeposed: a write's guard failed, the leadership is gone.
var ErrDeposed = errors.New("etcdremovals: not the leader any more (the election key changed)")

// Store is a master.RemovalStore in etcd.
type Store struct {
	g      Guarded
	prefix string
}

var _ master.RemovalStore = (*Store)(nil)

// New returns the store of the log under prefix, written through g.
func New(g Guarded, prefix string) *Store { return &Store{g: g, prefix: prefix} }

func (s *Store) meta() string { return s.prefix + "/meta" }

func (s *Store) entryPrefix() string { return s.prefix + "/e/" }

func (s *Store) chunkKey(seq uint64, i, n int) string {
	return fmt.Sprintf("%s%016x/%04x/%04x", s.entryPrefix(), seq, i, n)
}

// Load implements master.RemovalStore.
func (s *Store) Load(ctx context.Context) (master.RemovalState, error) {
	var st master.RemovalState
	m, err := s.g.KV().Get(ctx, s.meta())
	if err != nil {
		return st, fmt.Errorf("etcdremovals: reading %s: %w", s.meta(), err)
	}
	if len(m.Kvs) == 0 {
		return st, nil
	}
	if st, err = parseMeta(string(m.Kvs[0].Value)); err != nil {
		return st, fmt.Errorf("etcdremovals: %s: %w", s.meta(), err)
	}
	r, err := s.g.KV().Get(ctx, s.entryPrefix(), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend),
		clientv3.WithRev(m.Header.Revision))
	if err != nil {
		return st, fmt.Errorf("etcdremovals: reading the entries: %w", err)
	}
	var cur []byte
	var seq uint64
	next := 0
	for _, kv := range r.Kvs {
		sq, i, n, err := parseChunk(strings.TrimPrefix(string(kv.Key), s.entryPrefix()))
		if err != nil {
			return st, fmt.Errorf("etcdremovals: key %q: %w", kv.Key, err)
		}
		if sq != seq || i != next {
			cur, seq, next = nil, sq, 0
			if i != 0 {
				continue // a partial entry
			}
		}
		cur = append(cur, kv.Value...)
		next++
		if next == n {
			e, err := master.DecodeRemoval(cur)
			if err != nil {
				return st, fmt.Errorf("etcdremovals: entry %d: %w", sq, err)
			}
			if e.Seq >= st.Floor {
				st.Entries = append(st.Entries, e)
			}
			cur, next = nil, 0
		}
	}
	return st, nil
}

// Create implements master.RemovalStore: only if no log exists.
func (s *Store) Create(ctx context.Context, id string, origin uint64) error {
	ctx, cancel := s.whileLeading(ctx)
	defer cancel()
	t := s.txn(ctx, clientv3.Compare(clientv3.Version(s.meta()), "=", 0)).
		Then(clientv3.OpPut(s.meta(), formatMeta(id, origin, origin)))
	return s.commit(ctx, t, "create the log")
}

// Append implements master.RemovalStore.
func (s *Store) Append(ctx context.Context, entries []masterapi.Removal) error {
	ctx, cancel := s.whileLeading(ctx)
	defer cancel()
	var ops []clientv3.Op
	size := 0
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		err := s.commit(ctx, s.txn(ctx).Then(ops...), "append")
		ops, size = ops[:0], 0
		return err
	}
	for _, e := range entries {
		b := master.AppendRemoval(nil, e)
		n := max(1, (len(b)+chunkBytes-1)/chunkBytes)
		for i := range n {
			part := b[i*chunkBytes : min(len(b), (i+1)*chunkBytes)]
			if len(ops) == txnOps || size+len(part) > txnBytes {
				if err := flush(); err != nil {
					return err
				}
			}
			ops = append(ops, clientv3.OpPut(s.chunkKey(e.Seq, i, n), string(part)))
			size += len(part)
		}
	}
	return flush()
}

// Trim implements master.RemovalStore.
func (s *Store) Trim(ctx context.Context, floor uint64) error {
	ctx, cancel := s.whileLeading(ctx)
	defer cancel()
	m, err := s.g.KV().Get(ctx, s.meta())
	if err != nil || len(m.Kvs) == 0 {
		return fmt.Errorf("etcdremovals: trim: reading %s: %v", s.meta(), err)
	}
	st, err := parseMeta(string(m.Kvs[0].Value))
	if err != nil {
		return fmt.Errorf("etcdremovals: trim: %w", err)
	}
	if floor <= st.Floor {
		return nil
	}
	end := fmt.Sprintf("%s%016x", s.entryPrefix(), floor)
	t := s.txn(ctx).Then(clientv3.OpDelete(s.entryPrefix(), clientv3.WithRange(end)),
		clientv3.OpPut(s.meta(), formatMeta(st.ID, st.Origin, floor)))
	return s.commit(ctx, t, "trim")
}

// whileLeading is ctx, also ended (cause ErrDeposed) when the leadership
// guarding the store ends, if the Guarded says when (ha.Leadership's
// Done). The master flushes its removal log without a deadline; a leader
// cut off from etcd would otherwise hold that flush, and the call that
// runs it, until its etcd client is closed, seconds after its fence went
// down (partitions scenario ha-leader-cut-from-etcd), although a deposed
// leader's write is refused by the guard anyway.
func (s *Store) whileLeading(ctx context.Context) (context.Context, context.CancelFunc) {
	d, ok := s.g.(interface{ Done() <-chan struct{} })
	if !ok {
		return context.WithCancel(ctx)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	stop := make(chan struct{})
	go func() {
		select {
		case <-d.Done():
			cancel(ErrDeposed)
		case <-stop:
		}
	}()
	return ctx, func() { close(stop); cancel(nil) }
}

// txn starts a transaction guarded by the leadership, and by more.
func (s *Store) txn(ctx context.Context, more ...clientv3.Cmp) clientv3.Txn {
	return s.g.KV().Txn(ctx).If(append([]clientv3.Cmp{s.g.Guard()}, more...)...)
}

func (s *Store) commit(ctx context.Context, t clientv3.Txn, what string) error {
	r, err := t.Commit()
	if err != nil && errors.Is(context.Cause(ctx), ErrDeposed) {
		return fmt.Errorf("etcdremovals: %s under %s: %w (%v)", what, s.prefix, ErrDeposed, err)
	}
	if err != nil {
		return fmt.Errorf("etcdremovals: %s under %s: %w", what, s.prefix, err)
	}
	if !r.Succeeded {
		return fmt.Errorf("etcdremovals: %s under %s: %w", what, s.prefix, ErrDeposed)
	}
	return nil
}

func formatMeta(id string, origin, floor uint64) string {
	return fmt.Sprintf("%s %d %d", id, origin, floor)
}

func parseMeta(v string) (master.RemovalState, error) {
	f := strings.Fields(v)
	if len(f) != 3 {
		return master.RemovalState{}, fmt.Errorf("meta %q: want \"id origin floor\"", v)
	}
	o, err1 := strconv.ParseUint(f[1], 10, 64)
	fl, err2 := strconv.ParseUint(f[2], 10, 64)
	if err1 != nil || err2 != nil {
		return master.RemovalState{}, fmt.Errorf("meta %q: bad numbers", v)
	}
	return master.RemovalState{ID: f[0], Origin: o, Floor: max(fl, o)}, nil
}

func parseChunk(k string) (seq uint64, i, n int, err error) {
	p := strings.Split(k, "/")
	if len(p) != 3 {
		return 0, 0, 0, errors.New("not seq/i/n")
	}
	seq, err = strconv.ParseUint(p[0], 16, 64)
	ii, err2 := strconv.ParseUint(p[1], 16, 16)
	nn, err3 := strconv.ParseUint(p[2], 16, 16)
	if err != nil || err2 != nil || err3 != nil || nn == 0 || ii >= nn {
		return 0, 0, 0, errors.New("bad chunk numbers")
	}
	return seq, int(ii), int(nn), nil
}
