package units

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
		got, err := Parse(c.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.in, err)
			continue
		}
		if got != c.want {
			t.Errorf("Parse(%q) = %d, want %d", c.in, got, c.want)
		}
	}
	bad := []string{"", "   ", "-1", "-4GiB", "GiB", "1.5GiB", "4XB", "4 GiBs", "99999999999999999999", "9223372036854775807KiB", "0x10"}
	for _, in := range bad {
		if got, err := Parse(in); !errors.Is(err, ErrBadSize) {
			t.Errorf("Parse(%q) = %d, %v; want ErrBadSize", in, got, err)
		}
	}
}

func TestFormatSizeRoundTrip(t *testing.T) {
	for _, n := range []int64{0, 1, 100, 1024, 1536 << 10, 4 << 30, 256 << 20, 3<<40 + 1} {
		s := Format(n)
		back, err := Parse(s)
		if err != nil || back != n {
			t.Errorf("Format(%d) = %q, parsed back %d, %v", n, s, back, err)
		}
	}
	if s := Format(4 << 30); s != "4GiB" {
		t.Errorf("Format(4GiB) = %q", s)
	}
}
