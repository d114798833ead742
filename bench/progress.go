package main

import (
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// bar is a progress indicator; a quiet one does nothing.
type bar interface {
	Add(n int)
	Finish()
}

// progressFactory makes bars; it returns quiet bars unless stderr is a
// terminal.
type progressFactory func(desc string, total int64) bar

type quietBar struct{}

func (quietBar) Add(int) {}
func (quietBar) Finish() {}

type realBar struct{ b *progressbar.ProgressBar }

func (r realBar) Add(n int) { _ = r.b.Add(n) }
func (r realBar) Finish()   { _ = r.b.Finish(); _ = r.b.Exit() }

func newProgressFactory(w io.Writer) progressFactory {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return func(string, int64) bar { return quietBar{} }
	}
	return func(desc string, total int64) bar {
		return realBar{progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(f),
			progressbar.OptionSetDescription(desc),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionShowCount(),
			progressbar.OptionClearOnFinish(),
		)}
	}
}
