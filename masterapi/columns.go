package masterapi

import (
	"fmt"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/keyspec"
)

// ErrBadColumns refuses a SSDColumns chunk whose columns do not agree
// (lengths that do not add up to the key bytes, columns of different
// lengths) or that holds an empty or too long key. The whole chunk is
// refused and nothing of it is recorded. Its code is INVALID_PARAMS;
// errors.Is(err, ErrBadColumns) holds in process and over gRPC (the
// message starts with the sentinel's).
var ErrBadColumns = fmt.Errorf("masterapi: bad SSD object columns: %w", errcode.ErrInvalidParams)

// SSDColumns is a chunk of a node's SSD objects in columns, as
// re-registration sends them (master protocol 4): object i has key
// Keys[o : o+Lens[i]] with o the sum of Lens[:i], size Sizes[i] and CRC32C
// CRCs[i]. One slice per column instead of one struct (and one string) per
// object, so neither side allocates per object. Expected, when > 0, is the
// number of objects the whole re-registration sends (a hint: the master
// sizes its maps once).
type SSDColumns struct {
	Keys     []byte
	Lens     []uint32
	Sizes    []int64
	CRCs     []uint32
	Expected int64
}

// Len is the number of objects of c.
func (c *SSDColumns) Len() int { return len(c.Lens) }

// Append adds an object to c.
func (c *SSDColumns) Append(key []byte, size int64, crc uint32) {
	c.Keys = append(c.Keys, key...)
	c.Lens = append(c.Lens, uint32(len(key)))
	c.Sizes = append(c.Sizes, size)
	c.CRCs = append(c.CRCs, crc)
}

// Reset empties c, keeping its memory.
func (c *SSDColumns) Reset() {
	c.Keys, c.Lens, c.Sizes, c.CRCs = c.Keys[:0], c.Lens[:0], c.Sizes[:0], c.CRCs[:0]
}

// Check reports why c's columns do not describe a chunk of objects
// (ErrBadColumns, naming the first fault), or nil.
func (c *SSDColumns) Check() error {
	n := len(c.Lens)
	if len(c.Sizes) != n || len(c.CRCs) != n {
		return fmt.Errorf("%w: %d key lengths, %d sizes, %d CRCs (one of each per object)", ErrBadColumns, n, len(c.Sizes), len(c.CRCs))
	}
	var sum int
	for i, l := range c.Lens {
		if l == 0 || l > keyspec.MaxLen {
			return fmt.Errorf("%w: key %d is %d bytes, want 1..%d", ErrBadColumns, i, l, keyspec.MaxLen)
		}
		sum += int(l)
		if sum > len(c.Keys) {
			return fmt.Errorf("%w: key lengths add up to more than the %d key bytes (at key %d)", ErrBadColumns, len(c.Keys), i)
		}
	}
	if sum != len(c.Keys) {
		return fmt.Errorf("%w: key lengths add up to %d, the key bytes are %d", ErrBadColumns, sum, len(c.Keys))
	}
	return nil
}

// Key returns object i's key bytes, whose offset in Keys is off, and the
// offset of the next key.
func (c *SSDColumns) Key(i, off int) (key []byte, next int) {
	next = off + int(c.Lens[i])
	return c.Keys[off:next], next
}

// ColumnsOf puts objs into columns.
func ColumnsOf(objs []SSDObject) SSDColumns {
	var c SSDColumns
	for _, d := range objs {
		c.Keys = append(c.Keys, d.Key...)
		c.Lens = append(c.Lens, uint32(len(d.Key)))
		c.Sizes = append(c.Sizes, d.Size)
		c.CRCs = append(c.CRCs, d.CRC)
	}
	return c
}
