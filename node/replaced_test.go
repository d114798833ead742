package node

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
)

// replacingMaster answers a reader's first lookup, then, before the reader
// reads, runs replace (a concurrent writer's forced remove and new put),
// as the partition scenarios' clients did (docs/reliability.md).
type replacingMaster struct {
	masterapi.ClientAPI
	replace func()
	once    sync.Once
}

func (m *replacingMaster) GetReplicaList(ctx context.Context, key string) (masterapi.ObjectInfo, error) {
	info, err := m.ClientAPI.GetReplicaList(ctx, key)
	m.once.Do(m.replace)
	return info, err
}

// dramOffset is the offset of key's DRAM replica.
func dramOffset(t *testing.T, m masterapi.ClientAPI, key string) int64 {
	t.Helper()
	info, err := m.GetReplicaList(masterapi.WithOffloadPath(context.Background()), key)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range info.Replicas {
		if r.Kind == masterapi.DRAM {
			return r.Offset
		}
	}
	t.Fatalf("%s has no DRAM replica", key)
	return 0
}

// A get whose key is replaced between its lookup and its read (the range
// it was told to read freed by a forced remove and written by the next
// put) answers the new value, or OBJECT_NOT_FOUND when the key is gone,
// not CHECKSUM_MISMATCH.
func TestGetOfAKeyReplacedWhileItReads(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	startTestNode(t, m, "127.0.0.1:0", nil)
	w := newTestClient(t, client.Config{Master: m})
	ctx := context.Background()
	const size = 64 << 10
	for _, tc := range []struct {
		name    string
		into    bool
		gone    bool
		wantErr error
	}{
		{name: "get"}, {name: "get into", into: true}, {name: "removed", gone: true, wantErr: errcode.ErrObjectNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, other := "k-"+tc.name, "other-"+tc.name
			v1, v2 := rnd(size), rnd(size)
			if err := w.Put(ctx, key, v1); err != nil {
				t.Fatal(err)
			}
			off := dramOffset(t, m, key)
			rm := &replacingMaster{ClientAPI: m, replace: func() {
				if err := w.Remove(ctx, key, true); err != nil {
					t.Error(err)
				}
				next := key
				if tc.gone {
					next = other // another key takes the range
				}
				if err := w.Put(ctx, next, v2); err != nil {
					t.Error(err)
				}
				if got := dramOffset(t, m, next); got != off {
					t.Errorf("the new put is at offset %d, not in the range freed at %d: the race this test needs did not happen", got, off)
				}
			}}
			r := newTestClient(t, client.Config{Master: rm})
			var got []byte
			var err error
			if tc.into {
				buf := make([]byte, size)
				var n int
				n, err = r.GetInto(ctx, key, buf)
				got = buf[:n]
			} else {
				got, err = r.Get(ctx, key)
			}
			switch {
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("get of a key removed while it read: %v, want %v", err, tc.wantErr)
			case tc.wantErr == nil && err != nil:
				t.Fatalf("get of a key replaced while it read: %v", err)
			case tc.wantErr == nil && !bytes.Equal(got, v2):
				t.Fatal("get of a key replaced while it read: not the new value")
			}
			if err := w.Remove(ctx, key, true); err != nil && !errors.Is(err, errcode.ErrObjectNotFound) {
				t.Fatal(err)
			}
			_ = w.Remove(ctx, other, true)
		})
	}
}
