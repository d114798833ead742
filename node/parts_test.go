package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/errcode"
)

// layerParts is a vLLM block: n layer buffers of size bytes each, random.
func layerParts(n, size int) [][]byte {
	ps := make([][]byte, n)
	for i := range ps {
		ps[i] = rnd(size)
	}
	return ps
}

// guardedParts are empty parts shaped as want, each with a guard band
// after it (guardedBuf); check compares them with want and the guards.
func guardedParts(t *testing.T, want [][]byte) ([][]byte, func()) {
	ps := make([][]byte, len(want))
	guards := make([]func(), len(want))
	for i, w := range want {
		ps[i], guards[i] = guardedBuf(t, len(w))
	}
	return ps, func() {
		t.Helper()
		for i := range ps {
			guards[i]()
			if !bytes.Equal(ps[i], want[i]) {
				t.Fatalf("part %d of %d differs from the part put", i, len(ps))
			}
		}
	}
}

// The vLLM layout: a 2 MiB block gathered from 64 layer buffers of 32 KiB
// is one object (its CRC32C the whole's, equal to a put of the
// concatenation), and scatters back byte-identical into 64 buffers, for a
// remote client (writev / read into each part on the data plane) and the
// in-process one (copies straight into and out of the segment), from DRAM
// and, once offloaded and evicted, from SSD; in single and batch forms.
func TestGatherScatterVLLMLayout(t *testing.T) {
	n, _, _, remote, local := ssdNode(t)
	ctx := context.Background()
	clients := map[string]*client.Client{"remote": remote, "local": local}
	blocks := map[string][][]byte{}
	// Keys on DRAM, and keys offloaded and evicted before any read (a read
	// grants a lease that keeps the DRAM copy).
	for _, tierName := range []string{"dram", "ssd"} {
		for name, c := range clients {
			k := tierName + "-block-" + name
			blocks[k] = layerParts(64, 32<<10)
			if err := c.PutParts(ctx, k, blocks[k], client.PutOptions{}); err != nil {
				t.Fatalf("%s PutParts: %v", name, err)
			}
			if tierName == "ssd" {
				continue // a lookup grants a lease, which keeps the DRAM copy
			}
			whole := bytes.Join(blocks[k], nil)
			info, err := c.Master().GetReplicaList(ctx, k)
			if err != nil || info.Size != 2<<20 || info.CRC != client.CRC32C(whole) {
				t.Fatalf("%s: object %+v %v, want 2 MiB with the CRC32C of the concatenation %08x", name, info, err, client.CRC32C(whole))
			}
		}
		// Uneven parts across the data plane's 128 KiB checksum chunks.
		odd := [][]byte{rnd(1), rnd(200 << 10), rnd(4095), {}, rnd(128 << 10), rnd(7)}
		if err := remote.PutParts(ctx, tierName+"-odd", odd, client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		blocks[tierName+"-odd"] = odd
	}
	ssdKeys := []string{"ssd-block-remote", "ssd-block-local", "ssd-odd"}
	if got := n.OffloadNow(); got != 2*len(ssdKeys) {
		t.Fatalf("offloaded %d of %d", got, 2*len(ssdKeys))
	}
	if d, err := local.EvictDRAM(ctx, ssdKeys, false); err != nil || d.Dropped != int64(len(ssdKeys)) {
		t.Fatalf("evict: %+v %v", d, err)
	}
	readAll := func(tierName string) {
		t.Helper()
		keys := []string{tierName + "-block-remote", tierName + "-block-local", tierName + "-odd"}
		for name, c := range clients {
			for _, k := range keys {
				want := blocks[k]
				ps, check := guardedParts(t, want)
				got, err := c.GetIntoParts(ctx, k, ps)
				if err != nil || got != int(partsLen(want)) {
					t.Fatalf("%s %s GetIntoParts %s: %d %v", tierName, name, k, got, err)
				}
				check()
				whole, err := c.Get(ctx, k)
				if err != nil || !bytes.Equal(whole, bytes.Join(want, nil)) {
					t.Fatalf("%s %s Get %s: %v", tierName, name, k, err)
				}
			}
			bufs := make([][][]byte, len(keys))
			checks := make([]func(), len(keys))
			for i, k := range keys {
				bufs[i], checks[i] = guardedParts(t, blocks[k])
			}
			ns, errs := c.BatchGetIntoParts(ctx, keys, bufs)
			for i, k := range keys {
				if errs[i] != nil || ns[i] != int(partsLen(blocks[k])) {
					t.Fatalf("%s %s BatchGetIntoParts %s: %d %v", tierName, name, k, ns[i], errs[i])
				}
				checks[i]()
			}
		}
	}
	readAll("dram")
	readAll("ssd")
	if rs := remote.ReadStats(); rs.RemoteSSD == 0 || rs.RemoteDRAM == 0 || rs.ChecksumFailures != 0 {
		t.Fatalf("remote read stats %+v", rs)
	}
	if rs := local.ReadStats(); rs.LocalSSD == 0 || rs.LocalDRAM == 0 || rs.ChecksumFailures != 0 {
		t.Fatalf("local read stats %+v", rs)
	}
}

// BatchPutParts stores each key's parts as one object; the batch reads
// (pipelined for remote DRAM) scatter them back.
func TestBatchPutParts(t *testing.T) {
	_, _, _, remote, local := ssdNode(t)
	ctx := context.Background()
	for name, c := range map[string]*client.Client{"remote": remote, "local": local} {
		var keys []string
		var vals [][][]byte
		for i := range 4 {
			keys = append(keys, fmt.Sprintf("%s-%d", name, i))
			vals = append(vals, layerParts(16+i, 8<<10+i))
		}
		for i, err := range c.BatchPutParts(ctx, keys, vals, client.PutOptions{}) {
			if err != nil {
				t.Fatalf("%s item %d: %v", name, i, err)
			}
		}
		for _, r := range []*client.Client{remote, local} {
			bufs := make([][][]byte, len(keys))
			checks := make([]func(), len(keys))
			for i := range keys {
				bufs[i], checks[i] = guardedParts(t, vals[i])
			}
			ns, errs := r.BatchGetIntoParts(ctx, keys, bufs)
			for i := range keys {
				if errs[i] != nil || ns[i] != int(partsLen(vals[i])) {
					t.Fatalf("%s: item %d: %d %v", name, i, ns[i], errs[i])
				}
				checks[i]()
			}
		}
	}
}

// Bad parts get clear errors and lose nothing: parts too small for the
// object are ErrBufferTooSmall with nothing written (single and batch,
// the other items of the batch read); larger parts get the object in their
// first bytes and nothing after; empty puts and mismatched batch lists
// are ErrInvalidParams naming the problem.
func TestPartsMismatched(t *testing.T) {
	_, _, _, remote, local := ssdNode(t)
	ctx := context.Background()
	val := layerParts(4, 1000)
	if err := remote.PutParts(ctx, "k", val, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*client.Client{"remote": remote, "local": local} {
		small := [][]byte{bytes.Repeat([]byte{7}, 1000), bytes.Repeat([]byte{7}, 2999)}
		_, err := c.GetIntoParts(ctx, "k", small)
		if !errors.Is(err, client.ErrBufferTooSmall) || !errors.Is(err, errcode.ErrInvalidParams) {
			t.Fatalf("%s: too-small parts: %v", name, err)
		}
		if bytes.Count(small[0], []byte{7}) != 1000 || bytes.Count(small[1], []byte{7}) != 2999 {
			t.Fatalf("%s: a too-small read wrote into the parts", name)
		}
		big := [][]byte{make([]byte, 1500), make([]byte, 1500), bytes.Repeat([]byte{9}, 1500)}
		big[1][1499] = 9
		if got, err := c.GetIntoParts(ctx, "k", big); err != nil || got != 4000 {
			t.Fatalf("%s: larger parts: %d %v", name, got, err)
		}
		want := bytes.Join(val, nil)
		if !bytes.Equal(append(append(big[0][:1500:1500], big[1]...), big[2][:1000]...), want) {
			t.Fatalf("%s: larger parts hold other bytes", name)
		}
		if !bytes.Equal(big[2][1000:], bytes.Repeat([]byte{9}, 500)) {
			t.Fatalf("%s: bytes past the object were written", name)
		}
		ns, errs := c.BatchGetIntoParts(ctx, []string{"k", "k"}, [][][]byte{{make([]byte, 10)}, {make([]byte, 4000)}})
		if !errors.Is(errs[0], client.ErrBufferTooSmall) || errs[1] != nil || ns[1] != 4000 {
			t.Fatalf("%s: batch with one too-small item: %v %v", name, ns, errs)
		}
		_, errs = c.BatchGetIntoParts(ctx, []string{"k", "k"}, [][][]byte{{make([]byte, 4000)}})
		for _, err := range errs {
			if !errors.Is(err, errcode.ErrInvalidParams) {
				t.Fatalf("%s: 2 keys, 1 part list: %v", name, err)
			}
		}
		for _, err := range c.BatchPutParts(ctx, []string{"a", "b"}, [][][]byte{{rnd(1)}}, client.PutOptions{}) {
			if !errors.Is(err, errcode.ErrInvalidParams) {
				t.Fatalf("%s: batch put, 2 keys, 1 part list: %v", name, err)
			}
		}
		if err := c.PutParts(ctx, "empty-"+name, [][]byte{{}, {}}, client.PutOptions{}); !errors.Is(err, errcode.ErrInvalidParams) {
			t.Fatalf("%s: empty parts put: %v", name, err)
		}
		if ok, _ := c.Exists(ctx, "empty-"+name); ok {
			t.Fatalf("%s: an empty put stored something", name)
		}
	}
}
