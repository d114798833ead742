// Package pkgmap holds no code: its test keeps the package map of
// docs/design.md true to the module. The map gives every package of the
// module a layer; the test fails when `go list` finds a package the map does
// not name, when the map names a package that does not exist, and when a
// package imports (outside its tests) one of the same or a higher layer, an
// arrow of the import graph pointing up.
//
// Invariant: the map names every package exactly once, and every import
// between the module's packages goes from a higher layer to a lower one.
//
// Concurrency: nothing to share; the test runs `go list` once.
package pkgmap
