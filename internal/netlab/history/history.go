package history

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"time"
)

// Kind is what an operation did.
type Kind string

// The operations a history holds. OnSSD is not a call: it records that the
// master listed an SSD replica of the key with the CRC32C in Op.CRC at
// Op.Start.
const (
	Put    Kind = "put"
	Get    Kind = "get"
	Remove Kind = "remove"
	Exists Kind = "exists"
	OnSSD  Kind = "ssd"
)

// Op is one operation of one client.
type Op struct {
	Client string `json:"c"` // process and worker, e.g. "c1/2"
	Kind   Kind   `json:"op"`
	Key    string `json:"k"`
	// Start and End are wall-clock Unix nanoseconds (one clock for every
	// process of a run: they share the machine's kernel).
	Start int64 `json:"s"`
	End   int64 `json:"e"`
	// Deadline is the time the call was given, in nanoseconds (0: none).
	Deadline int64 `json:"d,omitempty"`
	// Err is the error's code name (OBJECT_NOT_FOUND, RPC_FAIL, ...), ""
	// for success; Msg its text.
	Err string `json:"err,omitempty"`
	Msg string `json:"msg,omitempty"`
	// Value is the hash (Hash) of the bytes a put wrote or a get read.
	Value string `json:"v,omitempty"`
	// CRC is the CRC32C of a put's value, or the one an OnSSD listing had.
	CRC uint32 `json:"crc,omitempty"`
	// Found is an exists's answer.
	Found bool `json:"f,omitempty"`
	// Final marks the reads of the check after the last heal.
	Final bool `json:"fin,omitempty"`
}

// Duration is End - Start.
func (o Op) Duration() time.Duration { return time.Duration(o.End - o.Start) }

// Hash is the hash recorded for a value: 16 bytes of SHA-256, in hex.
func Hash(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:16])
}

// Recorder appends operations to a file, one JSON line each, written at
// once (a client killed mid-run loses at most the call in progress). Safe
// for concurrent use.
type Recorder struct {
	mu  sync.Mutex // guards f and err, and orders the lines
	f   *os.File
	err error
}

// Create opens path for appending (creating it).
func Create(path string) (*Recorder, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	return &Recorder{f: f}, nil
}

// Record appends op. The first write error is kept and returned by every
// later Record and by Close.
func (r *Recorder) Record(op Op) error {
	b, err := json.Marshal(op)
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		_, r.err = r.f.Write(append(b, '\n'))
	}
	return r.err
}

// Close closes the file.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return errors.Join(r.err, r.f.Close())
}

// Read reads the operations of every file, sorted by start.
func Read(paths ...string) ([]Op, error) {
	var ops []Op
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, fmt.Errorf("history: %w", err)
		}
		got, err := Decode(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("history: %s: %w", p, err)
		}
		ops = append(ops, got...)
	}
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Start < ops[j].Start })
	return ops, nil
}

// Decode reads JSON lines of operations. A last line cut short (the client
// was killed while writing it) is ignored; any other bad line is an error.
func Decode(r io.Reader) ([]Op, error) {
	var ops []Op
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	line := 0
	var pending error
	for sc.Scan() {
		line++
		if pending != nil {
			return nil, pending
		}
		var op Op
		if err := json.Unmarshal(sc.Bytes(), &op); err != nil {
			pending = fmt.Errorf("line %d: %w", line, err)
			continue
		}
		ops = append(ops, op)
	}
	return ops, sc.Err()
}
