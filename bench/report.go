package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"text/tabwriter"
	"time"
)

// report is everything one run measured; it is what --json writes.
type report struct {
	Header  header    `json:"header"`
	Results []*result `json:"results"`
	Skipped []skipped `json:"skipped,omitempty"`
}

type skipped struct {
	Scenario string `json:"scenario"`
	Reason   string `json:"reason"`
}

// result is one scenario's output.
type result struct {
	Scenario string            `json:"scenario"`
	Quick    bool              `json:"quick"`
	Options  map[string]string `json:"options"`
	Tables   []*table          `json:"tables"`
	Notes    []string          `json:"notes,omitempty"`
	Started  time.Time         `json:"started"`
	Elapsed  float64           `json:"elapsed_seconds"`
	// Charts draws this result's charts into dir (nil: none).
	charts func(dir string) ([]string, error)
}

// table is a titled grid. Cells are strings or numbers (float64, int64,
// int); numbers stay numbers in JSON. A nil cell is "n/a" ("-" printed).
type table struct {
	Title   string   `json:"title"`
	Columns []string `json:"columns"`
	Rows    [][]any  `json:"rows"`
}

func (t *table) add(cells ...any) {
	if len(cells) != len(t.Columns) {
		panic(fmt.Sprintf("bench: table %q: row of %d cells for %d columns", t.Title, len(cells), len(t.Columns)))
	}
	for i, c := range cells {
		if f, ok := c.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
			cells[i] = nil
		}
	}
	t.Rows = append(t.Rows, cells)
}

// formatCell prints numbers with three significant digits, no exponent.
func formatCell(c any) string {
	switch v := c.(type) {
	case nil:
		return "-"
	case string:
		return v
	case int:
		return fmt.Sprint(v)
	case int64:
		return fmt.Sprint(v)
	case float64:
		a := math.Abs(v)
		switch {
		case v == 0:
			return "0"
		case a >= 100:
			return fmt.Sprintf("%.0f", v)
		case a >= 10:
			return fmt.Sprintf("%.1f", v)
		case a >= 1:
			return fmt.Sprintf("%.2f", v)
		default:
			return fmt.Sprintf("%.3f", v)
		}
	}
	return fmt.Sprint(c)
}

func printHeader(w io.Writer, h header, res *result) {
	fmt.Fprintf(w, "== %s  (started %s)\n", res.Scenario, res.Started.UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "machine: %s, %d CPUs, %s RAM, %s, load %s at start\n", h.CPU, h.CPUs, fmtBytes(h.MemBytes), h.Kernel, h.LoadAvg)
	fmt.Fprintf(w, "disk:    %s (%s on %s, model %s, rotational %s)\n", h.Dir, h.FSType, h.Device, h.DiskModel, h.Rotational)
	fmt.Fprintf(w, "go:      %s %s; fio: %s\n", h.GoVersion, h.Arch, h.Fio)
	if len(res.Options) > 0 {
		keys := sortedKeys(res.Options)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + "=" + res.Options[k]
		}
		fmt.Fprintf(w, "options: %s\n", strings.Join(parts, " "))
	}
}

func printResult(w io.Writer, h header, res *result) {
	printHeader(w, h, res)
	for _, t := range res.Tables {
		fmt.Fprintf(w, "\n%s\n", t.Title)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, strings.Join(t.Columns, "\t")+"\t")
		for _, r := range t.Rows {
			cells := make([]string, len(r))
			for i, c := range r {
				cells[i] = formatCell(c)
			}
			fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
		}
		tw.Flush()
	}
	for _, n := range res.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	fmt.Fprintf(w, "(%s took %.1fs)\n\n", res.Scenario, res.Elapsed)
}

func writeJSON(path string, rep *report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("bench: json: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("bench: --json: %w", err)
	}
	return nil
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// sizeName is the short name of an object size: 64K, 256K, 1M.
func sizeName(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dM", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dK", n>>10)
	}
	return fmt.Sprint(n)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}

// ratio is a/b, or nil when b is 0 (printed "-").
func ratio(a, b float64) any {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return nil
	}
	return a / b
}

const mb = 1e6 // figures are in MB/s (10^6), as fio prints

func mbps(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(bytes) / d.Seconds() / mb
}
