package master

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/tierstore/tierstore/internal/crc32c"
	"github.com/tierstore/tierstore/masterapi"
)

// FileRemovalStore keeps the removal log in one file of a single master's
// state directory (--state_dir; format: docs/format/removals.md): a header
// record, then entry and floor records, each length-prefixed and
// CRC32C-checked, appended and fdatasync'd per batch. Load stops at the
// first torn or damaged record (an append that never completed, so never
// acknowledged) and cuts the file there. Trim appends a floor record, and
// rewrites the file (temporary file, fsync, rename, fsync of the
// directory) when at least half of it lies below the floor. The directory
// is locked (flock) while the store is open: a second master on it stops
// at once.
type FileRemovalStore struct {
	dir    string
	unlock func() error

	mu   sync.Mutex // protects the fields below
	f    *os.File   // open for appending
	st   RemovalState
	dead int // entries below the floor still in the file
}

// Removal log file layout.
const (
	removalFile       = "removals.log"
	removalLockFile   = "LOCK"
	removalFormat     = 2 // the format version in the header (docs/design.md, format versions): 2 adds the DRAM eviction kinds
	recHeader         = 'H'
	recEntry          = 'E'
	recFloor          = 'F'
	maxRemovalRecord  = 64 << 20
	removalRecordHead = 8 // u32 length, u32 CRC32C of the payload
)

// OpenFileRemovalStore opens (creating it if needed) the removal log of
// the state directory dir and locks the directory.
func OpenFileRemovalStore(dir string) (*FileRemovalStore, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: --state_dir %s: %w", ErrBadConfig, dir, err)
	}
	unlock, err := lockDir(filepath.Join(dir, removalLockFile))
	if err != nil {
		return nil, fmt.Errorf("%w: --state_dir %s: %w", ErrBadConfig, dir, err)
	}
	s := &FileRemovalStore{dir: dir, unlock: unlock}
	if err := s.read(); err != nil {
		unlock()
		return nil, fmt.Errorf("%w: --state_dir %s: %w", ErrBadConfig, dir, err)
	}
	return s, nil
}

// Close closes the file and unlocks the directory.
func (s *FileRemovalStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	if s.f != nil {
		err = s.f.Close()
		s.f = nil
	}
	return errors.Join(err, s.unlock())
}

// read loads the file into s.st and opens it for appending, cut after its
// last whole record.
func (s *FileRemovalStore) read() error {
	path := filepath.Join(s.dir, removalFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	good, err := s.parse(bufio.NewReader(f))
	if err == nil {
		err = f.Truncate(good)
	}
	if err == nil {
		_, err = f.Seek(good, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("removal log %s: %w", path, err)
	}
	s.f = f
	return nil
}

// parse reads records until the end or the first bad one and returns the
// length of the good prefix. A file whose first record is not a header
// (and is not empty) is an error: it is not a removal log.
func (s *FileRemovalStore) parse(r io.Reader) (int64, error) {
	var good int64
	first := true
	for {
		p, n, err := readRecord(r)
		if err != nil {
			return good, nil // end, or a torn tail: cut here
		}
		switch {
		case first && (len(p) == 0 || p[0] != recHeader):
			return 0, fmt.Errorf("not a removal log (first record of type %q)", p[:min(len(p), 1)])
		case p[0] == recHeader:
			if s.st, err = decodeHeader(p); err != nil {
				return 0, err
			}
		case p[0] == recEntry:
			e, err := decodeRemoval(p)
			if err != nil {
				return good, nil // damaged: cut here
			}
			if e.Seq >= s.st.Floor {
				s.st.Entries = append(s.st.Entries, e)
			} else {
				s.dead++
			}
		case p[0] == recFloor && len(p) == 9:
			s.applyFloor(binary.BigEndian.Uint64(p[1:]))
		default:
			return good, nil
		}
		first = false
		good += n
	}
}

func (s *FileRemovalStore) applyFloor(floor uint64) {
	i := 0
	for i < len(s.st.Entries) && s.st.Entries[i].Seq < floor {
		i++
	}
	s.dead += i
	s.st.Entries = s.st.Entries[i:]
	s.st.Floor = max(s.st.Floor, floor)
}

// Load implements RemovalStore.
func (s *FileRemovalStore) Load(context.Context) (RemovalState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	st.Entries = append([]masterapi.Removal(nil), s.st.Entries...)
	return st, nil
}

// Create implements RemovalStore: it rewrites the file with the header.
func (s *FileRemovalStore) Create(_ context.Context, id string, origin uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st = RemovalState{ID: id, Origin: origin, Floor: origin}
	return s.rewriteLocked()
}

// Append implements RemovalStore.
func (s *FileRemovalStore) Append(_ context.Context, entries []masterapi.Removal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var buf []byte
	for _, e := range entries {
		buf = appendRecord(buf, encodeRemoval(e))
	}
	if err := s.writeLocked(buf); err != nil {
		return err
	}
	s.st.Entries = append(s.st.Entries, entries...)
	return nil
}

// Trim implements RemovalStore.
func (s *FileRemovalStore) Trim(_ context.Context, floor uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := make([]byte, 9)
	rec[0] = recFloor
	binary.BigEndian.PutUint64(rec[1:], floor)
	if err := s.writeLocked(appendRecord(nil, rec)); err != nil {
		return err
	}
	s.applyFloor(floor)
	if s.dead >= len(s.st.Entries) {
		return s.rewriteLocked()
	}
	return nil
}

// writeLocked appends buf to the file and syncs it. On failure the file is
// cut back to its length before, so that a later append follows whole
// records.
func (s *FileRemovalStore) writeLocked(buf []byte) error {
	if s.f == nil {
		return fmt.Errorf("removal log %s: closed", s.dir)
	}
	end, err := s.f.Seek(0, io.SeekCurrent)
	if err != nil {
		return fmt.Errorf("removal log %s: %w", s.dir, err)
	}
	if _, err = s.f.Write(buf); err == nil {
		err = s.f.Sync()
	}
	if err != nil {
		_ = s.f.Truncate(end)
		_, _ = s.f.Seek(end, io.SeekStart)
		return fmt.Errorf("removal log %s: %w", filepath.Join(s.dir, removalFile), err)
	}
	return nil
}

// rewriteLocked writes the header and the retained entries to a new file
// and renames it over the log (crash-safe publishing).
func (s *FileRemovalStore) rewriteLocked() error {
	buf := appendRecord(nil, encodeHeader(s.st))
	for _, e := range s.st.Entries {
		buf = appendRecord(buf, encodeRemoval(e))
	}
	path := filepath.Join(s.dir, removalFile)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("removal log %s: %w", tmp, err)
	}
	if _, err = f.Write(buf); err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(s.dir)
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("removal log %s: rewrite: %w", path, err)
	}
	if s.f != nil {
		s.f.Close()
	}
	s.f, s.dead = f, 0
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// readRecord reads one record and returns its payload and its length on
// disk. Any short read or CRC mismatch is an error.
func readRecord(r io.Reader) ([]byte, int64, error) {
	var h [removalRecordHead]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, 0, err
	}
	n := binary.BigEndian.Uint32(h[:4])
	if n == 0 || n > maxRemovalRecord {
		return nil, 0, fmt.Errorf("record of %d bytes", n)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		return nil, 0, err
	}
	if crc32c.Checksum(p) != binary.BigEndian.Uint32(h[4:]) {
		return nil, 0, errors.New("record checksum mismatch")
	}
	return p, int64(removalRecordHead) + int64(n), nil
}

func appendRecord(buf, p []byte) []byte {
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(p)))
	buf = binary.BigEndian.AppendUint32(buf, crc32c.Checksum(p))
	return append(buf, p...)
}

func appendBytes(buf []byte, b string) []byte {
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(b)))
	return append(buf, b...)
}

func encodeHeader(st RemovalState) []byte {
	p := []byte{recHeader, removalFormat}
	p = appendBytes(p, st.ID)
	p = binary.BigEndian.AppendUint64(p, st.Origin)
	return binary.BigEndian.AppendUint64(p, st.Floor)
}

func decodeHeader(p []byte) (RemovalState, error) {
	d := decoder{p: p[1:]}
	if v := d.byte(); v != removalFormat {
		return RemovalState{}, fmt.Errorf("removal log format %d, this build reads format %d", v, removalFormat)
	}
	st := RemovalState{ID: d.str(), Origin: d.u64(), Floor: d.u64()}
	if d.err != nil || st.ID == "" {
		return RemovalState{}, fmt.Errorf("removal log header: %v", d.err)
	}
	return st, nil
}

// encodeRemoval is the payload of an entry record (also the value of an
// etcd entry, package ha).
func encodeRemoval(e masterapi.Removal) []byte {
	p := []byte{recEntry}
	return AppendRemoval(p, e)
}

func decodeRemoval(p []byte) (masterapi.Removal, error) {
	return DecodeRemoval(p[1:])
}

// AppendRemoval appends the binary form of e to buf (docs/format/
// removals.md): seq, kind, key, spared keys.
func AppendRemoval(buf []byte, e masterapi.Removal) []byte {
	buf = binary.BigEndian.AppendUint64(buf, e.Seq)
	buf = append(buf, byte(e.Kind))
	buf = appendBytes(buf, e.Key)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(e.Spared)))
	for _, k := range e.Spared {
		buf = appendBytes(buf, k)
	}
	return buf
}

// DecodeRemoval is AppendRemoval's inverse; the entry is validated.
func DecodeRemoval(p []byte) (masterapi.Removal, error) {
	d := decoder{p: p}
	e := masterapi.Removal{Seq: d.u64(), Kind: masterapi.RemovalKind(d.byte()), Key: d.str()}
	n := d.u32()
	if d.err == nil && uint64(n) > uint64(len(d.p)) {
		d.err = fmt.Errorf("%d spared keys in %d bytes", n, len(d.p))
	}
	for i := uint32(0); i < n && d.err == nil; i++ {
		e.Spared = append(e.Spared, d.str())
	}
	if d.err == nil && len(d.p) != 0 {
		d.err = fmt.Errorf("%d bytes after the entry", len(d.p))
	}
	if d.err != nil {
		return masterapi.Removal{}, fmt.Errorf("removal entry: %w", d.err)
	}
	return e, e.Validate()
}

// decoder reads big-endian fields; the first short read sets err.
type decoder struct {
	p   []byte
	err error
}

func (d *decoder) take(n int) []byte {
	if d.err != nil || len(d.p) < n {
		if d.err == nil {
			d.err = fmt.Errorf("short record (%d bytes left, %d wanted)", len(d.p), n)
		}
		return make([]byte, n)
	}
	b := d.p[:n]
	d.p = d.p[n:]
	return b
}

func (d *decoder) byte() byte  { return d.take(1)[0] }
func (d *decoder) u32() uint32 { return binary.BigEndian.Uint32(d.take(4)) }
func (d *decoder) u64() uint64 { return binary.BigEndian.Uint64(d.take(8)) }
func (d *decoder) str() string {
	n := d.u32()
	if d.err == nil && uint64(n) > uint64(len(d.p)) {
		d.err = fmt.Errorf("string of %d bytes in %d", n, len(d.p))
		return ""
	}
	return string(d.take(int(n)))
}
