package main

import (
	"fmt"
	"io"
	"os"

	_ "github.com/tierstore/tierstore/ha" // etcd:// master addresses
)

const usage = `usage: tierstore <command> [flags] [args]

commands:
  demo     embedded master+node: put objects, offload to SSD, drop DRAM, read back, verify (PASS/FAIL)
  serve    master and node in one process over gRPC on 127.0.0.1, until SIGTERM
  put      --master ADDR [--replicas N] KEY [FILE]
                                          store FILE (stdin if absent or "-"), in N nodes' DRAM
  get      --master ADDR KEY [FILE]      write the value to FILE (stdout if absent or "-")
  exists   --master ADDR KEY             print true/false; exit 0 if it exists, 1 if not
  rm       --master ADDR [--force] KEY   remove an object
  stats    --master ADDR [--node PEER...] objects and bytes per tier (and per node)
  evict    --master ADDR --tier dram [KEY...|--all]
                                          drop DRAM replicas of objects that also have an SSD replica
Run "tierstore <command> -h" for the flags of a command.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run executes one command and returns the process exit status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "demo":
		return runDemo(rest, stdout, stderr)
	case "serve":
		return runServe(rest, stdout, stderr)
	case "put", "get", "exists", "rm", "stats", "evict":
		return runOp(cmd, rest, stdin, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "tierstore: unknown command %q (run \"tierstore --help\" for the commands)\n", cmd)
	return 2
}
