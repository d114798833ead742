package main

import (
	"fmt"
	"io"
)

func runServe(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "tierstore serve: not implemented yet")
	return 1
}
