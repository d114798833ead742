package main

import "errors"

// errUsage: the command line is invalid; the message names the flag.
var errUsage = errors.New("tierstore-master: invalid command line")
