package history

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"
)

// Options tune Check.
type Options struct {
	// Slack is how far past its deadline a call may return before it
	// counts (scheduling on a loaded machine). Default 1 s.
	Slack time.Duration
	// Heal is when the last fault was healed (Unix ns); 0: no recovery
	// figure.
	Heal int64
	// RecoveryBound: a run that is not served again this long after Heal
	// has a recovery violation. Default 30 s.
	RecoveryBound time.Duration
}

// Violation kinds.
const (
	Wrong = "wrong bytes"
	Stale = "stale read"
	// Resurrected is a stale read whose bytes were removed (by an
	// acknowledged remove) before the read began: the object came back.
	// Counted in Report.Stale too.
	Resurrected  = "resurrected"
	Lost         = "lost"
	PastDeadline = "past deadline"
	NotRecovered = "not recovered"
)

// Violation is one broken promise and the history of its key.
type Violation struct {
	Kind string
	Op   Op
	Why  string
	// Related are the operations Why names (the put whose bytes a stale
	// read returned, the write that superseded it).
	Related []Op
	History []Op // every operation of the key, by start
}

// Report is what Check found.
type Report struct {
	Ops                              int // client calls (OnSSD records excluded)
	Acknowledged                     int // puts that succeeded
	OnSSD                            int // acknowledged puts seen on SSD
	Lost, Stale, Wrong, PastDeadline int
	Resurrected                      int // of Stale: bytes read back after a remove
	// Recovery is how long after Options.Heal the last call that was not
	// served ended (0: every call that ended after the heal was served);
	// Recovered whether every client's last call begun after the heal was
	// served.
	Recovery  time.Duration
	Recovered bool
	// Violations, in the order found (by operation start).
	Violations []Violation
	t0         int64
	healed     bool // Options.Heal was given
}

// Count is the number of violations of kind.
func (r *Report) Count(kind string) int {
	n := 0
	for _, v := range r.Violations {
		if v.Kind == kind {
			n++
		}
	}
	return n
}

// OK reports whether nothing was lost, stale, wrong or late, and the
// cluster recovered within the bound.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

// String is the counts on one line.
func (r *Report) String() string {
	rec := "-"
	switch {
	case !r.healed:
	case r.Recovered:
		rec = r.Recovery.Round(10 * time.Millisecond).String()
	default:
		rec = "never"
	}
	return fmt.Sprintf("ops %d, acknowledged %d (on SSD %d), lost %d, stale %d, wrong %d, past deadline %d, recovered after %s",
		r.Ops, r.Acknowledged, r.OnSSD, r.Lost, r.Stale, r.Wrong, r.PastDeadline, rec)
}

// WriteViolations prints the first max violations, each with the
// operations it names and the 30 operations of its key that began before
// it ended (times in ms from the run's first call).
func (r *Report) WriteViolations(w io.Writer, max int) {
	for i, v := range r.Violations {
		if i == max {
			fmt.Fprintf(w, "... and %d more\n", len(r.Violations)-max)
			return
		}
		fmt.Fprintf(w, "%s: %s: %s\n", v.Kind, r.format(v.Op), v.Why)
		for _, o := range v.Related {
			fmt.Fprintf(w, "   named: %s\n", r.format(o))
		}
		h := v.History
		for len(h) > 0 && h[len(h)-1].Start > v.Op.End {
			h = h[:len(h)-1]
		}
		if len(h) > 30 {
			fmt.Fprintf(w, "    (%d earlier operations of the key)\n", len(h)-30)
			h = h[len(h)-30:]
		}
		for _, o := range h {
			mark := "  "
			if o == v.Op {
				mark = "=>"
			}
			fmt.Fprintf(w, "  %s %s\n", mark, r.format(o))
		}
	}
}

func (r *Report) format(o Op) string {
	ms := func(t int64) string { return fmt.Sprintf("%.0f", float64(t-r.t0)/1e6) }
	res := "ok"
	switch {
	case o.Err != "":
		res = o.Err
		if o.Msg != "" {
			msg := o.Msg
			if len(msg) > 120 {
				msg = msg[:120] + "..."
			}
			res += " (" + msg + ")"
		}
	case o.Kind == Exists:
		res = fmt.Sprintf("ok %v", o.Found)
	}
	v := ""
	if o.Value != "" {
		v = " v=" + o.Value[:8]
	}
	if o.Kind == OnSSD {
		return fmt.Sprintf("[%s] %s ssd %q crc=%08x", ms(o.Start), o.Client, o.Key, o.CRC)
	}
	fin := ""
	if o.Final {
		fin = " final"
	}
	return fmt.Sprintf("[%s..%s] %s %s%s %q%s -> %s", ms(o.Start), ms(o.End), o.Client, o.Kind, fin, o.Key, v, res)
}

// notApplied reports whether a failed write's error says it changed
// nothing.
func notApplied(o Op) bool {
	switch o.Kind {
	case Put:
		switch o.Err {
		case "OBJECT_ALREADY_EXISTS", "INVALID_KEY", "INVALID_PARAMS", "NO_AVAILABLE_HANDLE", "KEYS_ULTRA_LIMIT":
			return true
		}
	case Remove:
		switch o.Err {
		case "OBJECT_NOT_FOUND", "OBJECT_HAS_LEASE", "INVALID_KEY", "INVALID_PARAMS":
			return true
		}
	}
	return false
}

// acked reports whether write o is known to have taken effect by o.End.
func acked(o Op) bool { return o.Err == "" }

// Served reports whether the cluster answered the call: a success or an
// answer about the key (not found, exists, gone, a checksum mismatch of
// every replica), as opposed to a transport failure, a timeout, "not the
// leader" or an internal error.
func Served(o Op) bool {
	switch o.Err {
	case "RPC_FAIL", "TRANSFER_FAIL", "CONTEXT_CANCELED", "UNAVAILABLE_IN_CURRENT_STATUS", "SHUTTING_DOWN", "INTERNAL_ERROR":
		return false
	}
	return true
}

// write is a put or remove that may have taken effect in [start, effEnd].
type write struct {
	op     Op
	effEnd int64 // op.End if acknowledged, else +inf
}

// keyHistory is one key's operations.
type keyHistory struct {
	ops    []Op
	writes []write
	puts   map[string]int // value hash -> index in writes
}

func (k *keyHistory) add(o Op) {
	k.ops = append(k.ops, o)
	if (o.Kind != Put && o.Kind != Remove) || (o.Err != "" && notApplied(o)) {
		return
	}
	w := write{op: o, effEnd: math.MaxInt64}
	if acked(o) {
		w.effEnd = o.End
	}
	if o.Kind == Put {
		k.puts[o.Value] = len(k.writes)
	}
	k.writes = append(k.writes, w)
}

// superseded reports whether write i was followed, before t, by another
// acknowledged write that began after i was acknowledged; it returns the
// latest such write (the key's current write when the read began: a
// remove makes the read a resurrection, a put a stale value).
func (k *keyHistory) superseded(i int, t int64) (Op, bool) {
	var by Op
	found := false
	for j, w := range k.writes {
		if j != i && acked(w.op) && w.op.Start > k.writes[i].effEnd && w.op.End < t && (!found || w.op.Start > by.Start) {
			by, found = w.op, true
		}
	}
	return by, found
}

// Check verifies ops (Read's result: every client's operations of a run).
func Check(ops []Op, opt Options) *Report {
	if opt.Slack <= 0 {
		opt.Slack = time.Second
	}
	if opt.RecoveryBound <= 0 {
		opt.RecoveryBound = 30 * time.Second
	}
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Start < ops[j].Start })
	r := &Report{Recovered: true}
	if len(ops) > 0 {
		r.t0 = ops[0].Start
	}
	keys := map[string]*keyHistory{}
	var order []string
	for _, o := range ops {
		k := keys[o.Key]
		if k == nil {
			k = &keyHistory{puts: map[string]int{}}
			keys[o.Key] = k
			order = append(order, o.Key)
		}
		k.add(o)
	}
	for _, o := range ops {
		if o.Kind == OnSSD {
			continue
		}
		r.Ops++
		if o.Kind == Put && o.Err == "" {
			r.Acknowledged++
		}
		if o.Deadline > 0 && o.Duration() > time.Duration(o.Deadline)+opt.Slack {
			r.add(PastDeadline, o, fmt.Sprintf("took %v for a deadline of %v", o.Duration().Round(time.Millisecond), time.Duration(o.Deadline)), keys[o.Key].ops)
		}
		if o.Err == "" {
			r.checkRead(o, keys[o.Key])
		}
	}
	for _, key := range order {
		r.checkLost(keys[key])
	}
	r.checkRecovery(ops, opt)
	sort.SliceStable(r.Violations, func(i, j int) bool { return r.Violations[i].Op.Start < r.Violations[j].Op.Start })
	return r
}

func (r *Report) add(kind string, o Op, why string, hist []Op, related ...Op) {
	switch kind {
	case Wrong:
		r.Wrong++
	case Stale:
		r.Stale++
	case Resurrected:
		r.Stale++
		r.Resurrected++
	case Lost:
		r.Lost++
	case PastDeadline:
		r.PastDeadline++
	}
	r.Violations = append(r.Violations, Violation{Kind: kind, Op: o, Why: why, Related: related, History: hist})
}

// checkRead checks a successful get (its bytes) or exists (true).
func (r *Report) checkRead(o Op, k *keyHistory) {
	switch {
	case o.Kind == Get:
		i, ok := k.puts[o.Value]
		if !ok {
			r.add(Wrong, o, "bytes that no put of this key wrote (or wrote before failing at PutStart)", k.ops)
			return
		}
		p := k.writes[i].op
		if p.Start > o.End {
			r.add(Wrong, o, "bytes of a put that began after the get ended", k.ops)
			return
		}
		if w, ok := k.superseded(i, o.Start); ok {
			kind := Stale
			if w.Kind == Remove {
				kind = Resurrected
			}
			r.add(kind, o, fmt.Sprintf("bytes of the put by %s, superseded by the %s by %s acknowledged before the get began", p.Client, w.Kind, w.Client), k.ops, p, w)
		}
	case o.Kind == Exists && o.Found:
		for i, w := range k.writes {
			if w.op.Kind != Put || w.op.Start > o.End {
				continue
			}
			if _, ok := k.superseded(i, o.Start); !ok {
				return // a put that may still be current
			}
		}
		r.add(Resurrected, o, "true, but every put of the key was removed before the call began", k.ops)
	}
}

// checkLost checks the last final read of k.
func (r *Report) checkLost(k *keyHistory) {
	var last *Op
	for i := range k.ops {
		if o := &k.ops[i]; o.Final && (o.Kind == Get) && (last == nil || o.End > last.End) {
			last = o
		}
	}
	for i, w := range k.writes {
		if w.op.Kind == Put && w.op.Err == "" && k.seenOnSSD(w.op) {
			r.OnSSD++
			if last != nil && last.Err != "" && k.latest(i) {
				r.add(Lost, *last, fmt.Sprintf("the put by %s was acknowledged and listed on SSD, and nothing could have removed or replaced it", w.op.Client), k.ops, w.op)
			}
		}
	}
}

// seenOnSSD reports whether the master listed an SSD replica of put p.
func (k *keyHistory) seenOnSSD(p Op) bool {
	for _, o := range k.ops {
		if o.Kind == OnSSD && o.CRC == p.CRC && o.Start >= p.Start {
			return true
		}
	}
	return false
}

// latest reports whether every other write of the key was over before
// write i began (so i is the key's current value).
func (k *keyHistory) latest(i int) bool {
	for j, w := range k.writes {
		if j != i && w.effEnd >= k.writes[i].op.Start {
			return false
		}
	}
	return true
}

// checkRecovery measures the time from opt.Heal until calls are served
// again.
func (r *Report) checkRecovery(ops []Op, opt Options) {
	if opt.Heal == 0 {
		return
	}
	r.healed = true
	lastBad := int64(0)
	lastOf := map[string]Op{}
	for _, o := range ops {
		if o.Kind == OnSSD || o.End < opt.Heal {
			continue
		}
		if !Served(o) && o.End > lastBad {
			lastBad = o.End // a call in flight at the heal that failed after it counts too
		}
		if o.Start >= opt.Heal {
			lastOf[o.Client] = o
		}
	}
	if lastBad > 0 {
		r.Recovery = time.Duration(lastBad - opt.Heal)
	}
	var stuck []string
	for c, o := range lastOf {
		if !Served(o) {
			stuck = append(stuck, c)
		}
	}
	sort.Strings(stuck)
	switch {
	case len(stuck) > 0:
		r.Recovered = false
		r.Violations = append(r.Violations, Violation{Kind: NotRecovered, Op: lastOf[stuck[0]],
			Why: "the last call of " + strings.Join(stuck, ", ") + " after the heal was not served"})
	case r.Recovery > opt.RecoveryBound:
		r.Violations = append(r.Violations, Violation{Kind: NotRecovered,
			Why: fmt.Sprintf("calls were failing %v after the heal (bound %v)", r.Recovery.Round(time.Millisecond), opt.RecoveryBound)})
	}
}
