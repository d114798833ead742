package main

import (
	"io"
	"strings"
	"testing"
)

// TestParseNamesWhatIsWrong: each bad flag is refused with an error that
// names it; good flags parse.
func TestParseNamesWhatIsWrong(t *testing.T) {
	base := []string{"--master=10.231.0.2:50051", "--history=/tmp/h.jsonl"}
	cases := []struct {
		args []string
		want string // "" parses
	}{
		{base, ""},
		{append(base, "--mode=final", "--size=32MiB", "--mix=get:1,bput:2"), ""},
		{[]string{"--history=/tmp/h"}, "--master and --history are required"},
		{[]string{"--master=x:1"}, "--master and --history are required"},
		{append(base, "--mode=read"), `--mode "read"`},
		{append(base, "--size=lots"), "--size"},
		{append(base, "--size=0"), "--size"},
		{append(base, "--keys=0"), "--keys"},
		{append(base, "--deadline=0s"), "--deadline"},
		{append(base, "--mix=get"), `"get": want call:weight`},
		{append(base, "--mix=get:-1"), `"get:-1": want call:weight`},
		{append(base, "--mix=fetch:1"), `unknown call "fetch"`},
		{append(base, "--mix=get:0,put:0"), "every weight is 0"},
		{append(base, "extra"), `unexpected argument "extra"`},
	}
	for _, c := range cases {
		_, err := parse(c.args, io.Discard)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v, want no error", c.args, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: %v, want an error containing %q", c.args, err, c.want)
		}
	}
}
