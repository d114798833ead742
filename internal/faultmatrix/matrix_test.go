package faultmatrix

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/index"
	"github.com/tierstore/tierstore/tier"
)

var update = flag.Bool("update", false, "rewrite docs/faults.md from this run")

const docPath = "../../docs/faults.md"

// row is one fault of the matrix.
type row struct {
	id    string
	layer string // "index (pebble)" or "bucket backend"
	fault string // what is injected, and when
	opts  tier.Options
	// note explains the row's restart column.
	note string
	// knownBug, when set, names a reported bug this row shows: its
	// invariant violations are written to the table instead of failing
	// the test, and the test fails once they are gone (update the row).
	knownBug string
	// run arms the fault, drives the faulted call, clears the fault and
	// says what happened. It leaves v.e open, or nil when Open failed.
	run func(v *env) faulted
}

// faulted is what run observed.
type faulted struct {
	call    string   // the faulted call
	outcome string   // its result
	offered [][]byte // keys offered to Offload during the fault
	// announced, when set, replaces the count of announced offered keys
	// (for a row where that count depends on timing).
	announced string
	// lost are announced keys the fault itself destroyed (their bucket
	// file deleted under the engine): after the restart they must be
	// missing (tier.ErrNotFound), never wrong.
	lost map[string]bool
}

// result is one line of docs/faults.md.
type result struct {
	row
	call, outcome, announced, after, restart string
	violations                               []string
}

// base is the data every row starts with: two buckets of announced
// objects.
func (v *env) base() {
	v.t.Helper()
	for _, p := range []string{"base-a", "base-b"} {
		for _, o := range v.offload(v.tasks(p, 3, 0, 6000)) {
			if o.Status != tier.Persisted {
				v.t.Fatalf("base offload of %q: %v %v", o.Key, o.Status, o.Err)
			}
		}
	}
}

func runRow(t *testing.T, r row) result {
	v := newEnv(t, r.opts)
	v.base()
	v.knownBug = r.knownBug != ""
	f := r.run(v)
	res := result{row: r, call: f.call, outcome: f.outcome}

	res.announced = "none"
	if len(f.offered) > 0 {
		n := 0
		v.mu.Lock()
		for _, k := range f.offered {
			if _, ok := v.announced[string(k)]; ok {
				n++
			}
		}
		v.mu.Unlock()
		if f.announced != "" {
			res.announced = f.announced
		} else if n > 0 {
			res.announced = fmt.Sprintf("%d/%d, each checked durable and indexed when announced", n, len(f.offered))
		}
	} else {
		res.announced = "no offload during the fault"
	}
	if v.e != nil {
		res.after = v.afterFault(f.lost)
	} else {
		res.after = "(Open failed; see the next column)"
	}
	res.restart = v.afterRestart(f.lost)
	res.violations = v.violations
	switch {
	case r.knownBug != "" && len(v.violations) == 0:
		t.Errorf("row %s no longer shows the known bug (%s): update the row and docs/faults.md", r.id, r.knownBug)
	case r.knownBug != "":
		t.Logf("row %s shows the known bug %q: %s", r.id, r.knownBug, strings.Join(v.violations, "; "))
	}
	return res
}

// afterFault probes the engine once the fault is cleared, before any
// restart: it either keeps working, or fails closed with errors naming the
// storage failure.
func (v *env) afterFault(lost map[string]bool) string {
	v.t.Helper()
	keys, _ := v.snapshot()
	keys = slices.DeleteFunc(keys, func(k []byte) bool { return lost[string(k)] })
	_, errs := v.loadCheck(keys)
	out := v.offload(v.tasks("probe", 2, 0, 3000))
	var offErrs []error
	for _, o := range out {
		if o.Status == tier.Failed {
			offErrs = append(offErrs, o.Err)
		}
	}
	if len(errs) == 0 && len(offErrs) == 0 {
		return "keeps working: Load serves every announced object, a new Offload persists"
	}
	// Failing closed: every failure must say it is the storage failure.
	closed := true
	for _, err := range append(errs, offErrs...) {
		if !errors.Is(err, index.ErrFailed) {
			closed = false
			v.errorf("after the fault cleared: %v is neither success nor the storage failure", err)
		}
	}
	_, exErr := v.e.Exists(keys[0])
	s := fmt.Sprintf("Load %d/%d fail (%s), Offload %s", len(errs), len(keys), v.sameErrors("load", errs, ""), statusCounts(out))
	if len(offErrs) > 0 {
		s += fmt.Sprintf(" (%s)", v.sameErrors("offload", offErrs, ""))
	}
	s += fmt.Sprintf(", Exists answers %s", describe(exErr))
	if closed {
		s = "fails closed until Close + Open: " + s
	}
	return s
}

// afterRestart closes and reopens the engine with every fault cleared and
// checks that every announced object is intact.
func (v *env) afterRestart(lost map[string]bool) string {
	v.t.Helper()
	if err := v.restart(); err != nil {
		v.t.Fatalf("Open after the fault cleared: %v", err)
	}
	st := v.e.Stats()
	keys, _ := v.snapshot()
	var intact, missing int
	for i, r := range v.e.Load(bg, keys) {
		k := string(keys[i])
		v.mu.Lock()
		want := v.offered[k]
		v.mu.Unlock()
		switch {
		case r.Err == nil && !bytes.Equal(r.Value, want):
			v.t.Errorf("after restart Load(%.20q) returned wrong bytes", k)
		case r.Err == nil:
			intact++
		case lost[k] && errors.Is(r.Err, tier.ErrNotFound):
			missing++
		default:
			v.errorf("after restart, announced object %.20q is lost: %v", k, r.Err)
		}
	}
	unannounced := 0
	if err := v.e.Keys(func(k []byte, _ tier.KeyInfo) bool {
		v.mu.Lock()
		_, ok := v.announced[string(k)]
		v.mu.Unlock()
		if !ok {
			unannounced++
		}
		return true
	}); err != nil {
		v.t.Fatalf("Keys after restart: %v", err)
	}
	for _, o := range v.offload(v.tasks("reopened", 2, 0, 3000)) {
		if o.Status != tier.Persisted {
			v.t.Errorf("offload after restart: %v %v", o.Status, o.Err)
		}
	}
	s := "every announced object intact"
	if intact < len(keys) {
		s = fmt.Sprintf("%d/%d announced objects intact", intact, len(keys))
	}
	if len(lost) > 0 {
		s += fmt.Sprintf(", %d lost with their file answer tier.ErrNotFound", missing)
	}
	s += fmt.Sprintf("; Open repaired %d orphan files, %d index entries", st.OrphanFilesRemoved, st.EntriesDropped)
	if unannounced > 0 {
		s += fmt.Sprintf("; %d never-announced keys on SSD (re-registered by the node)", unannounced)
	}
	return s
}

// bucketFiles lists the bucket files on disk.
func (v *env) bucketFiles() map[uint64]bool {
	v.t.Helper()
	des, err := os.ReadDir(filepath.Join(v.dir, "buckets"))
	if err != nil {
		v.t.Fatal(err)
	}
	ids := map[uint64]bool{}
	for _, de := range des {
		if id, ok := backend.ParseFileName(de.Name()); ok {
			ids[id] = true
		}
	}
	return ids
}

// strayFiles counts bucket files that hold no announced object.
func (v *env) strayFiles() int {
	v.t.Helper()
	files := v.bucketFiles()
	v.mu.Lock()
	for _, id := range v.bucketOf {
		delete(files, id)
	}
	v.mu.Unlock()
	return len(files)
}

func TestFaultMatrix(t *testing.T) {
	var results []result
	for _, r := range rows {
		t.Run(r.id, func(t *testing.T) {
			results = append(results, runRow(t, r))
		})
	}
	if t.Failed() {
		return
	}
	if len(results) != len(rows) {
		t.Logf("%d of %d rows ran: docs/faults.md is neither checked nor updated", len(results), len(rows))
		return
	}
	doc := render(results)
	if *update {
		if err := os.WriteFile(docPath, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	old, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/faultmatrix -run TestFaultMatrix -update)", err)
	}
	if string(old) != doc {
		t.Errorf("docs/faults.md is stale: the engine now behaves differently. Check the diff below, then run\n"+
			"  go test ./internal/faultmatrix -run TestFaultMatrix -update\n%s", lineDiff(string(old), doc))
	}
}

// lineDiff lists the lines of want that differ from got.
func lineDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	var b strings.Builder
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			fmt.Fprintf(&b, "line %d\n  doc: %s\n  run: %s\n", i+1, gl, wl)
		}
	}
	return b.String()
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

func render(rs []result) string {
	var b strings.Builder
	b.WriteString(docHeader)
	b.WriteString("| # | layer | fault | faulted call: outcome | announced during the fault | after the fault clears | after Close + Open |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		outcome := r.call + ": " + r.outcome
		if r.knownBug != "" {
			outcome = "**known bug:** " + r.knownBug + ". " + outcome
		}
		restart := r.restart
		if r.note != "" {
			restart += " (" + r.note + ")"
		}
		if len(r.violations) > 0 {
			restart += fmt.Sprintf(" (**%d invariant violations**, see the bug)", len(r.violations))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n",
			r.id, r.layer, cell(r.fault), cell(outcome), cell(r.announced), cell(r.after), cell(restart))
	}
	b.WriteString(docFooter)
	return b.String()
}

const docHeader = `# Storage faults and what the tier engine does

<!-- Generated by go test ./internal/faultmatrix -run TestFaultMatrix -update; do not edit. -->

Each row injects one storage fault under a real ` + "`tier.Engine`" + ` (real pebble
index and real pwrite bucket files in a temporary directory) and drives it
through its exported API: Open, Offload, Load, Close, Open again. Index faults
are injected with pebble's ` + "`vfs/errorfs`" + ` (through ` + "`tier.Options.IndexFS`" + `),
bucket faults with ` + "`backend/faulty`" + ` around the pwrite backend (through
` + "`tier.Options.Backend`" + `). Every injected error is EIO unless the row says
otherwise. Before the fault each row offloads two buckets of three 6000-byte
objects (announced); rows that need pebble to flush offload larger sets.

Checked in every row (the test fails otherwise): an offload that could not
make its bucket durable and indexed answers Failed with an error naming the
cause; the notify callback sees only keys that are indexed, readable with the
offered bytes and whose bucket file is on disk (docs/design.md invariant 1);
no Load returns other bytes than the ones offloaded (invariant 5); after the
fault clears the engine keeps working or fails closed (every call answers
` + "`index.ErrFailed`" + `); after Close + Open every announced object is intact, except
the ones whose bucket file the fault deleted, which answer ` + "`tier.ErrNotFound`" + `
(invariant 6).

"errors.Is" lists the sentinels the returned errors match. "Retryable" is
` + "`tier.Outcome.Retryable`" + `; ` + "`tier/api.go`" + ` documents only that it says whether
the same task may succeed later: this table is the record of which failures
are retryable.

`

const docFooter = `
Not injected, on purpose: pebble MANIFEST write or sync failures, and any
other failure pebble reports through its logger's Fatalf from a background
goroutine (after a flush or a compaction), which ends the process (see the caveat in index/doc.go); a crash is covered by the crash
tests (tier/recovery_test.go, internal/crashloop) instead.

A row marked **known bug** records a reported engine bug as it behaves;
the matrix fails when such a row stops showing its bug, so that the row and
this table are updated with the fix. Rows B6 (EIO at Open deleted data) and
B8 (a vanished bucket file stayed listed) were found this way and fixed;
` + "`internal/faultmatrix/bugs_test.go`" + ` and ` + "`tier/vanish_test.go`" + ` guard the fixes.

Reproduce or refresh: ` + "`go test ./internal/faultmatrix -run TestFaultMatrix -v`" + `
(` + "`-update`" + ` rewrites this file).
`
