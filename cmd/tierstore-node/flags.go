package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/tierstore/tierstore/ha"
	"github.com/tierstore/tierstore/internal/tlsconf"
	"github.com/tierstore/tierstore/internal/units"
	"github.com/tierstore/tierstore/node"
)

// sizeFlag is a flag.Value of a byte size ("4GiB", "256MiB", "1048576").
type sizeFlag struct{ p *int64 }

func (s sizeFlag) String() string {
	if s.p == nil {
		return ""
	}
	return units.Format(*s.p)
}

func (s sizeFlag) Set(v string) error {
	n, err := units.Parse(v)
	if err != nil {
		return err
	}
	*s.p = n
	return nil
}

// secondsFlag is a flag.Value of a duration given in seconds (Mooncake's
// unit for offload_task_timeout) or as a Go duration ("300", "5m", "90s").
type secondsFlag struct{ p *time.Duration }

func (s secondsFlag) String() string {
	if s.p == nil {
		return ""
	}
	return s.p.String()
}

func (s secondsFlag) Set(v string) error {
	if n, err := strconv.ParseFloat(v, 64); err == nil {
		if n <= 0 || n > math.MaxInt64/float64(time.Second) {
			return fmt.Errorf("%q seconds must be positive", v)
		}
		*s.p = time.Duration(n * float64(time.Second))
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("%q is neither seconds nor a duration", v)
	}
	*s.p = d
	return nil
}

// options are the parsed command line of tierstore-node.
type options struct {
	master     string
	node       node.Config
	tls        tlsconf.Files // tls_cert, tls_key, tls_ca (empty: plaintext)
	cpuProfile string        // cpuprofile: CPU profile file, start-up to shutdown (empty: none)
	// grantSecretFile (grant_secret_file): the grant secret the masters
	// share (empty: reads and writes need no grant).
	grantSecretFile string
}

const usageHeader = `usage: tierstore-node --master=HOST:PORT|etcd://H1:2379,H2:2379[/PREFIX] [--name=value ...]

Runs a tierstore store node: a DRAM segment mounted at the master, a peer
data service and (with --enable_offload) an SSD tier. Sizes take 4GiB,
256MiB, 4G, 4GB (SI) or plain bytes. Flags:
`

// parseFlags parses args (without the program name) into options. Every bad
// value or combination is a one-line error naming the flag (the flag
// package's usage dump is suppressed). On -h/--help the usage with every
// default goes to helpOut and the error wraps flag.ErrHelp.
func parseFlags(args []string, helpOut io.Writer) (options, error) {
	o := options{node: node.DefaultConfig()}
	fs := flag.NewFlagSet("tierstore-node", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	c := &o.node
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile (runtime/pprof) from start-up to shutdown to this file (empty: none)")
	fs.StringVar(&o.master, "master", "", "master gRPC address host:port, or etcd://h1:2379,h2:2379[/prefix] for the elected leader of highly available masters (required)")
	fs.StringVar(&c.Listen, "listen", c.Listen, "peer gRPC listen address; port 0 picks one, printed at start")
	fs.Var(sizeFlag{&c.Memory}, "memory", "DRAM segment size (4GiB, 256MiB or bytes)")
	fs.BoolVar(&c.EnableOffload, "enable_offload", false, "open the SSD tier and run the offload heartbeat (needs --ssd_dir)")
	fs.StringVar(&c.SSDDir, "ssd_dir", "", "SSD tier directory: absolute, existing, writable")
	fs.Var(sizeFlag{&c.SSDCapacity}, "ssd_capacity", "SSD tier capacity (0 = unlimited)")
	fs.StringVar(&c.Backend, "backend", c.Backend, "bucket I/O backend: uring (falls back to pwrite) or pwrite")
	fs.BoolVar(&c.DirectIO, "direct_io", true, "open bucket files with O_DIRECT (falls back to buffered I/O where the file system refuses it); --direct_io=false for buffered")
	fs.IntVar(&c.BucketKeysLimit, "bucket_keys_limit", c.BucketKeysLimit, "most objects in one bucket")
	fs.Var(sizeFlag{&c.BucketSizeLimit}, "bucket_size_limit", "most bytes in one bucket, and the largest object that goes to SSD (default 256MiB, or --ssd_capacity/8 when that is smaller)")
	fs.StringVar(&c.BucketEviction, "bucket_eviction", c.BucketEviction, "SSD bucket eviction: lru, fifo, lru2 (scan resistant) or worth (the bucket whose objects are worth least by the master's tinylfu sketch, evicting only what a write needs; lru without one)")
	fs.DurationVar(&c.AdmissionSketchInterval, "admission_sketch_interval", c.AdmissionSketchInterval, "least time between two admission sketches taken from a tinylfu master (it sends one when the node's copy has fallen 1/64 of its ageing period behind); 0 = no minimum")
	fs.StringVar(&c.Compression, "compression", c.Compression, "object compression on SSD: none or lz4")
	fs.IntVar(&c.MetricsPort, "metrics_port", 0, "Prometheus metrics port on 127.0.0.1 (0 = off)")
	fs.DurationVar(&c.HeartbeatInterval, "heartbeat_interval", c.HeartbeatInterval, "offload heartbeat period")
	fs.BoolVar(&c.OffloadWake, "offload_wake", c.OffloadWake, "also run a heartbeat as soon as the master says the offload is pressing (a put waits for DRAM room, queued offload bytes pass a quarter of the DRAM, promotions are queued); false: on the heartbeat ticks only")
	fs.DurationVar(&c.PingInterval, "ping_interval", c.PingInterval, "liveness ping period")
	fs.DurationVar(&c.ReconcileInterval, "reconcile_interval", c.ReconcileInterval, "period of the SSD key-list reconcile with the master")
	fs.Var(secondsFlag{&c.OffloadTaskTimeout}, "offload_task_timeout", "bound of one offload round, in seconds or as a duration; keep it equal to the master's: an unanswered notify is sent again until then, and its durable bucket is kept and re-registered")
	o.tls.Register(fs)
	fs.StringVar(&o.grantSecretFile, "grant_secret_file", "", "file of the grant secret (64 hex digits; the same file as every master's): every data-plane read must carry the grant of its lookup, every write the grant of its PutStart (docs/security.md). Empty: reads and writes need no grant")
	c.Limits.Register(fs, true)
	fs.IntVar(&c.RequestsPerConn, "max_requests_per_conn", c.RequestsPerConn, "most data-plane SSD reads served at once on one connection; further requests wait in the socket (the client's sends block), none is refused")
	fs.DurationVar(&c.DataFrameTimeout, "data_frame_timeout", c.DataFrameTimeout, "a data-plane request frame must arrive within this once its first byte is in, plus its payload at 1 MiB/s; a slower one ends its connection (PEER_LIMIT_EXCEEDED). Idle connections are not timed")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(helpOut, usageHeader)
			fs.SetOutput(helpOut)
			fs.PrintDefaults()
			return o, err
		}
		// "invalid value "4XB" for flag -memory: ..." -> "... flag --memory: ...".
		return o, errors.New(strings.Replace(err.Error(), "flag -", "flag --", 1))
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q (flags are --name=value)", fs.Arg(0))
	}
	if err := o.tls.Check(); err != nil {
		return o, err
	}
	if o.master == "" {
		return o, fmt.Errorf("--master: required (host:port of tierstore-master, or etcd://h1:2379,h2:2379)")
	}
	if strings.Contains(o.master, "://") {
		if _, err := ha.ParseMasterURL(o.master); err != nil {
			return o, fmt.Errorf("--master: %w", err)
		}
	}
	// Left unset, the bucket size is derived from --ssd_capacity (Config's
	// 0); given, it must be a positive size that fits the capacity.
	// So are the bounds per peer: 0 in a Config takes the default, given
	// on the command line it is refused.
	var badBucket error
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "bucket_size_limit" && c.BucketSizeLimit <= 0 {
			badBucket = fmt.Errorf("%w: --bucket_size_limit: must be positive, got %d", node.ErrBadConfig, c.BucketSizeLimit)
		}
		switch f.Name {
		case "max_conns_per_peer", "max_streams_per_conn", "tls_handshake_timeout", "max_peer_buffer", "max_requests_per_conn", "data_frame_timeout":
			if v := f.Value.String(); v == "0" || v == "0s" || v == "0B" || strings.HasPrefix(v, "-") {
				badBucket = fmt.Errorf("%w: --%s: must be positive, got %s", node.ErrBadConfig, f.Name, v)
			}
		}
	})
	if badBucket != nil {
		return o, badBucket
	}
	if err := c.Validate(); err != nil {
		return o, err
	}
	return o, nil
}
