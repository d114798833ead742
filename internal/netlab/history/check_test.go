package history

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const ms = int64(time.Millisecond)

func put(c, k, v string, s, e int64, err string) Op {
	return Op{Client: c, Kind: Put, Key: k, Start: s * ms, End: e * ms, Value: Hash([]byte(v)), CRC: crcOf(v), Err: err}
}

func get(c, k, v string, s, e int64, err string) Op {
	o := Op{Client: c, Kind: Get, Key: k, Start: s * ms, End: e * ms, Err: err}
	if v != "" {
		o.Value = Hash([]byte(v))
	}
	return o
}

func rm(c, k string, s, e int64, err string) Op {
	return Op{Client: c, Kind: Remove, Key: k, Start: s * ms, End: e * ms, Err: err}
}

func ssd(k, v string, at int64) Op {
	return Op{Client: "probe", Kind: OnSSD, Key: k, Start: at * ms, End: at * ms, CRC: crcOf(v)}
}

func final(o Op) Op { o.Final = true; return o }

// crcOf stands in for the CRC32C of a value: any function of it will do.
func crcOf(v string) uint32 {
	var h uint32 = 2166136261
	for i := 0; i < len(v); i++ {
		h = (h ^ uint32(v[i])) * 16777619
	}
	return h
}

func TestCheck(t *testing.T) {
	cases := []struct {
		name string
		ops  []Op
		want map[string]int // violation kind -> count
	}{
		{"clean", []Op{put("a", "k", "v1", 0, 10, ""), get("b", "k", "v1", 20, 30, "")}, nil},
		{"concurrent put may be read", []Op{put("a", "k", "v1", 0, 50, ""), get("b", "k", "v1", 10, 20, "")}, nil},
		{"unknown bytes", []Op{put("a", "k", "v1", 0, 10, ""), get("b", "k", "zz", 20, 30, "")}, map[string]int{Wrong: 1}},
		{"bytes of another key", []Op{put("a", "k2", "v1", 0, 10, ""), get("b", "k", "v1", 20, 30, "")}, map[string]int{Wrong: 1}},
		{"bytes of a put refused at PutStart", []Op{put("a", "k", "v1", 0, 10, "OBJECT_ALREADY_EXISTS"), get("b", "k", "v1", 20, 30, "")}, map[string]int{Wrong: 1}},
		{"bytes from the future", []Op{get("b", "k", "v1", 0, 10, ""), put("a", "k", "v1", 20, 30, "")}, map[string]int{Wrong: 1}},
		{"read after remove", []Op{put("a", "k", "v1", 0, 10, ""), rm("a", "k", 20, 30, ""), get("b", "k", "v1", 40, 50, "")}, map[string]int{Resurrected: 1}},
		{"read after replace", []Op{put("a", "k", "v1", 0, 10, ""), rm("a", "k", 20, 30, ""), put("a", "k", "v2", 31, 35, ""), get("b", "k", "v1", 40, 50, "")}, map[string]int{Stale: 1}},
		{"read after replace and remove", []Op{put("a", "k", "v1", 0, 10, ""), rm("a", "k", 20, 30, ""), put("a", "k", "v2", 31, 35, ""), rm("a", "k", 36, 37, ""), get("b", "k", "v1", 40, 50, "")}, map[string]int{Resurrected: 1}},
		{"read of a put overwritten without remove", []Op{put("a", "k", "v1", 0, 10, ""), put("a", "k", "v2", 31, 35, ""), get("b", "k", "v1", 40, 50, "")}, map[string]int{Stale: 1}},
		{"remove answered not found removed nothing", []Op{put("a", "k", "v1", 0, 10, ""), rm("a", "k", 20, 30, "OBJECT_NOT_FOUND"), get("b", "k", "v1", 40, 50, "")}, nil},
		{"remove overlapping the get", []Op{put("a", "k", "v1", 0, 10, ""), rm("a", "k", 20, 45, ""), get("b", "k", "v1", 40, 50, "")}, nil},
		{"remove overlapping the put", []Op{put("a", "k", "v1", 0, 25, ""), rm("a", "k", 20, 30, ""), get("b", "k", "v1", 40, 50, "")}, nil},
		{"put that timed out may land late", []Op{put("a", "k", "v1", 0, 10, "RPC_FAIL"), rm("a", "k", 20, 30, ""), get("b", "k", "v1", 40, 50, "")}, nil},
		{"remove refused for a lease changes nothing", []Op{put("a", "k", "v1", 0, 10, ""), rm("a", "k", 20, 30, "OBJECT_HAS_LEASE"), get("b", "k", "v1", 40, 50, "")}, nil},
		{"exists after remove", []Op{put("a", "k", "v1", 0, 10, ""), rm("a", "k", 20, 30, ""), {Client: "b", Kind: Exists, Key: "k", Start: 40 * ms, End: 50 * ms, Found: true}}, map[string]int{Resurrected: 1}},
		{"exists after replace", []Op{put("a", "k", "v1", 0, 10, ""), rm("a", "k", 20, 30, ""), put("a", "k", "v2", 31, 35, ""), {Client: "b", Kind: Exists, Key: "k", Start: 40 * ms, End: 50 * ms, Found: true}}, nil},
		{"lost", []Op{put("a", "k", "v1", 0, 10, ""), ssd("k", "v1", 15), final(get("f", "k", "", 100, 110, "OBJECT_NOT_FOUND"))}, map[string]int{Lost: 1}},
		{"lost: unreadable", []Op{put("a", "k", "v1", 0, 10, ""), ssd("k", "v1", 15), final(get("f", "k", "", 100, 110, "TRANSFER_FAIL"))}, map[string]int{Lost: 1}},
		{"not on SSD: DRAM loss allowed", []Op{put("a", "k", "v1", 0, 10, ""), final(get("f", "k", "", 100, 110, "OBJECT_NOT_FOUND"))}, nil},
		{"SSD copy of another value", []Op{put("a", "k", "v1", 0, 10, ""), ssd("k", "v0", 15), final(get("f", "k", "", 100, 110, "OBJECT_NOT_FOUND"))}, nil},
		{"removed after SSD", []Op{put("a", "k", "v1", 0, 10, ""), ssd("k", "v1", 15), rm("a", "k", 20, 30, "RPC_FAIL"), final(get("f", "k", "", 100, 110, "OBJECT_NOT_FOUND"))}, nil},
		{"found at the end", []Op{put("a", "k", "v1", 0, 10, ""), ssd("k", "v1", 15), final(get("f", "k", "", 90, 95, "RPC_FAIL")), final(get("f", "k", "v1", 100, 110, ""))}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Check(c.ops, Options{})
			got := map[string]int{}
			for _, v := range r.Violations {
				got[v.Kind]++
			}
			if len(got) != len(c.want) {
				t.Fatalf("violations %v, want %v\n%s", got, c.want, dump(r))
			}
			for k, n := range c.want {
				if got[k] != n {
					t.Fatalf("violations %v, want %v\n%s", got, c.want, dump(r))
				}
			}
		})
	}
}

func dump(r *Report) string {
	var b bytes.Buffer
	b.WriteString(r.String() + "\n")
	r.WriteViolations(&b, 10)
	return b.String()
}

func TestCheckDeadline(t *testing.T) {
	ops := []Op{
		{Client: "a", Kind: Get, Key: "k", Start: 0, End: 2500 * ms, Deadline: 1000 * ms, Err: "CONTEXT_CANCELED"},
		{Client: "a", Kind: Get, Key: "k", Start: 0, End: 1900 * ms, Deadline: 1000 * ms, Err: "CONTEXT_CANCELED"},
	}
	r := Check(ops, Options{Slack: time.Second})
	if r.PastDeadline != 1 {
		t.Fatalf("past deadline %d, want 1 (2.5 s for 1 s + 1 s slack)\n%s", r.PastDeadline, dump(r))
	}
}

func TestCheckRecovery(t *testing.T) {
	ops := []Op{
		get("a", "k", "", 90, 99, "RPC_FAIL"),  // before the heal: not counted
		get("c", "k", "", 90, 110, "RPC_FAIL"), // in flight at the heal: counted (10 ms)
		get("c", "k", "", 110, 115, "OBJECT_NOT_FOUND"),
		get("a", "k", "", 100, 150, "RPC_FAIL"),
		get("b", "k", "", 120, 170, "CONTEXT_CANCELED"),
		get("a", "k", "", 160, 165, "OBJECT_NOT_FOUND"),
		get("b", "k", "", 175, 180, "OBJECT_NOT_FOUND"),
	}
	r := Check(ops, Options{Heal: 100 * ms})
	if !r.Recovered || r.Recovery != 70*time.Millisecond || !r.OK() {
		t.Fatalf("recovery %v recovered %v, want 70ms true\n%s", r.Recovery, r.Recovered, dump(r))
	}
	r = Check(ops[:6], Options{Heal: 100 * ms})
	if r.Recovered || r.OK() {
		t.Fatalf("client b's last call failed: want not recovered\n%s", dump(r))
	}
	r = Check(ops, Options{Heal: 100 * ms, RecoveryBound: 50 * time.Millisecond})
	if r.OK() {
		t.Fatalf("recovery of 70 ms with a bound of 50 ms: want a violation\n%s", dump(r))
	}
}

func TestRecordRead(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for i, c := range []string{"a", "b"} {
		p := filepath.Join(dir, c+".jsonl")
		paths = append(paths, p)
		rec, err := Create(p)
		if err != nil {
			t.Fatal(err)
		}
		for j := 0; j < 3; j++ {
			if err := rec.Record(put(c, "k", c, int64(10*j+i), int64(10*j+i+1), "")); err != nil {
				t.Fatal(err)
			}
		}
		if err := rec.Close(); err != nil {
			t.Fatal(err)
		}
	}
	ops, err := Read(paths...)
	if err != nil || len(ops) != 6 {
		t.Fatalf("read %d ops, %v", len(ops), err)
	}
	for i := 1; i < len(ops); i++ {
		if ops[i].Start < ops[i-1].Start {
			t.Fatal("Read did not sort by start")
		}
	}
	if got, err := Decode(strings.NewReader(`{"c":"a","op":"get","k":"k","s":1,"e":2}` + "\n" + `{"c":"a","op":"ge`)); err != nil || len(got) != 1 {
		t.Errorf("a last line cut short: %d ops, %v; want 1 and no error", len(got), err)
	}
	if _, err := Decode(strings.NewReader("garbage\n" + `{"c":"a","op":"get","k":"k","s":1,"e":2}` + "\n")); err == nil {
		t.Error("a bad line before the last: want an error")
	}
}
