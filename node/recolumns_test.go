package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/keyspec"
	pb "github.com/tierstore/tierstore/internal/rpcpb"
	"github.com/tierstore/tierstore/masterapi"
	"github.com/tierstore/tierstore/mastergrpc"
	"github.com/tierstore/tierstore/tier"
)

// Master protocol 4: a node re-registers its real SSD tier's objects over
// gRPC (loopback) in chunks of columns, and the master records every one
// with the size and CRC32C the tier holds. Chunks whose columns do not
// agree are refused whole with INVALID_PARAMS naming the fault, and
// nothing of them is recorded (the valid objects before the fault
// included).
func TestRemoteReRegisterColumns(t *testing.T) {
	ctx := context.Background()
	eng, err := tier.Open(t.TempDir(), tier.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	const count = 3*reRegisterBatch + 17
	tasks := make([]tier.Task, count)
	for i := range tasks {
		key := fmt.Sprintf("k%d/", i)
		switch i {
		case 5:
			key = strings.Repeat("L", keyspec.MaxLen) // the longest key
		case 6:
			key = "x" // the shortest
		}
		tasks[i] = tier.Task{Key: []byte(key), Value: []byte(strings.Repeat("v", 1+i%300))}
	}
	for _, o := range eng.Offload(ctx, tasks, nil) {
		if o.Status != tier.Persisted {
			t.Fatalf("offload %s: %v %v", o.Key, o.Status, o.Err)
		}
	}
	want := map[string]tier.KeyInfo{}
	if err := eng.Keys(func(k []byte, info tier.KeyInfo) bool { want[string(k)] = info; return true }); err != nil {
		t.Fatal(err)
	}
	if len(want) != count {
		t.Fatalf("tier lists %d keys, want %d", len(want), count)
	}

	m := newMaster(t, testMasterConfig())
	addr := serveMaster(t, m)
	r, err := mastergrpc.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	rec := &recordingMaster{API: r}
	n := startTestNode(t, rec, "", eng) // re-registers at start

	rec.mu.Lock()
	calls := append([]int(nil), rec.reRegisters...)
	rec.mu.Unlock()
	slices.Sort(calls) // chunks are sent concurrently
	slices.Reverse(calls)
	if fmt.Sprint(calls) != fmt.Sprint([]int{reRegisterBatch, reRegisterBatch, reRegisterBatch, 17}) {
		t.Fatalf("re-registration chunks %v, want three of %d and one of 17", calls, reRegisterBatch)
	}
	st, err := m.Stats(ctx)
	if err != nil || st.SSDReplicas != count || st.Objects != count {
		t.Fatalf("master stats %+v (%v): want %d objects on SSD", st, err, count)
	}
	for k, info := range want {
		got, err := m.GetReplicaList(ctx, k)
		if err != nil || got.Size != info.Size || got.CRC != info.CRC || len(got.Replicas) != 1 || got.Replicas[0].Kind != masterapi.SSD {
			t.Fatalf("key %s: master has %+v (%v), tier size %d crc %08x", keyspec.Show(k), got, err, info.Size, info.CRC)
		}
	}

	// Bad columns, sent raw (the client checks them before sending).
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	raw := pb.NewMasterClient(conn)
	good := []byte("fresh-a" + "fresh-b")
	long := strings.Repeat("z", keyspec.MaxLen+1)
	for _, bad := range []struct {
		name string
		cols *pb.SSDObjectColumns
		says string
	}{
		{"lengths add up to more", &pb.SSDObjectColumns{Keys: good, KeyLens: []uint32{7, 7, 3}, Sizes: []int64{1, 1, 1}, Crcs: []uint32{1, 1, 1}}, "add up to more than the 14 key bytes (at key 2)"},
		{"lengths add up to less", &pb.SSDObjectColumns{Keys: append(good, "tail"...), KeyLens: []uint32{7, 7}, Sizes: []int64{1, 1}, Crcs: []uint32{1, 1}}, "key lengths add up to 14, the key bytes are 18"},
		{"too long key", &pb.SSDObjectColumns{Keys: append(good, long...), KeyLens: []uint32{7, 7, uint32(len(long))}, Sizes: []int64{1, 1, 1}, Crcs: []uint32{1, 1, 1}}, "key 2 is 4097 bytes, want 1..4096"},
		{"empty key", &pb.SSDObjectColumns{Keys: good, KeyLens: []uint32{7, 0, 7}, Sizes: []int64{1, 1, 1}, Crcs: []uint32{1, 1, 1}}, "key 1 is 0 bytes"},
		{"short size column", &pb.SSDObjectColumns{Keys: good, KeyLens: []uint32{7, 7}, Sizes: []int64{1}, Crcs: []uint32{1, 1}}, "2 key lengths, 1 sizes, 2 CRCs"},
	} {
		_, err := raw.ReRegisterSSDObjects(ctx, &pb.RegisterSSDObjectsRequest{Node: n.Name(), Objects: bad.cols})
		err = errcode.FromStatus(err)
		if errcode.Of(err) != errcode.InvalidParams || !strings.Contains(err.Error(), bad.says) || !strings.Contains(err.Error(), "bad SSD object columns") {
			t.Fatalf("%s: got %v, want INVALID_PARAMS saying %q", bad.name, err, bad.says)
		}
		if st, _ := m.Stats(ctx); st.Objects != count || st.SSDReplicas != count {
			t.Fatalf("%s: the refused chunk was partly recorded: %+v", bad.name, st)
		}
		// The same chunk in process: the sentinel.
		_, err = m.ReRegisterSSDColumns(ctx, n.Name(), masterapi.SSDColumns{Keys: bad.cols.Keys, Lens: bad.cols.KeyLens, Sizes: bad.cols.Sizes, CRCs: bad.cols.Crcs})
		if !errors.Is(err, masterapi.ErrBadColumns) || !errors.Is(err, errcode.ErrInvalidParams) {
			t.Fatalf("%s in process: got %v, want ErrBadColumns", bad.name, err)
		}
		// And through the client: refused before sending, the sentinel.
		_, err = r.ReRegisterSSDColumns(ctx, n.Name(), masterapi.SSDColumns{Keys: bad.cols.Keys, Lens: bad.cols.KeyLens, Sizes: bad.cols.Sizes, CRCs: bad.cols.Crcs})
		if !errors.Is(err, masterapi.ErrBadColumns) {
			t.Fatalf("%s through the client: got %v, want ErrBadColumns", bad.name, err)
		}
	}

	// Refusals are per object and sparse: a conflicting size is refused
	// alone, a new key recorded.
	k0 := string(tasks[0].Key)
	cols := masterapi.ColumnsOf([]masterapi.SSDObject{{Key: "brand-new", Size: 9, CRC: 9}, {Key: k0, Size: want[k0].Size + 1, CRC: want[k0].CRC}})
	errs, err := r.ReRegisterSSDColumns(ctx, n.Name(), cols)
	if err != nil || len(errs) != 2 || errs[0] != nil || !errors.Is(errs[1], errcode.ErrChecksumConflict) {
		t.Fatalf("mixed chunk: %v %v", errs, err)
	}
}
