package admission

import (
	"testing"

	"github.com/tierstore/tierstore/bucket"
	"github.com/tierstore/tierstore/masterapi"
	"pgregory.net/rapid"
)

// TestSSDCostIsOneObjectBucket: ssdCost is the size of the file the tier
// writes for an object alone in its bucket (bucket.Encode, uncompressed:
// lz4 only makes it smaller), for keys of every length and values of
// every size, packed small ones included.
func TestSSDCostIsOneObjectBucket(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		key := rapid.SliceOfN(rapid.ByteRange('a', 'z'), 1, 4096).Draw(t, "key")
		size := rapid.OneOf(rapid.IntRange(0, 3*bucket.Align), rapid.IntRange(0, 1<<20)).Draw(t, "size")
		enc, err := bucket.Encode([]bucket.Object{{Key: key, Value: make([]byte, size)}}, bucket.EncodeOptions{ID: 1})
		if err != nil {
			t.Fatal(err)
		}
		if got := ssdCost(Object{Key: string(key), Size: int64(size)}); got != enc.Size {
			t.Fatalf("ssdCost of a %d-byte key and %d bytes = %d, the bucket file is %d", len(key), size, got, enc.Size)
		}
	})
}

// TestTinyLFURoomPaysBucketOverhead: room for an object's bytes at the
// full buckets' average overhead is not room for it: written at the end
// of an offload round it may be a bucket of its own, header and trailer
// block included, and the tier would evict a bucket for it. Found in
// node.TestSSDReportReachesMaster under -race (1 run in 20): priced at the
// victims' expansion (1.03 here) the edge candidate was admitted "with
// room" and the tier went 1,639 bytes over its high watermark.
func TestTinyLFURoomPaysBucketOverhead(t *testing.T) {
	const perBucket = 32
	fullBucket := masterapi.SSDVictim{
		FileBytes: bucket.Size(perBucket, perBucket*8, perBucket*obj),
		Span:      perBucket * obj,
		Worth:     9 * perBucket * obj, // density 9: a candidate of frequency 0 loses
	}
	r := masterapi.SSDReport{High: 100 * fullBucket.FileBytes, Low: 90 * fullBucket.FileBytes}
	r.Victims = []masterapi.SSDVictim{fullBucket, fullBucket}
	for _, tc := range []struct {
		room int64
		want string
	}{
		{obj + obj/20, "lost"}, // the data and its share of full buckets' overhead, not a bucket
		{objFile - 1, "lost"},  // one byte short of a bucket of its own
		{objFile, "room"},      // a bucket of its own
		{objFile + obj, "room"},
	} {
		p := fixedPolicy(1)
		r.Used = r.High - tc.room
		p.ReportSSD("n1", r, 0)
		if ok, why := decideOnce(t, p, "edge"); why != tc.want || ok != (tc.want == "room") {
			t.Fatalf("%d bytes below the high watermark: admitted=%v (%s), want %s", tc.room, ok, why, tc.want)
		}
	}
}

// TestTinyLFUPendingPaysBucketOverhead: objects admitted since the report
// count at their bucket-of-their-own cost, and so do outstanding tasks at
// the report (at the average cost of admitted objects): room for two
// objects' files and a third object's data is consumed by two admissions,
// or by one admission and one outstanding task.
func TestTinyLFUPendingPaysBucketOverhead(t *testing.T) {
	r := full(9, 9)
	r.Used = r.High - 2*objFile - obj
	p := fixedPolicy(1)
	p.ReportSSD("n1", r, 0)
	for i, want := range []string{"room", "room", "lost"} {
		if _, why := decideOnce(t, p, string(rune('a'+i))); why != want {
			t.Fatalf("admission %d into room for two: %s, want %s", i, why, want)
		}
	}
	p.ReportSSD("n1", r, 1) // one of them outstanding
	for i, want := range []string{"room", "lost"} {
		if _, why := decideOnce(t, p, string(rune('d'+i))); why != want {
			t.Fatalf("admission %d beside one outstanding task: %s, want %s", i, why, want)
		}
	}
}
