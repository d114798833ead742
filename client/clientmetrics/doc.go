// Package clientmetrics exposes a client's Put and Get latencies as
// Prometheus histograms: tierstore_client_put_seconds and
// tierstore_client_get_seconds, labelled by tier (dram_local, dram_remote,
// ssd_local, ssd_remote: where the read was served or the put written,
// the same labels as the node's tierstore_node_*_seconds).
//
// It lives apart from package client so that a program that only puts and
// gets links no Prometheus (client/deps_test.go): package client reports
// latencies through its Observer interface, and Metrics is one Observer.
//
//	m := clientmetrics.New(nil)
//	prometheus.MustRegister(m)
//	c, err := client.New(ctx, client.Config{MasterAddr: addr, Observer: m})
//
// # Concurrency
//
// A Metrics is safe for concurrent use (the client calls it from every
// goroutine that completes an operation); it only observes histograms.
package clientmetrics
