package admission

// SSDReport is what a store node tells the master about its SSD tier, so
// that admission can compare a candidate with what it would displace. The
// node computes it from its tier (fill level and next eviction victims) and
// a frequency estimator (the master's sketch, shipped to it); the master
// keeps the latest report per node (TinyLFU.ReportSSD).
//
// Wire format (to be carried by the offload heartbeat, see the package
// documentation): five int64/double fields per report plus two per victim.
type SSDReport struct {
	// High is the fill level in bytes (bucket files plus writes in
	// progress) that a write may reach without evicting: capacity times
	// the tier's high watermark. 0 means the tier is unlimited.
	High int64
	// Low is the level an eviction round brings the tier down to.
	Low int64
	// Used is the bytes of bucket files plus writes in progress.
	Used int64
	// Victims are the buckets the tier would evict next, first to go first;
	// a node reports at least enough of them to cover High-Low bytes.
	Victims []VictimValue
}

// VictimValue is one SSD bucket as admission sees it (the node computes it
// with eviction.Value).
type VictimValue struct {
	// Bytes is what evicting the bucket frees (its file size).
	Bytes int64
	// Span is the bytes of object space it holds, live and dead (file
	// size without the bucket format's overhead).
	Span int64
	// Value is the sum, over the objects the bucket still holds, of
	// estimated frequency times size in bytes.
	Value float64
}

// Density is the bucket's value per byte of object space, dead space
// included: comparable to a candidate's estimated frequency (a candidate
// of frequency f earns f per byte it occupies). Objects removed or
// re-offloaded elsewhere lower it.
func (v VictimValue) Density() float64 {
	if v.Span <= 0 {
		return 0
	}
	return v.Value / float64(v.Span)
}
