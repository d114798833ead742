package client

import (
	"errors"
	"testing"
)

func TestParseSize(t *testing.T) {
	good := []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"1048576", 1 << 20},
		{"4GiB", 4 << 30},
		{"256MiB", 256 << 20},
		{"64KiB", 64 << 10},
		{"1TiB", 1 << 40},
		{"2G", 2 << 30},
		{"2g", 2 << 30},
		{"1GB", 1000 * 1000 * 1000},
		{"10mb", 10 * 1000 * 1000},
		{"512B", 512},
		{" 3 MiB ", 3 << 20},
	}
	for _, c := range good {
		got, err := ParseSize(c.in)
		if err != nil {
			t.Errorf("ParseSize(%q): %v", c.in, err)
			continue
		}
		if got != c.want {
			t.Errorf("ParseSize(%q) = %d, want %d", c.in, got, c.want)
		}
	}
	bad := []string{"", "   ", "-1", "-4GiB", "GiB", "1.5GiB", "4XB", "4 GiBs", "99999999999999999999", "9223372036854775807KiB", "0x10"}
	for _, in := range bad {
		if got, err := ParseSize(in); !errors.Is(err, ErrBadSize) {
			t.Errorf("ParseSize(%q) = %d, %v; want ErrBadSize", in, got, err)
		}
	}
}

func TestFormatSizeRoundTrip(t *testing.T) {
	for _, n := range []int64{0, 1, 100, 1024, 1536 << 10, 4 << 30, 256 << 20, 3<<40 + 1} {
		s := FormatSize(n)
		back, err := ParseSize(s)
		if err != nil || back != n {
			t.Errorf("FormatSize(%d) = %q, parsed back %d, %v", n, s, back, err)
		}
	}
	if s := FormatSize(4 << 30); s != "4GiB" {
		t.Errorf("FormatSize(4GiB) = %q", s)
	}
}
