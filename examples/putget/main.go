// Command putget is the smallest tierstore client program: it stores a value
// under a key on a running cluster and reads it back. It imports only
// package client, so it links neither pebble, io_uring, the SSD tier nor the
// master's implementation (client/deps_test.go checks that).
//
//	go run ./examples/putget --master 127.0.0.1:50051 layer0/blk42 "some bytes"
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/tierstore/tierstore/client"
)

func main() {
	master := flag.String("master", "127.0.0.1:50051", "master address host:port")
	flag.Parse()
	if flag.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "usage: putget [--master ADDR] KEY VALUE")
		os.Exit(2)
	}
	key, value := flag.Arg(0), []byte(flag.Arg(1))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{MasterAddr: *master})
	if err != nil {
		fail(err)
	}
	defer c.Close()
	if err := c.Put(ctx, key, value); err != nil && !errors.Is(err, client.ErrObjectExists) {
		fail(err)
	}
	got, err := c.Get(ctx, key)
	if err != nil {
		fail(err)
	}
	fmt.Printf("%s: %d bytes, same as put: %v\n", key, len(got), bytes.Equal(got, value))
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "putget: %v (%s)\n", err, client.CodeOf(err))
	os.Exit(1)
}
