package fio

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseFixture(t *testing.T) {
	b, err := os.ReadFile("testdata/write.json")
	if err != nil {
		t.Fatal(err)
	}
	r, err := Parse(append([]byte("fio: some warning\n"), b...))
	if err != nil {
		t.Fatal(err)
	}
	if r.BytesPerSec != 818400780 || r.IOBytes != 64<<20 || r.IOPS < 780 || r.IOPS > 781 {
		t.Fatalf("parsed %+v", r)
	}
	if r.LatP50 != 13959168 || r.LatP99 != 26869760 {
		t.Fatalf("latencies %v %v", r.LatP50, r.LatP99)
	}
}

func TestParseErrors(t *testing.T) {
	for _, in := range []string{"", "not json", `{"jobs":[]}`, `{"jobs":[{"jobname":"x","read":{},"write":{}}]}`} {
		if _, err := Parse([]byte(in)); !errors.Is(err, ErrBadOutput) {
			t.Errorf("Parse(%q) = %v, want ErrBadOutput", in, err)
		}
	}
	if _, err := Parse([]byte(`{"jobs":[{"jobname":"x","error":5}]}`)); !errors.Is(err, ErrFailed) {
		t.Errorf("job error: %v", err)
	}
}

func TestBadJob(t *testing.T) {
	good := Job{Name: "j", Dir: "/tmp", RW: "write", BlockSize: 4096, IODepth: 1, Size: 4096}
	if _, err := good.Args(); err != nil {
		t.Fatal(err)
	}
	for field, mut := range map[string]func(*Job){
		"Name":      func(j *Job) { j.Name = "a b" },
		"Dir":       func(j *Job) { j.Dir = "rel" },
		"RW":        func(j *Job) { j.RW = "trim" },
		"BlockSize": func(j *Job) { j.BlockSize = 100 },
		"IODepth":   func(j *Job) { j.IODepth = 0 },
		"Size":      func(j *Job) { j.Size = 1 },
		"Fdatasync": func(j *Job) { j.FdatasyncEvery = -1 },
	} {
		j := good
		mut(&j)
		if _, err := j.Args(); !errors.Is(err, ErrBadJob) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: err = %v", field, err)
		}
	}
}

func TestRunReal(t *testing.T) {
	if _, _, err := Available(); err != nil {
		t.Skipf("fio not installed: %v", err)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := Run(ctx, Job{Name: "w", Dir: dir, FileName: "f", RW: "write", BlockSize: 1 << 20, IODepth: 4,
		Direct: true, Size: 8 << 20, EndFsync: true, FdatasyncEvery: 4})
	if err != nil {
		t.Fatal(err)
	}
	if w.IOBytes != 8<<20 || w.BytesPerSec <= 0 || w.Version == "" {
		t.Fatalf("write result %+v", w)
	}
	r, err := Run(ctx, Job{Name: "r", Dir: dir, FileName: "f", RW: "randread", BlockSize: 64 << 10, IODepth: 8,
		Direct: true, Size: 8 << 20, Runtime: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.IOBytes <= 0 || r.IOPS <= 0 || r.LatP99 < r.LatP50 {
		t.Fatalf("read result %+v", r)
	}
}

func TestNotInstalled(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	if _, _, err := Available(); !errors.Is(err, ErrNotInstalled) {
		t.Fatalf("Available: %v", err)
	}
	_, err := Run(context.Background(), Job{Name: "w", Dir: "/tmp", RW: "write", BlockSize: 4096, IODepth: 1, Size: 4096})
	if !errors.Is(err, ErrNotInstalled) {
		t.Fatalf("Run: %v", err)
	}
}
