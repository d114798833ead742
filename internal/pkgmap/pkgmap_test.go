package pkgmap

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const (
	module   = "github.com/tierstore/tierstore"
	mapStart = "<!-- package map: checked by internal/pkgmap -->"
	mapEnd   = "<!-- end of package map -->"
)

// readMap parses the package map of design (the table between mapStart and
// mapEnd): package path relative to the module -> layer.
func readMap(design string) (map[string]int, error) {
	f, err := os.Open(design)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	layers := map[string]int{}
	in, ended := false, false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == mapStart:
			in = true
			continue
		case line == mapEnd:
			in, ended = false, true
		}
		if !in || !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| layer") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 4 {
			return nil, fmt.Errorf("%s:%d: a row of the package map is | layer | `package` | role |: %q", design, n, line)
		}
		layer, err := strconv.Atoi(strings.TrimSpace(cells[1]))
		pkg := strings.Trim(strings.TrimSpace(cells[2]), "`")
		if err != nil || pkg == "" {
			return nil, fmt.Errorf("%s:%d: a row of the package map is | layer | `package` | role |: %q", design, n, line)
		}
		if _, dup := layers[pkg]; dup {
			return nil, fmt.Errorf("%s:%d: package %s is in the package map twice", design, n, pkg)
		}
		layers[pkg] = layer
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !ended || len(layers) == 0 {
		return nil, fmt.Errorf("%s: no package map between %q and %q", design, mapStart, mapEnd)
	}
	return layers, nil
}

// imports lists the module's packages with their non-test imports inside
// the module, paths relative to the module.
func imports(t *testing.T, root string) map[string][]string {
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	rel := func(p string) string {
		if p == module {
			return "."
		}
		return strings.TrimPrefix(p, module+"/")
	}
	g := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		var deps []string
		for _, d := range f[1:] {
			if d == module || strings.HasPrefix(d, module+"/") {
				deps = append(deps, rel(d))
			}
		}
		g[rel(f[0])] = deps
	}
	return g
}

// check returns what is wrong with layers as a map of the import graph g.
func check(layers map[string]int, g map[string][]string) []string {
	var errs []string
	for pkg, deps := range g {
		l, ok := layers[pkg]
		if !ok {
			top := -1
			for _, d := range deps {
				top = max(top, layers[d])
			}
			errs = append(errs, fmt.Sprintf("package %s is not in docs/design.md's package map: add a row | %d | `%s` | role | (one layer above the highest it imports)", pkg, top+1, pkg))
			continue
		}
		for _, d := range deps {
			if ld, ok := layers[d]; ok && ld >= l {
				errs = append(errs, fmt.Sprintf("%s (layer %d) imports %s (layer %d): an import must go to a lower layer; fix the import or the map", pkg, l, d, ld))
			}
		}
	}
	for pkg := range layers {
		if _, ok := g[pkg]; !ok {
			errs = append(errs, fmt.Sprintf("docs/design.md's package map names %s, which go list does not find", pkg))
		}
	}
	sort.Strings(errs)
	return errs
}

// TestDesignPackageMap: docs/design.md's package map names every package
// and every import points down its layers.
func TestDesignPackageMap(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	layers, err := readMap(filepath.Join(root, "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	g := imports(t, root)
	if len(g) < 10 {
		t.Fatalf("go list found %d packages; listing broken?", len(g))
	}
	for _, e := range check(layers, g) {
		t.Error(e)
	}
}

// TestCheckFindsDrift: check reports a package missing from the map, a
// package of the map that does not exist, and an arrow reversed.
func TestCheckFindsDrift(t *testing.T) {
	g := map[string][]string{"tier": {"bucket"}, "bucket": nil, "node": {"tier"}}
	layers := map[string]int{"bucket": 0, "tier": 1, "node": 2}
	if errs := check(layers, g); len(errs) != 0 {
		t.Fatalf("a true map: %v", errs)
	}
	added := map[string][]string{"tier": {"bucket"}, "bucket": nil, "node": {"tier"}, "master": {"bucket"}}
	if errs := check(layers, added); len(errs) != 1 || !strings.Contains(errs[0], "master is not in") {
		t.Errorf("a package added: %v", errs)
	}
	reversed := map[string][]string{"tier": {"bucket", "node"}, "bucket": nil, "node": nil}
	if errs := check(layers, reversed); len(errs) != 1 || !strings.Contains(errs[0], "tier (layer 1) imports node (layer 2)") {
		t.Errorf("an arrow reversed: %v", errs)
	}
	gone := map[string][]string{"tier": {"bucket"}, "bucket": nil}
	if errs := check(layers, gone); len(errs) != 1 || !strings.Contains(errs[0], "names node") {
		t.Errorf("a package gone: %v", errs)
	}
}
