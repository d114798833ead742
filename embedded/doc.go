// Package embedded runs a whole tierstore in one process: a master (package
// master), one store node (package node) and a client (package client) that
// reaches both without sockets, with the same API as a networked client.
// The demo, the quick start and the churn benchmark use it.
//
// It sits on top of client, node and master so that package client stays
// light (docs/design.md, package map). An Embedded is safe for concurrent
// use through its Client; Close stops client, node (draining its offload
// round) and master in that order and removes a temporary SSD directory it
// created.
package embedded
