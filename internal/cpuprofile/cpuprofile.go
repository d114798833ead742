package cpuprofile

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// Start begins profiling into path (created or truncated) and returns the
// function that stops and closes it. An empty path profiles nothing.
func Start(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("cpuprofile: %s: %w", path, err)
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}
