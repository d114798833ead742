package node

import (
	"context"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tierstore/tierstore/internal/crc32c"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/grant"
	"github.com/tierstore/tierstore/internal/peerlimit"
	"github.com/tierstore/tierstore/internal/tlsconf"
	"github.com/tierstore/tierstore/internal/wire"
)

// dataPlane is the node's side of the bulk data protocol (package wire's
// DataServer, on the same listener as the gRPC peer service through a
// wire.Mux), and the Put/Get latency histograms of both the remote and
// the in-process paths.
type dataPlane struct {
	mux *wire.Mux // nil without a listener

	once sync.Once
	get  *prometheus.HistogramVec // tier: dram_local, dram_remote, ssd_local, ssd_remote
	put  *prometheus.HistogramVec // tier: dram_local, dram_remote
	errs *prometheus.CounterVec   // op: put, get_dram, get_ssd (remote requests refused or failed)
	// the children of get and put, resolved once
	getDRAMLocal, getDRAMRemote, getSSDLocal, getSSDRemote prometheus.Observer
	putLocal, putRemote                                    prometheus.Observer
}

// Labels of the latency histograms, the same as package client's Tier.
const (
	tierDRAMLocal  = "dram_local"
	tierDRAMRemote = "dram_remote"
	tierSSDLocal   = "ssd_local"
	tierSSDRemote  = "ssd_remote"
)

// latencyBuckets: 10 µs to about 1.3 s, doubling.
var latencyBuckets = prometheus.ExponentialBuckets(10e-6, 2, 18)

func (d *dataPlane) metrics() *dataPlane {
	d.once.Do(func() {
		d.get = prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "tierstore", Subsystem: "node", Name: "get_seconds",
			Help:    "Time the node spent serving a read, by tier (dram_local, dram_remote, ssd_local, ssd_remote); remote: from the request's header to the end of its reply.",
			Buckets: latencyBuckets}, []string{"tier"})
		d.put = prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "tierstore", Subsystem: "node", Name: "put_seconds",
			Help:    "Time the node spent storing a put's bytes, by tier (dram_local, dram_remote); remote: from the request's header to the end of its reply.",
			Buckets: latencyBuckets}, []string{"tier"})
		d.errs = prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tierstore", Subsystem: "node", Name: "data_errors_total",
			Help: "Data-plane requests answered with an error, by op (put, get_dram, get_ssd)."}, []string{"op"})
		d.getDRAMLocal, d.getDRAMRemote = d.get.WithLabelValues(tierDRAMLocal), d.get.WithLabelValues(tierDRAMRemote)
		d.getSSDLocal, d.getSSDRemote = d.get.WithLabelValues(tierSSDLocal), d.get.WithLabelValues(tierSSDRemote)
		d.putLocal, d.putRemote = d.put.WithLabelValues(tierDRAMLocal), d.put.WithLabelValues(tierDRAMRemote)
	})
	return d
}

// register adds the data plane's metrics to reg.
func (d *dataPlane) register(reg prometheus.Registerer, labels prometheus.Labels) {
	d.metrics()
	wrap := prometheus.WrapRegistererWith(labels, reg)
	wrap.MustRegister(d.get, d.put, d.errs)
}

// startDataPlane shares lis between the data plane and the gRPC peer
// service, and returns the listener to give the gRPC server.
func (n *Node) startDataPlane(lis net.Listener) net.Listener {
	n.dp.metrics()
	g := n.guard
	opts := wire.DataServerOptions{Logger: n.log, SSDReadsPerConn: n.cfg.RequestsPerConn, FrameTimeout: n.cfg.DataFrameTimeout,
		StreamHold: ssdChunk * ssdWindow,
		Hold:       func(c net.Conn, size int64) (func(), error) { return g.Hold(c.RemoteAddr(), size) },
		Limited:    func(from net.Addr, err error) { g.Count(peerlimit.LimitFrameTimeout, from, err) }}
	mo := wire.MuxOptions{HandshakeTimeout: g.Limits().HandshakeTimeout,
		Refused: func(from net.Addr, err error) {
			if !g.HandshakeRefused(from, err) && n.cfg.TLS != nil {
				tlsconf.LogRefused(n.log, from, err)
			}
		}}
	if n.cfg.TLS != nil {
		opts.Authorize = authorizeData
		mo.TLS = n.cfg.TLS.ServerConfig()
	}
	n.dp.mux = wire.NewMuxWith(lis, wire.NewDataServer(dataHandler{n}, opts), mo)
	return n.dp.mux.Listener()
}

// Roles gives the node's gRPC methods the roles that may call them with
// mutual TLS; its test fails for a method without roles. The data plane
// (reads and writes of ranges) needs role client (authorizeData).
var Roles = tlsconf.Table{
	"/tierstore.node.v1.NodePeer/NodeStats": {tlsconf.Client, tlsconf.Node, tlsconf.Master},
}

// authorizeData lets a data connection through if its peer's certificate
// names role client (the Mux verified the certificate).
func authorizeData(c net.Conn) error {
	tc, ok := c.(tlsconf.StateConn)
	if !ok {
		return errcode.Errorf(errcode.PermissionDenied, "the data plane needs role client over mutual TLS; the connection is not TLS")
	}
	cs := tc.ConnectionState()
	if slices.Contains(tlsconf.PeerRoles(cs), tlsconf.Client) {
		return nil
	}
	return errcode.Errorf(errcode.PermissionDenied, "the data plane (reads and writes of ranges) needs role client; the peer has certificate %s", tlsconf.Describe(cs.PeerCertificates[0]))
}

// observeLocalPut records an in-process put (WriteRange called by a client
// in this process) that started at start.
func (n *Node) observeLocalPut(start time.Time) {
	n.dp.metrics().putLocal.Observe(time.Since(start).Seconds())
}

// dataHandler serves the data plane (wire.DataHandler) on the node.
type dataHandler struct{ n *Node }

func (h dataHandler) WriteLimit() int64 { return h.n.seg.Size() }

// BeginWrite claims the range for the put (Node.beginWrite, the one write
// path of the node, so the put-token and range checks apply to it as to
// every other write) before a byte of the payload is read; the payload is
// then received straight into the segment. With a grant secret, g must
// first be the write grant of this range, put token and key (the object
// ctx carries) on this node (grants.go): a write refused for it claims
// nothing.
func (h dataHandler) BeginWrite(ctx context.Context, segment string, off, n int64, token uint64, g []byte) (wire.RangeWriter, error) {
	if h.n.cfg.Grants != nil {
		o, _ := wire.ObjectOf(ctx)
		sc := grant.Scope{Kind: grant.Write, Key: []byte(o.Key), Segment: segment, Offset: uint64(off), Length: uint64(n), Token: token}
		if err := h.n.checkGrant(sc, g); err != nil {
			return nil, err
		}
	}
	w, err := h.n.beginWrite(ctx, segment, off, n, token)
	if err != nil {
		return nil, err
	}
	w.remote = true
	return w, nil
}

// ViewRange pins the segment (Close waits) and hands out the range as it
// is, if it is exactly a complete object's (checkReadRange), of the put
// token when the reader names one, and, with a
// grant secret, g is the read grant of that object's range (grants.go):
// no copy and no checksum on the node; the reader checks the object's
// CRC32C, so a range reused under it is a miss, not wrong bytes.
func (h dataHandler) ViewRange(segment string, off, n int64, token uint64, g []byte) ([]byte, func(), error) {
	if err := h.n.checkSegment(segment); err != nil {
		return nil, nil, err
	}
	view, release := h.n.seg.pin()
	v, err := view(off, int(n))
	if err == nil {
		var key string
		key, err = h.n.checkReadRange(off, n, token) // only the range of a complete object (readcheck.go)
		if err == nil && h.n.cfg.Grants != nil {
			err = h.n.checkGrant(grant.Scope{Key: []byte(key), Segment: segment, Offset: uint64(off), Length: uint64(n)}, g)
		}
	}
	if err != nil {
		release()
		return nil, nil, toCode(err)
	}
	h.n.metrics.peerReadsDRAM.Add(1)
	return v, release, nil
}

// OpenSSD opens key's value on the SSD for the data plane to stream
// (Node.openSSD): unchecked pieces whose CRC32C the client checks, or with
// verify (a client whose previous copy failed that check) a whole value
// the tier checks against its index, dropping a corrupt entry.
// With a grant secret, g must be the read grant of key and want on this
// node (grants.go), checked before the tier is touched.
func (h dataHandler) OpenSSD(ctx context.Context, key []byte, want uint64, g []byte, verify bool) (wire.SSDValue, error) {
	if err := h.n.checkGrant(grant.Scope{Key: key, Length: want}, g); err != nil {
		return nil, err
	}
	v, err := h.n.openSSD(ctx, key, verify)
	if err != nil {
		return nil, err
	}
	h.n.metrics.peerReadsSSD.Add(1)
	return v, nil
}

func (h dataHandler) Served(op wire.Op, d time.Duration, err error) {
	m := h.n.dp.metrics()
	var hist prometheus.Observer
	var label string
	switch op {
	case wire.OpWrite:
		hist, label = m.putRemote, "put"
	case wire.OpReadRange:
		hist, label = m.getDRAMRemote, "get_dram"
	default:
		hist, label = m.getSSDRemote, "get_ssd"
	}
	if err != nil {
		m.errs.WithLabelValues(label).Inc()
		return
	}
	hist.Observe(d.Seconds())
}

// ReadRangeInto copies len(buf) bytes of the node's segment at off into
// buf and returns their CRC32C, computed chunk by chunk right after each
// chunk is copied (while in cache): the in-process read of a client in
// this process (client.LocalNodeInto), without an allocation; the client
// compares the CRC with the object's.
func (n *Node) ReadRangeInto(_ context.Context, segment string, off int64, buf []byte) (uint32, error) {
	start := time.Now()
	if err := n.checkSegment(segment); err != nil {
		return 0, err
	}
	crc, err := n.seg.readCRC(buf, off)
	if err != nil {
		return 0, toCode(err)
	}
	n.dp.metrics().getDRAMLocal.Observe(time.Since(start).Seconds())
	return crc, nil
}

// copyChunk is how much copyCRCUpdate copies before checksumming it.
const copyChunk = 64 << 10

// copyCRCUpdate copies src into dst (of the same length) and returns crc
// (the CRC32C of earlier bytes) continued over what it copied, checksumming
// each chunk of dst as soon as it is copied.
func copyCRCUpdate(crc uint32, dst, src []byte) uint32 {
	for i := 0; i < len(dst); i += copyChunk {
		j := min(i+copyChunk, len(dst))
		copy(dst[i:j], src[i:j])
		crc = crc32c.Update(crc, dst[i:j])
	}
	return crc
}

// ReadSSDInto reads key's value from the node's SSD tier into buf, which
// must be exactly the object's size, and returns the CRC32C of the bytes
// copied (client.LocalNodeInto). The value is read in pieces into pooled
// page-aligned buffers and copied into buf as each arrives, its CRC32C
// computed during the copy and checked here against the tier's index (the
// read's one check: the client only compares that CRC with the object's).
// A mismatch drops the entry and the master's replica (invariant 5).
func (n *Node) ReadSSDInto(ctx context.Context, key []byte, buf []byte) (uint32, error) {
	start := time.Now()
	crc, err := n.readSSDStream(ctx, key, [][]byte{buf})
	if err != nil {
		return 0, err
	}
	n.dp.metrics().getSSDLocal.Observe(time.Since(start).Seconds())
	return crc, nil
}
