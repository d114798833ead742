package bucket

import "fmt"

// Default grouping limits (Mooncake's bucket_keys_limit and bucket_size_limit).
const (
	DefaultMaxKeys  = 500
	DefaultMaxBytes = 256 << 20
)

// Limits bound one bucket.
type Limits struct {
	MaxKeys  int   // objects per bucket
	MaxBytes int64 // bucket file size, header, padding and trailer included
}

// DefaultLimits returns the default limits.
func DefaultLimits() Limits { return Limits{MaxKeys: DefaultMaxKeys, MaxBytes: DefaultMaxBytes} }

// Validate reports limits that cannot hold a single object.
func (l Limits) Validate() error {
	if l.MaxKeys < 1 {
		return fmt.Errorf("%w: bucket keys limit %d must be at least 1", ErrBadLimits, l.MaxKeys)
	}
	if minSize := Size(1, 1, 0); l.MaxBytes < minSize {
		return fmt.Errorf("%w: bucket size limit %d must be at least %d bytes", ErrBadLimits, l.MaxBytes, minSize)
	}
	return nil
}

// Item is what grouping needs to know of an object.
type Item struct {
	Key  []byte
	Size int64 // value length
}

// Grouping is the result of Group. Every input index appears exactly once:
// in one bucket, in Folded, or in TooLarge.
type Grouping struct {
	// Buckets lists input indexes per bucket, in input order.
	Buckets [][]int
	// Folded maps the index of a duplicate key to the index of its first
	// occurrence in the same call.
	Folded map[int]int
	// TooLarge lists the indexes of objects that cannot fit in an empty
	// bucket under the limits.
	TooLarge []int
}

// Group splits items, in order, into buckets of at most lim.MaxKeys objects
// and lim.MaxBytes file bytes (uncompressed sizes are used, an upper bound).
// The partial last bucket is emitted too: nothing is carried across calls.
func Group(items []Item, lim Limits) (Grouping, error) {
	if err := lim.Validate(); err != nil {
		return Grouping{}, err
	}
	g := Grouping{Folded: map[int]int{}}
	first := make(map[string]int, len(items))
	var cur []int
	var keyBytes, data int64
	flush := func() {
		if len(cur) > 0 {
			g.Buckets = append(g.Buckets, cur)
		}
		cur, keyBytes, data = nil, 0, 0
	}
	for i, it := range items {
		if j, dup := first[string(it.Key)]; dup {
			g.Folded[i] = j
			continue
		}
		first[string(it.Key)] = i
		if it.Size < 0 || it.Size > MaxValueLen || Size(1, int64(len(it.Key)), AlignUp(it.Size)) > lim.MaxBytes {
			g.TooLarge = append(g.TooLarge, i)
			continue
		}
		k, d := int64(len(it.Key)), AlignUp(it.Size)
		if len(cur) == lim.MaxKeys || Size(len(cur)+1, keyBytes+k, data+d) > lim.MaxBytes {
			flush()
		}
		cur = append(cur, i)
		keyBytes += k
		data += d
	}
	flush()
	return g, nil
}
