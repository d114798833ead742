// Package units parses and prints byte sizes for the commands' flags and
// reports: "4GiB", "256MiB", "64KiB", one-letter binary forms ("4G"), SI
// forms ("4GB" = 4·10⁹) and plain bytes. Stateless; safe for concurrent use.
package units
