package masterapi

// DRAMObject is one complete object in a node's DRAM segment, as the node
// recorded it from the write that stored it (the write's header carries the
// key, the put's pins, the size and the CRC32C) and re-checked (its bytes'
// CRC32C) before re-registering it at a master that does not know it: a
// new leader after a failover, or a restarted master (docs/ha.md, rebuild).
type DRAMObject struct {
	Key      string
	Offset   int64
	Length   int64  // == the object's size
	CRC      uint32 // CRC32C of the bytes
	PutToken uint64 // the put that wrote the range
	SoftPin  bool
	HardPin  bool
}
