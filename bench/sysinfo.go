package main

import (
	"bufio"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tierstore/tierstore/bench/internal/fio"
)

// header describes where the figures were measured.
type header struct {
	Host       string   `json:"host"`
	CPU        string   `json:"cpu"`
	CPUs       int      `json:"cpus"`
	MemBytes   int64    `json:"mem_bytes"`
	Kernel     string   `json:"kernel"`
	GoVersion  string   `json:"go_version"`
	Arch       string   `json:"arch"`
	Dir        string   `json:"dir"`
	FSType     string   `json:"fs_type"`
	Device     string   `json:"device"`
	DiskModel  string   `json:"disk_model"`
	Rotational string   `json:"rotational"`
	Fio        string   `json:"fio"`
	LoadAvg    string   `json:"load_avg"` // 1/5/15-minute load when the run started
	Args       []string `json:"args"`
}

func collectHeader(dir string) header {
	h := header{
		CPUs:      runtime.NumCPU(),
		GoVersion: runtime.Version(),
		Arch:      runtime.GOOS + "/" + runtime.GOARCH,
		Dir:       dir,
		Args:      os.Args,
		CPU:       "unknown",
		Device:    "unknown",
		DiskModel: "unknown",
		FSType:    "unknown",
	}
	h.Host, _ = os.Hostname()
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				h.CPU = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		h.MemBytes = int64(si.Totalram) * int64(si.Unit)
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		h.Kernel = "Linux " + unix.ByteSliceToString(u.Release[:])
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			h.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	h.FSType = fsType(dir)
	h.Device = mountDevice(dir)
	h.DiskModel, h.Rotational = diskModel(h.Device)
	if _, v, err := fio.Available(); err == nil {
		h.Fio = v
	} else {
		h.Fio = "not installed"
	}
	return h
}

func fsType(dir string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return "unknown"
	}
	switch uint32(st.Type) {
	case 0xEF53:
		return "ext4"
	case 0x58465342:
		return "xfs"
	case 0x01021994:
		return "tmpfs"
	case 0x9123683E:
		return "btrfs"
	case 0x794c7630:
		return "overlayfs"
	case 0x2fc12fc1:
		return "zfs"
	case 0xF2F52010:
		return "f2fs"
	}
	return "0x" + strconv.FormatUint(uint64(st.Type), 16)
}

// mountDevice is the source of the mount that holds dir, from mountinfo.
func mountDevice(dir string) string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	best, dev := "", "unknown"
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// id parent major:minor root mountpoint opts [optional...] - fstype source superopts
		sep := -1
		for i, x := range fields {
			if x == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+2 >= len(fields) {
			continue
		}
		mp := fields[4]
		if (dir == mp || strings.HasPrefix(dir, strings.TrimSuffix(mp, "/")+"/")) && len(mp) >= len(best) {
			best, dev = mp, fields[sep+2]
		}
	}
	return dev
}

// diskModel reads the model and rotational flag of a block device from sysfs.
func diskModel(dev string) (model, rotational string) {
	model, rotational = "unknown", "unknown"
	if !strings.HasPrefix(dev, "/dev/") {
		return
	}
	name := filepath.Base(dev)
	sys := filepath.Join("/sys/class/block", name)
	if _, err := os.Stat(filepath.Join(sys, "partition")); err == nil {
		// A partition: its disk is the parent directory in sysfs.
		if real, err := filepath.EvalSymlinks(sys); err == nil {
			sys = filepath.Dir(real)
		}
	}
	if b, err := os.ReadFile(filepath.Join(sys, "device", "model")); err == nil && strings.TrimSpace(string(b)) != "" {
		model = strings.TrimSpace(string(b))
	} else if strings.HasPrefix(name, "vd") {
		model = "virtio-blk (virtual disk)"
	} else if b, err := os.ReadFile(filepath.Join(sys, "device", "vendor")); err == nil {
		model = "vendor " + strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile(filepath.Join(sys, "queue", "rotational")); err == nil {
		if strings.TrimSpace(string(b)) == "0" {
			rotational = "no"
		} else {
			rotational = "yes"
		}
	}
	return
}
