package trace

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestScan(t *testing.T) {
	tr, err := Scan(ScanConfig{WorkingSet: 10 << 10, ObjectSize: 1 << 10, Passes: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Requests) != 30 {
		t.Fatalf("requests = %d, want 30", len(tr.Requests))
	}
	for i, r := range tr.Requests {
		want := tr.Requests[i%10].Key
		if r.Key != want || r.Size != 1<<10 {
			t.Fatalf("request %d = %+v, want key %s size 1024", i, r, want)
		}
	}
	st := tr.Stats()
	if st.UniqueKeys != 10 || st.UniqueBytes != 10<<10 || st.TotalBytes != 30<<10 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestBadConfig(t *testing.T) {
	cases := []struct {
		name  string
		err   error
		field string
	}{
		{"scan-size", func() error { _, e := Scan(ScanConfig{WorkingSet: 1, Passes: 1}); return e }(), "ObjectSize"},
		{"scan-passes", func() error { _, e := Scan(ScanConfig{WorkingSet: 2, ObjectSize: 1}); return e }(), "Passes"},
		{"conv-requests", func() error { _, e := Conversations(ConvConfig{BlockSize: 1, Sessions: 1}); return e }(), "Requests"},
		{"conv-zipf", func() error {
			_, e := Conversations(ConvConfig{Requests: 1, BlockSize: 1, Sessions: 1, ZipfS: 0.5})
			return e
		}(), "ZipfS"},
		{"mixed-frac", func() error {
			_, e := Mixed(ConvConfig{Requests: 1, BlockSize: 1, Sessions: 1, OneHitFraction: 1.5})
			return e
		}(), "OneHitFraction"},
	}
	for _, c := range cases {
		if !errors.Is(c.err, ErrBadConfig) || !strings.Contains(c.err.Error(), c.field) {
			t.Errorf("%s: err = %v, want ErrBadConfig naming %s", c.name, c.err, c.field)
		}
	}
}

func TestConversationsShape(t *testing.T) {
	c := ConvConfig{Seed: 7, Requests: 20000, BlockSize: 4096, Sessions: 50}
	tr, err := Conversations(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Requests) != c.Requests {
		t.Fatalf("len = %d", len(tr.Requests))
	}
	again, _ := Conversations(c)
	if !reflect.DeepEqual(tr, again) {
		t.Fatal("same seed gave a different trace")
	}
	c2 := c
	c2.Seed = 8
	other, _ := Conversations(c2)
	if reflect.DeepEqual(tr.Requests, other.Requests) {
		t.Fatal("different seeds gave the same trace")
	}
	// Every prompt starts with the shared prefix sys/0..3 and then the
	// conversation blocks c<id>/0, c<id>/1, ... in order.
	count := map[string]int{}
	prompts := 0
	for i := 0; i < len(tr.Requests); {
		if tr.Requests[i].Key != "sys/0" {
			t.Fatalf("request %d = %s, want a prompt starting at sys/0", i, tr.Requests[i].Key)
		}
		prompts++
		for j := 0; j < 4 && i < len(tr.Requests); j++ {
			if want := "sys/" + string(rune('0'+j)); tr.Requests[i].Key != want {
				t.Fatalf("request %d = %s, want %s", i, tr.Requests[i].Key, want)
			}
			i++
		}
		j := 0
		for ; i < len(tr.Requests) && !strings.HasPrefix(tr.Requests[i].Key, "sys/"); i++ {
			k := tr.Requests[i].Key
			if !strings.HasSuffix(k, "/"+itoa(j)) {
				t.Fatalf("request %d = %s, want block %d of its conversation", i, k, j)
			}
			count[k]++
			j++
		}
	}
	// Popular conversations are revisited: blocks seen more than once exist,
	// and the first block of a conversation is reused more than its last.
	reused := 0
	for _, n := range count {
		if n > 1 {
			reused++
		}
	}
	if reused == 0 || prompts < 100 {
		t.Fatalf("reused blocks = %d, prompts = %d: no reuse", reused, prompts)
	}
}

func itoa(i int) string {
	var b []byte
	if i == 0 {
		return "0"
	}
	for i > 0 {
		b = append([]byte{byte('0' + i%10)}, b...)
		i /= 10
	}
	return string(b)
}

func TestMixedOneHitWonders(t *testing.T) {
	c := ConvConfig{Seed: 1, Requests: 20000, BlockSize: 4096, Sessions: 50, OneHitFraction: 0.4}
	tr, err := Mixed(c)
	if err != nil {
		t.Fatal(err)
	}
	ohw := map[string]int{}
	for _, r := range tr.Requests {
		if strings.HasPrefix(r.Key, "ohw/") {
			ohw[r.Key]++
		}
	}
	n := 0
	for k, v := range ohw {
		if v != 1 {
			t.Fatalf("one-hit key %s requested %d times", k, v)
		}
		n++
	}
	frac := float64(n) / float64(len(tr.Requests))
	if frac < 0.35 || frac > 0.45 {
		t.Fatalf("one-hit fraction = %.3f, want about 0.4", frac)
	}
}

func TestFileRoundTrip(t *testing.T) {
	tr, _ := Mixed(ConvConfig{Seed: 3, Requests: 500, BlockSize: 65536, Sessions: 10})
	path := filepath.Join(t.TempDir(), "t.trace")
	var buf bytes.Buffer
	if err := Write(&buf, tr); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append([]byte("# comment\n\n"), buf.Bytes()...), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Requests, tr.Requests) {
		t.Fatal("round trip changed the requests")
	}
}

func TestReadErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"a 1\nb\n", "line 2"},
		{"a 1\nb x\n", "line 2"},
		{"a -5\n", "line 1"},
		{"a 1 2\n", "line 1"},
	} {
		_, err := Read(strings.NewReader(c.in))
		if !errors.Is(err, ErrBadLine) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Read(%q) = %v, want ErrBadLine at %s", c.in, err, c.want)
		}
	}
	if _, err := Read(strings.NewReader("# only\n")); !errors.Is(err, ErrEmpty) {
		t.Errorf("empty: %v", err)
	}
	if _, err := ReadFile("/nonexistent/x"); err == nil || !strings.Contains(err.Error(), "/nonexistent/x") {
		t.Errorf("missing file: %v", err)
	}
}

func TestLoopIsScanUnderItsOwnName(t *testing.T) {
	tr, err := Loop(ScanConfig{WorkingSet: 4 << 10, ObjectSize: 1 << 10, Passes: 2})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Name != "loop" || len(tr.Requests) != 8 || tr.Requests[0].Key != "loop/000000" || tr.Requests[4].Key != "loop/000000" {
		t.Fatalf("loop = %s %+v", tr.Name, tr.Requests)
	}
}

func TestZipfBurstsShape(t *testing.T) {
	c := ZipfBurstConfig{Seed: 3, Requests: 5000, Keys: 100, BlockSize: 4096, BurstEvery: 300, BurstLen: 50}
	tr, err := ZipfBursts(c)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := ZipfBursts(c)
	if !reflect.DeepEqual(tr, again) {
		t.Fatal("same config, different trace")
	}
	if tr.Name != "zipf-bursts" || len(tr.Requests) != c.Requests {
		t.Fatalf("name %s, %d requests", tr.Name, len(tr.Requests))
	}
	seen := map[string]int{}
	run, zipfRun := 0, 0
	for i, r := range tr.Requests {
		seen[r.Key]++
		if r.Size != c.BlockSize {
			t.Fatalf("request %d size %d", i, r.Size)
		}
		switch {
		case strings.HasPrefix(r.Key, "b/"):
			if run == 0 && zipfRun != c.BurstEvery {
				t.Fatalf("request %d: burst after %d zipf requests, want %d", i, zipfRun, c.BurstEvery)
			}
			run++
			zipfRun = 0
		case strings.HasPrefix(r.Key, "z/"):
			if run != 0 && run != c.BurstLen {
				t.Fatalf("request %d: burst of %d keys, want %d", i, run, c.BurstLen)
			}
			run = 0
			zipfRun++
		default:
			t.Fatalf("request %d: key %q", i, r.Key)
		}
	}
	hot, once := 0, 0
	for k, n := range seen {
		if strings.HasPrefix(k, "b/") && n != 1 {
			t.Fatalf("burst key %s requested %d times", k, n)
		}
		if strings.HasPrefix(k, "z/") {
			if n > hot {
				hot = n
			}
			once++
		}
	}
	if once > c.Keys || seen["z/0"] != hot {
		t.Fatalf("%d zipf keys (at most %d); z/0 seen %d times, the most %d", once, c.Keys, seen["z/0"], hot)
	}
	for _, bad := range []ZipfBurstConfig{{Requests: 0, Keys: 2, BlockSize: 1, BurstEvery: 1}, {Requests: 1, Keys: 1, BlockSize: 1, BurstEvery: 1},
		{Requests: 1, Keys: 2, BlockSize: 1, BurstEvery: 0}, {Requests: 1, Keys: 2, BlockSize: 1, BurstEvery: 1, ZipfS: -0.5}} {
		if _, err := ZipfBursts(bad); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%+v: err %v", bad, err)
		}
	}
}
