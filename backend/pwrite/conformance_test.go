package pwrite_test

import (
	"log/slog"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/backend/backendtest"
	"github.com/tierstore/tierstore/backend/pwrite"
)

func openFunc(opts pwrite.Options) backendtest.OpenFunc {
	return func(t *testing.T, dir string) backend.Backend {
		if opts.Logger == nil {
			opts.Logger = slog.New(slog.DiscardHandler)
		}
		b, err := pwrite.Open(dir, opts)
		if err != nil {
			t.Fatalf("pwrite.Open(%s): %v", dir, err)
		}
		return b
	}
}

// onRealDisk wraps open so that the suite's directory is on a real disk: when
// t.TempDir() is on tmpfs or ramfs (some CI machines mount /tmp so) it is
// replaced by a symlink to a directory next to this package's sources.
func onRealDisk(open backendtest.OpenFunc) backendtest.OpenFunc {
	return func(t *testing.T, dir string) backend.Backend {
		if fi, err := os.Lstat(dir); err == nil && fi.Mode()&os.ModeSymlink == 0 && !isRealDisk(t, dir) {
			wd, err := os.Getwd()
			if err != nil {
				t.Fatal(err)
			}
			real, err := os.MkdirTemp(wd, ".testdisk-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(real) })
			if !isRealDisk(t, real) {
				t.Skipf("neither %s nor %s is on a real disk", dir, real)
			}
			if err := os.Remove(dir); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(real, dir); err != nil {
				t.Fatal(err)
			}
		}
		return open(t, dir)
	}
}

func isRealDisk(t *testing.T, dir string) bool {
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	return fs.Type != unix.TMPFS_MAGIC && fs.Type != unix.RAMFS_MAGIC
}

func TestConformanceBuffered(t *testing.T) {
	backendtest.Run(t, onRealDisk(openFunc(pwrite.Options{})))
}

func TestConformanceDirect(t *testing.T) {
	backendtest.Run(t, onRealDisk(func(t *testing.T, dir string) backend.Backend {
		b := openFunc(pwrite.Options{Direct: true})(t, dir)
		if b.Name() != "pwrite+direct" {
			t.Fatalf("on a real disk Name() = %q, want O_DIRECT in use", b.Name())
		}
		return b
	}))
}

// TestConformanceDirectOnTmpfs runs the suite with Direct on tmpfs (the
// suite's directory is replaced by a symlink to a directory under /dev/shm).
// Linux >= 6.6 accepts O_DIRECT on tmpfs, older kernels refuse it and the
// backend falls back to buffered I/O; both must conform.
func TestConformanceDirectOnTmpfs(t *testing.T) {
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Skip("no /dev/shm")
	}
	backendtest.Run(t, func(t *testing.T, dir string) backend.Backend {
		if fi, err := os.Lstat(dir); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			shm, err := os.MkdirTemp("/dev/shm", "pwrite-test-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(shm) })
			if err := os.Remove(dir); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(shm, dir); err != nil {
				t.Fatal(err)
			}
		}
		return openFunc(pwrite.Options{Direct: true})(t, dir)
	})
}

// TestConformanceDirectFallbackOnRamfs runs the suite with Direct on ramfs,
// which refuses O_DIRECT (EINVAL): every backend must run in the buffered
// fallback. Needs mount privileges; skipped otherwise.
func TestConformanceDirectFallbackOnRamfs(t *testing.T) {
	probe := t.TempDir()
	if err := unix.Mount("ramfs", probe, "ramfs", 0, ""); err != nil {
		t.Skipf("cannot mount ramfs (needs root / CAP_SYS_ADMIN): %v", err)
	}
	unix.Unmount(probe, unix.MNT_DETACH)
	backendtest.Run(t, func(t *testing.T, dir string) backend.Backend {
		var fs unix.Statfs_t
		if err := unix.Statfs(dir, &fs); err != nil {
			t.Fatal(err)
		}
		if fs.Type != unix.RAMFS_MAGIC {
			mountOn(t, dir, "ramfs", "")
		}
		b := openFunc(pwrite.Options{Direct: true})(t, dir)
		if b.Name() != "pwrite" {
			t.Fatalf("on ramfs Name() = %q, want the buffered fallback %q", b.Name(), "pwrite")
		}
		return b
	})
}

// mountOn mounts a file system of type fstype on dir until the end of the
// test, or skips the test when mounting is not permitted.
func mountOn(t *testing.T, dir, fstype, data string) {
	t.Helper()
	if err := unix.Mount(fstype, dir, fstype, 0, data); err != nil {
		// EPERM/EACCES without CAP_SYS_ADMIN, ENODEV without the file
		// system: either way this machine cannot run the test.
		t.Skipf("cannot mount %s on %s (needs root / CAP_SYS_ADMIN and %s support): %v", fstype, dir, fstype, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
}
