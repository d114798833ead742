package masterapi

import (
	"fmt"
	"regexp"
	"slices"
)

// The removal log (docs/design.md, "Object lifecycle", invariant 10). Every
// acknowledged removal is an entry of one ordered log the master keeps
// durably; nodes pull it (NodeAPI.PullRemovals), apply each entry to the
// copies they hold, and report how far they got (a RemovalCursor). An
// entry's sequence number is a put token: an entry with Seq s removes the
// copies of the keys it covers whose put token is below s, so a later put
// of the same key is never hit. A DRAM eviction acknowledged to a caller
// (EvictDRAM) is an entry too, of a kind that covers DRAM copies only
// (RemovalKind.DRAMOnly): the object and its SSD copies stay.

// RemovalKind is what a Removal covers.
type RemovalKind uint8

// Removal kinds.
const (
	// RemovalKey covers one key (Remove).
	RemovalKey RemovalKind = iota + 1
	// RemovalEvery covers every key but Spared (RemoveAll).
	RemovalEvery
	// RemovalPattern covers every key the regular expression Key matches
	// anywhere, but Spared (RemoveByRegex).
	RemovalPattern
	// EvictionKey covers the DRAM copies of one key (EvictDRAM of that
	// key): its SSD copies and the object stay.
	EvictionKey
	// EvictionEvery covers the DRAM copies of every key but Spared
	// (EvictDRAM of all objects); SSD copies stay.
	EvictionEvery
)

// DRAMOnly reports whether entries of kind k cover DRAM copies only (a
// DRAM eviction): an SSD copy of a key they cover is not touched.
func (k RemovalKind) DRAMOnly() bool { return k == EvictionKey || k == EvictionEvery }

func (k RemovalKind) String() string {
	switch k {
	case RemovalKey:
		return "key"
	case RemovalEvery:
		return "every"
	case RemovalPattern:
		return "pattern"
	case EvictionKey:
		return "dram-key"
	case EvictionEvery:
		return "dram-every"
	}
	return fmt.Sprintf("removal-kind(%d)", uint8(k))
}

// Removal is one entry of the removal log.
type Removal struct {
	// Seq is the entry's sequence number: a put token, larger than the put
	// token of every copy the entry removes and smaller than that of every
	// later put.
	Seq  uint64
	Kind RemovalKind
	// Key is the key (RemovalKey) or the pattern (RemovalPattern).
	Key string
	// Spared are the keys a RemovalEvery or RemovalPattern entry left in
	// place (a non-forced call skips what Remove would refuse), sorted.
	Spared []string
}

// Validate reports what is wrong with r (a pattern that does not compile,
// an unknown kind, no sequence number), or nil.
func (r Removal) Validate() error {
	switch {
	case r.Seq == 0:
		return fmt.Errorf("masterapi: removal of kind %v without a sequence number", r.Kind)
	case (r.Kind == RemovalKey || r.Kind == EvictionKey) && r.Key == "":
		return fmt.Errorf("masterapi: %v entry %d without a key", r.Kind, r.Seq)
	case r.Kind == RemovalPattern:
		if _, err := regexp.Compile(r.Key); err != nil {
			return fmt.Errorf("masterapi: pattern removal %d: %w", r.Seq, err)
		}
	case r.Kind != RemovalKey && r.Kind != RemovalEvery && !r.Kind.DRAMOnly():
		return fmt.Errorf("masterapi: removal %d of unknown kind %d", r.Seq, r.Kind)
	}
	return nil
}

// RemovalCursor is how far a node has applied a removal log: every entry
// of log Log up to Seq. The zero value is "never pulled".
type RemovalCursor struct {
	Log string
	Seq uint64
}

// DRAMRef names one DRAM record of a node: the range at Offset written
// by the put Token.
type DRAMRef struct {
	Offset int64
	Token  uint64
}

// PullRequest is one NodeAPI.PullRemovals call: the node's cursor for its
// DRAM records and, when it has an SSD tier (HasSSD), for its SSD.
type PullRequest struct {
	Node      string
	DRAM, SSD RemovalCursor
	HasSSD    bool
}

// PullReply answers a pull. The node applies Removals (in order) to each
// tier whose cursor is below an entry, drops every copy of a tier marked
// Drop, forgets the DRAM records of Forget, and then takes {Log, Through}
// as the cursor of each tier it applied. With More, Through is the last
// entry sent and more follow: pull again.
type PullReply struct {
	Log      string
	Through  uint64
	Removals []Removal
	// DropDRAM / DropSSD: the tier's cursor names another log (the master
	// that kept it in memory restarted) or lies below the log's floor
	// (entries the node never applied were trimmed): the node cannot tell
	// its removed copies from the others and must drop every copy of that
	// tier. A tier that never pulled (Log "") is never dropped: its
	// re-registration is checked against every retained entry.
	DropDRAM, DropSSD bool
	// Forget lists DRAM records of dropped DRAM replicas (evicted,
	// reported bad, abandoned) that no entry covers, since the node's
	// previous pull.
	Forget []DRAMRef
	More   bool
}

// Empty reports whether r asks nothing of the node.
func (r PullReply) Empty() bool {
	return len(r.Removals) == 0 && !r.DropDRAM && !r.DropSSD && len(r.Forget) == 0 && !r.More
}

// RemovalSet indexes removal entries for the question both sides ask:
// which is the latest entry covering a key, for its copies on every tier
// (Latest) and for its DRAM copies (LatestDRAM: DRAM evictions too). Not
// safe for concurrent use.
type RemovalSet struct {
	keys  map[string]uint64 // key -> the largest Seq of its RemovalKey entries
	broad []broadRemoval    // RemovalEvery and RemovalPattern entries, by Seq
	// dramKeys and dramBroad are the same for EvictionKey and
	// EvictionEvery entries.
	dramKeys  map[string]uint64
	dramBroad []broadRemoval
}

type broadRemoval struct {
	seq    uint64
	re     *regexp.Regexp // nil: every key
	spared []string       // sorted
}

// NewRemovalSet returns an empty set.
func NewRemovalSet() *RemovalSet {
	return &RemovalSet{keys: map[string]uint64{}, dramKeys: map[string]uint64{}}
}

// Add indexes r (entries are added in Seq order). A pattern that does not
// compile is an error (Validate).
func (s *RemovalSet) Add(r Removal) error {
	switch r.Kind {
	case RemovalKey:
		s.keys[r.Key] = max(s.keys[r.Key], r.Seq)
	case RemovalEvery:
		s.broad = append(s.broad, broadRemoval{seq: r.Seq, spared: r.Spared})
	case RemovalPattern:
		re, err := regexp.Compile(r.Key)
		if err != nil {
			return fmt.Errorf("masterapi: removal %d: pattern %q: %w", r.Seq, r.Key, err)
		}
		s.broad = append(s.broad, broadRemoval{seq: r.Seq, re: re, spared: r.Spared})
	case EvictionKey:
		s.dramKeys[r.Key] = max(s.dramKeys[r.Key], r.Seq)
	case EvictionEvery:
		s.dramBroad = append(s.dramBroad, broadRemoval{seq: r.Seq, spared: r.Spared})
	default:
		return fmt.Errorf("masterapi: removal %d of unknown kind %d", r.Seq, r.Kind)
	}
	return nil
}

// Drop forgets r, which was added before (trimming the oldest entries).
func (s *RemovalSet) Drop(r Removal) {
	keys, broad := s.keys, &s.broad
	if r.Kind.DRAMOnly() {
		keys, broad = s.dramKeys, &s.dramBroad
	}
	if r.Kind == RemovalKey || r.Kind == EvictionKey {
		if keys[r.Key] == r.Seq {
			delete(keys, r.Key)
		}
		return
	}
	if i := slices.IndexFunc(*broad, func(b broadRemoval) bool { return b.seq == r.Seq }); i >= 0 {
		*broad = slices.Delete(*broad, i, i+1)
	}
}

// Latest returns the largest Seq among the entries covering key, 0 if
// none. A copy of key with put token t is removed when Latest(key) > t; a
// copy that carries no token (an SSD copy) is removed when Latest(key)
// lies above the cursor its node had when the copy was written.
func (s *RemovalSet) Latest(key string) uint64 { return latestIn(s.keys, s.broad, key) }

// LatestDRAM is Latest for a DRAM copy: the largest Seq among the
// entries covering key, DRAM evictions included. A DRAM copy of key with
// put token t is removed or evicted when LatestDRAM(key) > t.
func (s *RemovalSet) LatestDRAM(key string) uint64 {
	return max(s.Latest(key), latestIn(s.dramKeys, s.dramBroad, key))
}

func latestIn(keys map[string]uint64, broad []broadRemoval, key string) uint64 {
	seq := keys[key]
	for i := len(broad) - 1; i >= 0 && broad[i].seq > seq; i-- {
		if broad[i].covers(key) {
			return broad[i].seq
		}
	}
	return seq
}

// Len is the number of entries indexed (a key's entries count once).
func (s *RemovalSet) Len() int {
	return len(s.keys) + len(s.broad) + len(s.dramKeys) + len(s.dramBroad)
}

func (b broadRemoval) covers(key string) bool {
	if b.re != nil && !b.re.MatchString(key) {
		return false
	}
	_, spared := slices.BinarySearch(b.spared, key)
	return !spared
}

// Matcher returns the function that reports whether r covers a key
// (removes its copies older than r.Seq). An error for a pattern that does
// not compile or an unknown kind (Validate).
func (r Removal) Matcher() (func(key string) bool, error) {
	switch r.Kind {
	case RemovalKey, EvictionKey:
		return func(k string) bool { return k == r.Key }, nil
	case RemovalEvery, EvictionEvery:
		return broadRemoval{spared: r.Spared}.covers, nil
	case RemovalPattern:
		re, err := regexp.Compile(r.Key)
		if err != nil {
			return nil, fmt.Errorf("masterapi: removal %d: pattern %q: %w", r.Seq, r.Key, err)
		}
		return broadRemoval{re: re, spared: r.Spared}.covers, nil
	}
	return nil, fmt.Errorf("masterapi: removal %d of unknown kind %d", r.Seq, r.Kind)
}
