package fio

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Job describes one fio job.
type Job struct {
	Name      string
	Dir       string // directory the job's file lives in (must exist)
	FileName  string // file name inside Dir; default Name+".fio"
	RW        string // "write", "read", "randwrite", "randread"
	BlockSize int64
	IODepth   int
	Direct    bool
	IOEngine  string        // default "io_uring"
	Size      int64         // file size / bytes to transfer
	Runtime   time.Duration // if > 0, time-based run of this length
	EndFsync  bool          // fsync the file at the end (counted in the run)
	// FdatasyncEvery issues an fdatasync after this many writes (0: never),
	// to match a store that makes every N blocks durable.
	FdatasyncEvery int
}

// Result is the parsed outcome of one job.
type Result struct {
	Job         Job
	Version     string
	BytesPerSec float64
	IOPS        float64
	IOBytes     int64
	LatP50      time.Duration // completion latency percentiles
	LatP99      time.Duration
	Args        []string // the fio command line, for the report
}

// Available returns fio's path and version, or ErrNotInstalled.
func Available() (path, version string, err error) {
	path, err = exec.LookPath("fio")
	if err != nil {
		return "", "", ErrNotInstalled
	}
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		return path, "", fmt.Errorf("%w: %s --version: %v", ErrFailed, path, err)
	}
	return path, strings.TrimSpace(string(out)), nil
}

// Args returns the fio command-line arguments for j (without "fio").
func (j Job) Args() ([]string, error) {
	switch {
	case j.Name == "" || strings.ContainsAny(j.Name, " /"):
		return nil, fmt.Errorf("%w: Name %q must be non-empty without blanks or slashes", ErrBadJob, j.Name)
	case !filepath.IsAbs(j.Dir):
		return nil, fmt.Errorf("%w: Dir %q must be an absolute path", ErrBadJob, j.Dir)
	case j.RW != "write" && j.RW != "read" && j.RW != "randwrite" && j.RW != "randread":
		return nil, fmt.Errorf("%w: RW %q must be write, read, randwrite or randread", ErrBadJob, j.RW)
	case j.BlockSize <= 0 || j.BlockSize%512 != 0:
		return nil, fmt.Errorf("%w: BlockSize %d must be a positive multiple of 512", ErrBadJob, j.BlockSize)
	case j.IODepth <= 0:
		return nil, fmt.Errorf("%w: IODepth %d must be > 0", ErrBadJob, j.IODepth)
	case j.FdatasyncEvery < 0:
		return nil, fmt.Errorf("%w: FdatasyncEvery %d must be >= 0", ErrBadJob, j.FdatasyncEvery)
	case j.Size < j.BlockSize:
		return nil, fmt.Errorf("%w: Size %d must be >= BlockSize %d", ErrBadJob, j.Size, j.BlockSize)
	}
	engine := j.IOEngine
	if engine == "" {
		engine = "io_uring"
	}
	file := j.FileName
	if file == "" {
		file = j.Name + ".fio"
	}
	direct := "0"
	if j.Direct {
		direct = "1"
	}
	args := []string{
		"--name=" + j.Name,
		"--directory=" + j.Dir,
		"--filename=" + file,
		"--rw=" + j.RW,
		"--bs=" + strconv.FormatInt(j.BlockSize, 10),
		"--iodepth=" + strconv.Itoa(j.IODepth),
		"--direct=" + direct,
		"--ioengine=" + engine,
		"--size=" + strconv.FormatInt(j.Size, 10),
		"--output-format=json",
	}
	if j.Runtime > 0 {
		args = append(args, "--time_based=1", fmt.Sprintf("--runtime=%dms", j.Runtime.Milliseconds()))
	}
	if j.EndFsync {
		args = append(args, "--end_fsync=1")
	}
	if j.FdatasyncEvery > 0 {
		args = append(args, "--fdatasync="+strconv.Itoa(j.FdatasyncEvery))
	}
	return args, nil
}

// Run runs j and parses its result. The job's file is left in place so a
// later job (random reads after a sequential write) can reuse it; Remove it
// with os.Remove(filepath.Join(j.Dir, j.FileName)) when done.
func Run(ctx context.Context, j Job) (Result, error) {
	path, version, err := Available()
	if err != nil {
		return Result{}, err
	}
	args, err := j.Args()
	if err != nil {
		return Result{}, err
	}
	if st, err := os.Stat(j.Dir); err != nil || !st.IsDir() {
		return Result{}, fmt.Errorf("%w: Dir %s is not a directory", ErrBadJob, j.Dir)
	}
	cmd := exec.CommandContext(ctx, path, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return Result{}, fmt.Errorf("%w: %s %s: %v: %s", ErrFailed, path, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	res, err := Parse(stdout.Bytes())
	if err != nil {
		return Result{}, err
	}
	res.Job = j
	res.Version = version
	res.Args = append([]string{"fio"}, args...)
	return res, nil
}

type side struct {
	BWBytes float64 `json:"bw_bytes"`
	IOPS    float64 `json:"iops"`
	IOBytes int64   `json:"io_bytes"`
	Clat    struct {
		Percentile map[string]float64 `json:"percentile"`
	} `json:"clat_ns"`
}

type output struct {
	Version string `json:"fio version"`
	Jobs    []struct {
		Name  string `json:"jobname"`
		Error int    `json:"error"`
		Read  side   `json:"read"`
		Write side   `json:"write"`
	} `json:"jobs"`
}

// Parse reads fio --output-format=json output (text before the first '{',
// such as warnings, is skipped). The side with the larger byte count (read or
// write) is reported.
func Parse(b []byte) (Result, error) {
	i := bytes.IndexByte(b, '{')
	if i < 0 {
		return Result{}, fmt.Errorf("%w: no JSON object in %d bytes", ErrBadOutput, len(b))
	}
	var o output
	if err := json.Unmarshal(b[i:], &o); err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrBadOutput, err)
	}
	if len(o.Jobs) == 0 {
		return Result{}, fmt.Errorf("%w: no jobs", ErrBadOutput)
	}
	jb := o.Jobs[0]
	if jb.Error != 0 {
		return Result{}, fmt.Errorf("%w: job %s reported error %d", ErrFailed, jb.Name, jb.Error)
	}
	s := jb.Read
	if jb.Write.IOBytes > s.IOBytes {
		s = jb.Write
	}
	if s.IOBytes == 0 {
		return Result{}, fmt.Errorf("%w: job %s moved no bytes", ErrBadOutput, jb.Name)
	}
	return Result{
		Version:     o.Version,
		BytesPerSec: s.BWBytes,
		IOPS:        s.IOPS,
		IOBytes:     s.IOBytes,
		LatP50:      time.Duration(s.Clat.Percentile["50.000000"]),
		LatP99:      time.Duration(s.Clat.Percentile["99.000000"]),
	}, nil
}
