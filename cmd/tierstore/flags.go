package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// newFlagSet returns the FlagSet of one subcommand. Its output is discarded:
// parseCmd prints the usage (on -h) or a one-line error itself.
func newFlagSet(cmd string) *flag.FlagSet {
	fs := flag.NewFlagSet("tierstore "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseCmd parses args with fs. On -h/--help it prints "usage: tierstore
// CMD SYNOPSIS" and fs's flags with their defaults to stdout and returns
// (0, true); on a parse error one line naming the flag to stderr and
// (2, true); otherwise (0, false) and the caller goes on.
func parseCmd(fs *flag.FlagSet, synopsis string, args []string, stdout, stderr io.Writer) (int, bool) {
	err := fs.Parse(args)
	if err == nil {
		return 0, false
	}
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(stdout, "usage: %s %s\n\nflags:\n", fs.Name(), synopsis)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return 0, true
	}
	// The flag package writes "-name"; the documented form is "--name".
	msg := strings.Replace(err.Error(), "flag -", "flag --", 1)
	msg = strings.Replace(msg, "defined: -", "defined: --", 1)
	fmt.Fprintf(stderr, "%s: %s\n", fs.Name(), msg)
	return 2, true
}
