package admission

import (
	"bufio"
	"container/list"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/testkit"
	"github.com/tierstore/tierstore/masterapi"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/*.txt from the policies' current decisions")

// goldenDRAM is how many objects the replay's DRAM holds.
const goldenDRAM = 8

// Every policy replays the recorded access trace testdata/golden/trace.txt
// through a small two-tier model of the master (a DRAM of goldenDRAM
// objects in LRU order, or cold-put order for a ColdPutter; an SSD that
// keeps what is offloaded) and its admission decisions, and the cold puts,
// are compared with testdata/golden/<policy>.txt: a policy change that
// alters any decision shows up as a diff (check it, then accept it with
// go test ./admission -run Golden -update).
func TestGoldenTraces(t *testing.T) {
	policies := []struct {
		file string
		new  func(now func() time.Time) Policy
	}{
		{"eager", func(func() time.Time) Policy { return Eager{} }},
		{"on-evict", func(func() time.Time) Policy { return OnEvict{} }},
		{"read-threshold-2", func(func() time.Time) Policy { return ReadThreshold{N: 2} }},
		{"tinylfu", func(now func() time.Time) Policy {
			cfg := DefaultTinyLFUConfig()
			cfg.Now = now
			return NewTinyLFU(cfg)
		}},
		{"tinylfu-at-put", func(now func() time.Time) Policy {
			cfg := DefaultTinyLFUConfig()
			cfg.Now, cfg.AtPut = now, true
			return NewTinyLFU(cfg)
		}},
	}
	for _, pc := range policies {
		t.Run(pc.file, func(t *testing.T) {
			got := replayAdmission(t, pc.new, "testdata/golden/trace.txt")
			testkit.Golden(t, filepath.Join("testdata/golden", pc.file+".txt"), got, *update)
		})
	}
}

// replayAdmission runs the trace through a policy and returns its
// decisions, one line per decision.
func replayAdmission(t *testing.T, newPolicy func(now func() time.Time) Policy, path string) string {
	t.Helper()
	clock := time.Unix(1_800_000_000, 0)
	p := newPolicy(func() time.Time { return clock })
	objs := map[string]*Object{}
	dram := list.New() // front: evicted first
	elems := map[string]*list.Element{}
	var out strings.Builder
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		clock = clock.Add(10 * time.Millisecond)
		w := strings.Fields(sc.Text())
		if len(w) == 0 || strings.HasPrefix(w[0], "#") {
			continue
		}
		num := func(s string) int64 {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				t.Fatalf("%s:%d: %v", path, line, err)
			}
			return n
		}
		log := func(format string, a ...any) { fmt.Fprintf(&out, "%d: "+format+"\n", append([]any{line}, a...)...) }
		// offload completes at once: the object is on SSD.
		offload := func(o *Object) { o.OnSSD, o.Queued = true, false }
		switch w[0] {
		case "ssd":
			r := masterapi.SSDReport{High: num(w[1]), Low: num(w[2]), Used: num(w[3])}
			for _, v := range w[4:] {
				x := strings.Split(v, ":")
				if len(x) != 3 {
					t.Fatalf("%s:%d: victim %q is not FILEBYTES:SPAN:VALUE", path, line, v)
				}
				r.Victims = append(r.Victims, masterapi.SSDVictim{FileBytes: num(x[0]), Span: num(x[1]), Worth: float64(num(x[2]))})
			}
			if s, ok := p.(ssdReportTaker); ok {
				s.ReportSSD("n1", r, 0)
			}
		case "get":
			if len(w) != 3 {
				t.Fatalf("%s:%d: want get KEY SIZE", path, line)
			}
			key, size := w[1], num(w[2])
			o := objs[key]
			outcome := Miss
			switch {
			case o != nil && o.InDRAM:
				outcome = DRAMHit
				dram.MoveToBack(elems[key])
			case o != nil && o.OnSSD:
				outcome = SSDHit
			}
			if tl, ok := p.(*TinyLFU); ok {
				tl.ObserveLookup(key, outcome, size)
			}
			if o != nil && p.WantsLookups() && p.OnLookup(o) {
				log("lookup %s: queue", key)
				offload(o)
			}
			if outcome != Miss {
				continue
			}
			// The miss is followed by the put (into DRAM), after room is made.
			for dram.Len() >= goldenDRAM {
				v := dram.Remove(dram.Front()).(string)
				delete(elems, v)
				vo := objs[v]
				if p.OnEvict(*vo) { // asked while the object is still in DRAM
					log("evict %s: offload", v)
					offload(vo)
				} else if !vo.OnSSD {
					log("evict %s: drop", v)
				}
				vo.InDRAM, vo.Node = false, ""
				if !vo.OnSSD {
					delete(objs, v)
				}
			}
			o = &Object{Key: key, Size: size, InDRAM: true, Node: "n1"}
			objs[key] = o
			put := p.AtPutEnd(*o)
			cold := false
			if cp, ok := p.(ColdPutter); ok {
				cold = cp.ColdPut(*o)
			}
			if cold {
				elems[key] = dram.PushFront(key)
			} else {
				elems[key] = dram.PushBack(key)
			}
			if put || cold {
				log("put %s: queue=%v cold=%v", key, put, cold)
			}
			if put {
				offload(o)
			}
		default:
			t.Fatalf("%s:%d: unknown op %q", path, line, w[0])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

type ssdReportTaker interface {
	ReportSSD(node string, r masterapi.SSDReport, outstanding int)
}
