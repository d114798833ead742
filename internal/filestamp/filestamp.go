package filestamp

import (
	"os"
	"syscall"
	"time"
)

// Stamp is what a file's stat says about its content (doc.go).
type Stamp struct {
	ino   uint64
	size  int64
	mtime time.Time
}

// Of stats path.
func Of(path string) (Stamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Stamp{}, err
	}
	s := Stamp{size: fi.Size(), mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.ino = st.Ino
	}
	return s, nil
}
