package eviction

import "github.com/tierstore/tierstore/bucket"

// Worth is what an SSD bucket still holds, valued with a frequency
// estimate (SSD admission compares a candidate with it; a value-aware
// eviction or reinsertion decision ranks buckets and objects with it).
type Worth struct {
	// FileBytes is the bucket file's size: what evicting it frees.
	FileBytes int64
	// LiveBytes is the bytes of the objects it still holds.
	LiveBytes int64
	// DeadBytes estimates the bytes of objects it no longer holds
	// (removed, or re-offloaded into another bucket): the file size minus
	// that of a bucket holding only the live objects.
	DeadBytes int64
	// Value is the sum over live objects of estimated frequency x size.
	Value float64
}

// Density is the value per byte of object space, dead space included: the
// size-weighted mean frequency of the live objects, scaled down by the
// share of dead space. A candidate object of frequency f has density f, so
// the two compare directly; the bucket format's own overhead (header,
// trailer, alignment) is left out on both sides.
func (w Worth) Density() float64 {
	if span := w.LiveBytes + w.DeadBytes; span > 0 {
		return w.Value / float64(span)
	}
	return 0
}

// Value values a bucket of fileBytes holding keys (value sizes in sizes)
// with freq, an estimate of each key's access frequency.
func Value(fileBytes int64, keys [][]byte, sizes []int64, freq func(key []byte) uint32) Worth {
	w := Worth{FileBytes: fileBytes}
	var keyBytes, aligned int64
	for i, k := range keys {
		w.LiveBytes += sizes[i]
		w.Value += float64(freq(k)) * float64(sizes[i])
		keyBytes += int64(len(k))
		aligned += bucket.AlignUp(sizes[i])
	}
	if len(keys) == 0 {
		w.DeadBytes = fileBytes
		return w
	}
	w.DeadBytes = max(0, fileBytes-bucket.Size(len(keys), keyBytes, aligned))
	return w
}
