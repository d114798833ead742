// Command netlab-check checks history files written by netlab-client (the
// histories a scenario run keeps in TIERSTORE_PARTITIONS_DIR) and prints
// the counts and the first violations with their keys' histories:
//
//	go run ./internal/netlab/cmd/netlab-check [--heal UNIX_NS] [--max 10] FILE...
//
// It exits 1 when the history has a violation, 2 for a usage error.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/tierstore/tierstore/internal/netlab/history"
)

func main() {
	heal := flag.Int64("heal", 0, "Unix ns of the last heal (0: no recovery figure)")
	max := flag.Int("max", 10, "violations to print")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "netlab-check: no history file given")
		os.Exit(2)
	}
	ops, err := history.Read(flag.Args()...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "netlab-check:", err)
		os.Exit(2)
	}
	r := history.Check(ops, history.Options{Heal: *heal})
	fmt.Println(r)
	r.WriteViolations(os.Stdout, *max)
	if !r.OK() {
		os.Exit(1)
	}
}
