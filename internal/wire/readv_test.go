package wire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tierstore/tierstore/internal/crc32c"
	"pgregory.net/rapid"
)

// tcpPair is a connected pair of loopback TCP connections.
func tcpPair(t testing.TB) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	server = <-accepted
	require.NotNil(t, server)
	return client, server
}

// writeChunked writes b to c in writes of at most chunk bytes, then closes
// c when closeAfter; the result arrives on the returned channel.
func writeChunked(c net.Conn, b []byte, chunk int, closeAfter bool) <-chan error {
	done := make(chan error, 1)
	go func() {
		var err error
		for off := 0; off < len(b) && err == nil; off += chunk {
			_, err = c.Write(b[off:min(off+chunk, len(b))])
		}
		if closeAfter {
			c.Close()
		}
		done <- err
	}()
	return done
}

// TestReadPartsScatter: a payload scattered over parts of any sizes (empty
// ones included), part of it already in the reader's buffer, arriving in
// writes of any size, lands byte for byte in the parts with the CRC32C of
// the whole, through readv and through the buffer alike, and the bytes
// after it stay unread for the next frame.
func TestReadPartsScatter(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		sizes := rapid.SliceOfN(rapid.IntRange(0, 70_000), 1, 80).Draw(rt, "sizes")
		head := rapid.IntRange(0, 40_000).Draw(rt, "head")
		chunk := rapid.IntRange(1, 300_000).Draw(rt, "chunk")
		useReadv := rapid.Bool().Draw(rt, "readv")
		total := 0
		for _, n := range sizes {
			total += n
		}
		rng := rand.New(rand.NewPCG(uint64(total), uint64(head)))
		stream := make([]byte, head+total+100)
		for i := range stream {
			stream[i] = byte(rng.Uint32())
		}
		payload, trailer := stream[head:head+total], stream[head+total:]

		c, s := tcpPair(t)
		defer c.Close()
		defer s.Close()
		wrote := writeChunked(s, stream, chunk, false)
		br := bufio.NewReaderSize(c, 16<<10)
		_, err := io.ReadFull(br, make([]byte, head)) // the frame before: br may now hold some payload
		require.NoError(rt, err)
		parts := make([][]byte, len(sizes))
		for i, n := range sizes {
			parts[i] = make([]byte, n)
		}
		raw := rawConnOf(c)
		require.NotNil(rt, raw)
		if !useReadv {
			raw = nil
		}
		crc, err := readPartsCRC(br, raw, parts)
		require.NoError(rt, err)
		require.Equal(rt, crc32c.Checksum(payload), crc)
		require.True(rt, bytes.Equal(payload, bytes.Join(parts, nil)), "the parts hold other bytes than the payload")
		next := make([]byte, len(trailer))
		_, err = io.ReadFull(br, next)
		require.NoError(rt, err)
		require.Equal(rt, trailer, next, "the bytes after the payload were consumed")
		require.NoError(rt, <-wrote)
	})
}

// TestReadPartsShortPayload: a peer that closes in the middle of a
// scattered payload fails the read with io.ErrUnexpectedEOF and says how
// far it got.
func TestReadPartsShortPayload(t *testing.T) {
	c, s := tcpPair(t)
	defer c.Close()
	wrote := writeChunked(s, bytes.Repeat([]byte{7}, 100_000), 10_000, true)
	parts := [][]byte{make([]byte, 64<<10), make([]byte, 64<<10)}
	_, err := readPartsCRC(bufio.NewReaderSize(c, 16<<10), rawConnOf(c), parts)
	require.Error(t, err)
	require.True(t, errors.Is(err, io.ErrUnexpectedEOF), "got %v", err)
	require.Contains(t, err.Error(), "100000 of 131072 payload bytes")
	require.NoError(t, <-wrote)
}

// TestReadPartsAllocs: a scattered payload of 2 MiB in 64 parts (eight
// readv calls at least) allocates a bounded number of objects for the
// whole payload, not some per readv (a closure and its variables per
// call, unix.Readv's iovecs per call: 30 and more before stop 46).
func TestReadPartsAllocs(t *testing.T) {
	const runs, size = 20, 2 << 20
	c, s := tcpPair(t)
	defer c.Close()
	defer s.Close()
	payload := bytes.Repeat([]byte{0x5a}, size)
	wrote := make(chan error, 1)
	go func() { // writes allocate nothing (a preallocated buffer)
		var err error
		for i := 0; i < runs+1 && err == nil; i++ {
			_, err = s.Write(payload)
		}
		wrote <- err
	}()
	br := bufio.NewReaderSize(c, 16<<10)
	raw := rawConnOf(c)
	buf := make([]byte, size)
	parts := make([][]byte, 64)
	for i := range parts {
		parts[i] = buf[i*size/64 : (i+1)*size/64]
	}
	want := crc32c.Checksum(payload)
	var err error
	allocs := testing.AllocsPerRun(runs, func() {
		var crc uint32
		if crc, err = readPartsCRC(br, raw, parts); err == nil && crc != want {
			err = errors.New("wrong CRC32C")
		}
	})
	require.NoError(t, err)
	require.NoError(t, <-wrote)
	require.LessOrEqual(t, allocs, 8.0, "allocations per 2 MiB payload in 64 parts")
}
