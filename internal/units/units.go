package units

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// sizeUnits maps a unit suffix (lower case) to its multiplier. Binary units
// (KiB, MiB, ...) and the one-letter forms (K, M, G, T) are powers of 1024;
// the SI forms (KB, MB, GB, TB) are powers of 1000, as their names say.
var sizeUnits = map[string]int64{
	"":    1,
	"b":   1,
	"k":   1 << 10,
	"kib": 1 << 10,
	"kb":  1000,
	"m":   1 << 20,
	"mib": 1 << 20,
	"mb":  1000 * 1000,
	"g":   1 << 30,
	"gib": 1 << 30,
	"gb":  1000 * 1000 * 1000,
	"t":   1 << 40,
	"tib": 1 << 40,
	"tb":  1000 * 1000 * 1000 * 1000,
}

// Parse parses a byte size: plain bytes ("1048576"), or a non-negative
// integer followed by a unit ("4GiB", "256MiB", "64KiB", "2G", "1GB"). Units
// are case-insensitive. Fractions, negative numbers, unknown units and values
// that overflow int64 are refused with an error wrapping ErrBadSize.
func Parse(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("%w: empty", ErrBadSize)
	}
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("%w: %q does not start with a number", ErrBadSize, s)
	}
	n, err := strconv.ParseInt(t[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q: number out of range", ErrBadSize, s)
	}
	unit := strings.ToLower(strings.TrimSpace(t[i:]))
	mul, ok := sizeUnits[unit]
	if !ok {
		return 0, fmt.Errorf("%w: %q: unknown unit %q (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)", ErrBadSize, s, t[i:])
	}
	if n > math.MaxInt64/mul {
		return 0, fmt.Errorf("%w: %q overflows int64", ErrBadSize, s)
	}
	return n * mul, nil
}

// Format renders n bytes with the largest binary unit that divides it
// exactly ("4GiB", "1536KiB", "100B"); Parse(Format(n)) == n.
func Format(n int64) string {
	units := []struct {
		name string
		mul  int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}}
	if n > 0 {
		for _, u := range units {
			if n%u.mul == 0 {
				return strconv.FormatInt(n/u.mul, 10) + u.name
			}
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// Human renders n bytes approximately for tables ("1.5 MiB").
func Human(n int64) string {
	f := float64(n)
	for _, u := range []string{"B", "KiB", "MiB", "GiB", "TiB"} {
		if f < 1024 || u == "TiB" {
			if u == "B" {
				return fmt.Sprintf("%d B", n)
			}
			return fmt.Sprintf("%.1f %s", f, u)
		}
		f /= 1024
	}
	return fmt.Sprintf("%d B", n)
}

// ErrBadSize: a size string (flag value) does not parse.
var ErrBadSize = errors.New("units: invalid size")
