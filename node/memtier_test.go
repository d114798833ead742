package node

import (
	"context"
	"fmt"
	"sync"

	"github.com/tierstore/tierstore/internal/crc32c"
	"github.com/tierstore/tierstore/tier"
)

// memTier is an in-memory SSDTier for unit tests of the node: it follows
// the tier engine's contract (one notify per call with the committed keys,
// rollback when notify fails, AlreadyPresent for keys it holds, every task
// answered once, a cancelled context fails the call).
type memTier struct {
	mu       sync.Mutex // protects everything below
	objs     map[string][]byte
	failKeys map[string]bool // Offload answers these Failed (retryable)
	corrupt  map[string]bool // Load answers these client.ErrChecksum and drops them
	// block, when set, is closed by the test to let Offload proceed; entered
	// is closed when Offload starts waiting on it.
	block, entered chan struct{}
	offloads       int
	statsCalls     int
	closed         bool
	mark           []byte
}

func newMemTier() *memTier {
	return &memTier{objs: map[string][]byte{}, failKeys: map[string]bool{}, corrupt: map[string]bool{}}
}

func (m *memTier) Offload(ctx context.Context, tasks []tier.Task, notify tier.NotifyFunc) []tier.Outcome {
	m.mu.Lock()
	block, entered := m.block, m.entered
	m.block, m.entered = nil, nil
	m.offloads++
	m.mu.Unlock()
	if block != nil {
		close(entered)
		<-block
	}
	outs := make([]tier.Outcome, len(tasks))
	var committed []tier.Committed
	var idx []int
	m.mu.Lock()
	for i, t := range tasks {
		outs[i].Key = t.Key
		switch {
		case ctx.Err() != nil:
			outs[i].Status, outs[i].Err, outs[i].Retryable = tier.Failed, ctx.Err(), true
		case m.failKeys[string(t.Key)]:
			outs[i].Status, outs[i].Err, outs[i].Retryable = tier.Failed, fmt.Errorf("memtier: injected failure"), true
		case m.objs[string(t.Key)] != nil:
			outs[i].Status = tier.AlreadyPresent
		default:
			m.objs[string(t.Key)] = append([]byte(nil), t.Value...)
			committed = append(committed, tier.Committed{Key: t.Key, Size: int64(len(t.Value)), CRC: crc32c.Checksum(t.Value), Bucket: 1})
			idx = append(idx, i)
		}
	}
	m.mu.Unlock()
	if len(committed) == 0 {
		return outs
	}
	if err := notify(ctx, committed); err != nil {
		m.mu.Lock()
		for _, c := range committed {
			delete(m.objs, string(c.Key))
		}
		m.mu.Unlock()
		for _, i := range idx {
			outs[i].Status, outs[i].Err, outs[i].Retryable = tier.Failed, fmt.Errorf("%w: %w", tier.ErrNotifyFailed, err), true
		}
		return outs
	}
	for _, i := range idx {
		outs[i].Status = tier.Persisted
	}
	return outs
}

func (m *memTier) Load(_ context.Context, keys [][]byte) []tier.LoadResult {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]tier.LoadResult, len(keys))
	for i, k := range keys {
		v, ok := m.objs[string(k)]
		if ok && m.corrupt[string(k)] {
			delete(m.objs, string(k))
			out[i].Err = fmt.Errorf("memtier: %w", tier.ErrChecksum)
			continue
		}
		if !ok {
			out[i].Err = tier.ErrNotFound
			continue
		}
		out[i].Value = append([]byte(nil), v...)
	}
	return out
}

func (m *memTier) Exists(key []byte) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.objs[string(key)] != nil, nil
}

func (m *memTier) Remove(key []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.objs[string(key)] == nil {
		return tier.ErrNotFound
	}
	delete(m.objs, string(key))
	return nil
}

func (m *memTier) RemoveKeys(keys [][]byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, k := range keys {
		if m.objs[string(k)] != nil {
			delete(m.objs, string(k))
			n++
		}
	}
	return n, nil
}

// Mark and SetMark keep the mark in memory: it survives a node restarted
// on the same memTier, as the tier engine's survives on its directory.
func (m *memTier) Mark() ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mark, nil
}

func (m *memTier) SetMark(b []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mark = append([]byte(nil), b...)
	return nil
}

func (m *memTier) Keys(fn func([]byte, tier.KeyInfo) bool) error {
	m.mu.Lock()
	type kv struct {
		k string
		v []byte
	}
	var all []kv
	for k, v := range m.objs {
		all = append(all, kv{k, v})
	}
	m.mu.Unlock()
	for _, e := range all {
		if !fn([]byte(e.k), tier.KeyInfo{Size: int64(len(e.v)), CRC: crc32c.Checksum(e.v), Bucket: 1}) {
			break
		}
	}
	return nil
}

func (m *memTier) Stats() tier.Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.statsCalls++
	return tier.Stats{Objects: int64(len(m.objs))}
}

func (m *memTier) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}

// put stores an object directly, as if an earlier process had offloaded it.
func (m *memTier) put(key string, val []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objs[key] = append([]byte(nil), val...)
}

func (m *memTier) has(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.objs[key] != nil
}
