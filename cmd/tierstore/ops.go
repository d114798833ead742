package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/keyspec"
	"github.com/tierstore/tierstore/internal/tlsconf"
	"github.com/tierstore/tierstore/internal/units"
	"github.com/tierstore/tierstore/masterapi"
	"github.com/tierstore/tierstore/node"
)

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return fmt.Sprint(*l) }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// opSynopsis is the argument synopsis of each object command.
var opSynopsis = map[string]string{
	"put":    "--master ADDR [--replicas N] KEY [FILE]",
	"get":    "--master ADDR KEY [FILE]",
	"exists": "--master ADDR KEY",
	"rm":     "--master ADDR [--force] KEY | --all | --regex RE",
	"stats":  "--master ADDR [--node PEER ...]",
	"evict":  "--master ADDR --tier dram [KEY...|--all]",
}

// opArgs is one object command's parsed command line.
type opArgs struct {
	cmd        string
	addr       string
	timeout    time.Duration
	force, all bool
	regex      string
	tierName   string
	nodes      listFlag
	replicas   int // put
	pos        []string
	value      []byte // put: the value, read before connecting
	tls        tlsconf.Files
}

// runOp runs put, get, exists, rm, stats and evict against a master. Each
// command has its own FlagSet holding only its flags. Usage errors exit 2
// before anything connects; failures of the operation exit 1.
func runOp(cmd string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a, code, done := parseOp(cmd, args, stdin, stdout, stderr)
	if done {
		return code
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	c, err := client.New(ctx, client.Config{MasterAddr: a.addr, TLS: a.tls})
	if err != nil {
		fmt.Fprintf(stderr, "tierstore %s: --master %s: %v\n", cmd, a.addr, err)
		return 1
	}
	defer c.Close()
	if err := opHandlers[cmd](ctx, c, a, stdout, stderr); err != nil {
		var ex exitCode
		if errors.As(err, &ex) {
			return int(ex)
		}
		fmt.Fprintf(stderr, "tierstore %s: %v (%s)\n", cmd, err, client.CodeOf(err))
		return 1
	}
	return 0
}

// exitCode is an outcome that is not an error message: exists answering
// false exits 1 without one.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit %d", int(e)) }

// parseOp parses and checks cmd's flags and arguments. done is true when
// the command must stop with code (help printed, or a usage error printed
// as one line).
func parseOp(cmd string, args []string, stdin io.Reader, stdout, stderr io.Writer) (a opArgs, code int, done bool) {
	a.cmd = cmd
	fs := newFlagSet(cmd)
	fs.StringVar(&a.addr, "master", "127.0.0.1:50051", "master gRPC address host:port, or etcd://h1:2379,h2:2379[/prefix] (the elected leader)")
	fs.DurationVar(&a.timeout, "timeout", 30*time.Second, "bound on the whole command (> 0)")
	a.tls.Register(fs)
	switch cmd {
	case "put":
		fs.IntVar(&a.replicas, "replicas", 1, fmt.Sprintf("DRAM replicas, each on a different node (1..%d); fails when fewer live nodes have room", masterapi.MaxReplicas))
	case "rm":
		fs.BoolVar(&a.force, "force", false, "remove even while a read lease is active")
		fs.BoolVar(&a.all, "all", false, "every object (instead of KEY); prints the count removed")
		fs.StringVar(&a.regex, "regex", "", "every object whose key matches RE anywhere (Go regexp syntax) instead of KEY; prints the count removed")
	case "evict":
		fs.StringVar(&a.tierName, "tier", "", "the tier to drop replicas from (only \"dram\"; required)")
		fs.BoolVar(&a.all, "all", false, "every object (instead of KEY...)")
	case "stats":
		fs.Var(&a.nodes, "node", "also report this node's segment and SSD tier (peer address host:port; repeatable)")
	}
	if code, done := parseCmd(fs, opSynopsis[cmd], args, stdout, stderr); done {
		return a, code, true
	}
	a.pos = fs.Args()
	if err := a.tls.Check(); err != nil {
		fmt.Fprintf(stderr, "tierstore %s: %v\n", cmd, err)
		return a, 2, true
	}
	if msg := checkOp(&a); msg != "" {
		fmt.Fprintf(stderr, "tierstore %s: %s\n", cmd, msg)
		return a, 2, true
	}
	if cmd == "put" {
		var err error
		if len(a.pos) == 2 && a.pos[1] != "-" {
			a.value, err = os.ReadFile(a.pos[1])
		} else {
			a.value, err = io.ReadAll(stdin)
		}
		if err != nil {
			// A FILE that cannot be read is the command line's fault, not
			// the store's: a usage error, before anything connects.
			fmt.Fprintf(stderr, "tierstore put: FILE: %v\n", err)
			return a, 2, true
		}
	}
	return a, 0, false
}

// checkOp returns what is wrong with a's flags and arguments, or "".
func checkOp(a *opArgs) string {
	pos := a.pos
	switch {
	case a.addr == "":
		return "--master: must not be empty (host:port)"
	case a.timeout <= 0:
		return fmt.Sprintf("--timeout: must be positive, got %v", a.timeout)
	}
	switch a.cmd {
	case "put", "get":
		if len(pos) < 1 || len(pos) > 2 {
			return fmt.Sprintf("want KEY [FILE], got %d arguments", len(pos))
		}
		if a.cmd == "put" && (a.replicas < 1 || a.replicas > masterapi.MaxReplicas) {
			return fmt.Sprintf("--replicas: want 1..%d, got %d", masterapi.MaxReplicas, a.replicas)
		}
	case "rm":
		if msg := checkRm(a); msg != "" {
			return msg
		}
	case "exists":
		if len(pos) != 1 {
			return fmt.Sprintf("want KEY, got %d arguments", len(pos))
		}
	case "stats":
		if len(pos) != 0 {
			return fmt.Sprintf("takes no arguments, got %q", keyspec.Show(pos[0]))
		}
	case "evict":
		if a.tierName != "dram" {
			return fmt.Sprintf("--tier: %q is not supported (only dram)", a.tierName)
		}
		if a.all == (len(pos) > 0) {
			return "give keys or --all (not both)"
		}
	}
	if a.cmd != "stats" {
		for _, k := range pos[:min(len(pos), keyArgs(a.cmd))] {
			if k == "" {
				return "KEY must not be empty"
			}
		}
	}
	return ""
}

// checkRm returns what is wrong with rm's arguments, or "": one KEY, or
// --all, or --regex RE (a pattern that does not compile is a usage error,
// before anything connects).
func checkRm(a *opArgs) string {
	regexSet := a.regex != ""
	switch {
	case a.all && regexSet:
		return "give --all or --regex, not both"
	case (a.all || regexSet) && len(a.pos) > 0:
		return fmt.Sprintf("give KEY or --all / --regex, not both (got %d arguments)", len(a.pos))
	case !a.all && !regexSet && len(a.pos) != 1:
		return fmt.Sprintf("want KEY, --all or --regex RE, got %d arguments", len(a.pos))
	}
	if regexSet {
		if _, err := regexp.Compile(a.regex); err != nil {
			return fmt.Sprintf("--regex %q: %v", a.regex, err)
		}
	}
	return ""
}

// opHandlers run each object command once its arguments are checked.
var opHandlers = map[string]func(ctx context.Context, c *client.Client, a opArgs, stdout, stderr io.Writer) error{
	"put": func(ctx context.Context, c *client.Client, a opArgs, _, stderr io.Writer) error {
		if err := c.PutWith(ctx, a.pos[0], a.value, client.PutOptions{Replicas: a.replicas}); err != nil {
			return err
		}
		reps := "1 replica"
		if a.replicas > 1 {
			reps = fmt.Sprintf("%d replicas on as many nodes", a.replicas)
		}
		fmt.Fprintf(stderr, "stored %q: %d bytes, crc32c %08x, %s\n", keyspec.Show(a.pos[0]), len(a.value), client.CRC32C(a.value), reps)
		return nil
	},
	"get": func(ctx context.Context, c *client.Client, a opArgs, stdout, _ io.Writer) error {
		val, err := c.Get(ctx, a.pos[0])
		if err != nil {
			return err
		}
		if len(a.pos) == 2 && a.pos[1] != "-" {
			return os.WriteFile(a.pos[1], val, 0o644)
		}
		_, err = stdout.Write(val)
		return err
	},
	"exists": func(ctx context.Context, c *client.Client, a opArgs, stdout, _ io.Writer) error {
		ok, err := c.Exists(ctx, a.pos[0])
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, ok)
		if !ok {
			return exitCode(1)
		}
		return nil
	},
	"rm": func(ctx context.Context, c *client.Client, a opArgs, stdout, _ io.Writer) error {
		var n int64
		var err error
		switch {
		case a.all:
			n, err = c.RemoveAll(ctx, a.force)
		case a.regex != "":
			n, err = c.RemoveByRegex(ctx, a.regex, a.force)
		default:
			return c.Remove(ctx, a.pos[0], a.force)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "removed %d\n", n)
		return nil
	},
	"stats": runStats,
	"evict": func(ctx context.Context, c *client.Client, a opArgs, stdout, _ io.Writer) error {
		res, err := c.EvictDRAM(ctx, a.pos, a.all)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, evictReport(res))
		return nil
	},
}

// runStats prints the master's totals, one row per node incarnation, and
// the counters of each node given with --node.
func runStats(ctx context.Context, c *client.Client, a opArgs, stdout, _ io.Writer) error {
	st, err := c.Stats(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "nodes              %d\n", st.Nodes)
	fmt.Fprintf(stdout, "segments           %d (%s capacity, %s used)\n", st.Segments, units.Human(st.SegmentCapacity), units.Human(st.SegmentUsed))
	fmt.Fprintf(stdout, "objects            %d\n", st.Objects)
	fmt.Fprintf(stdout, "dram replicas      %d (%s)\n", st.DRAMReplicas, units.Human(st.DRAMBytes))
	fmt.Fprintf(stdout, "ssd replicas       %d (%s)\n", st.SSDReplicas, units.Human(st.SSDBytes))
	fmt.Fprintf(stdout, "offload            queued %d, in flight %d, persisted %d, failed %d\n", st.OffloadQueued, st.OffloadInFlight, st.OffloadPersisted, st.OffloadFailed)
	fmt.Fprintf(stdout, "dram evictions     %d\n", st.Evictions)
	fmt.Fprintf(stdout, "expired nodes      %d\n", st.ExpiredNodes)
	printNodeTable(stdout, st.PerNode)
	for _, addr := range a.nodes {
		var opts []grpc.DialOption
		if a.tls.Enabled() {
			src, err := tlsconf.Load(a.tls)
			if err != nil {
				return err
			}
			opts = append(opts, grpc.WithTransportCredentials(src.ClientCredentials(tlsconf.Node)))
		}
		ns, err := node.PeerStats(ctx, addr, opts...)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "node %s (%s): segment %s %s; SSD %d objects, %d buckets, %s used (%s live, %s dead, %d buckets mostly dead); offload persisted %d, failed %d; reads served DRAM %d, SSD %d\n",
			addr, ns.Backend, ns.Segment, units.Human(ns.SegmentSize), ns.Tier.Objects, ns.Tier.Buckets,
			units.Human(ns.Tier.BytesUsed), units.Human(ns.Tier.LiveBytes), units.Human(ns.Tier.DeadBytes), ns.Tier.MostlyDeadBuckets,
			ns.OffloadPersisted, ns.OffloadFailed, ns.PeerReadsDRAM, ns.PeerReadsSSD)
	}
	return nil
}

// keyArgs is how many leading positional arguments of cmd are keys.
func keyArgs(cmd string) int {
	if cmd == "evict" {
		return 1 << 30
	}
	return 1
}

// printNodeTable writes one row per node incarnation of the master's
// Stats: its DRAM segment, and objects and bytes per tier. A retired
// incarnation (still pointed at by replicas kept for a lease) is marked
// "retired".
func printNodeTable(w io.Writer, rows []masterapi.NodeStats) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tENDPOINT\tSTATE\tSEGMENT USED/SIZE\tDRAM OBJECTS\tDRAM BYTES\tSSD OBJECTS\tSSD BYTES\tOFFLOAD QUEUED/IN FLIGHT")
	for _, r := range rows {
		state := "alive"
		if !r.Alive {
			state = "retired"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s / %s\t%d\t%s\t%d\t%s\t%d / %d\n",
			r.Node, r.Endpoint, state, units.Human(r.SegmentUsed), units.Human(r.SegmentSize),
			r.DRAMReplicas, units.Human(r.DRAMBytes), r.SSDReplicas, units.Human(r.SSDBytes),
			r.OffloadQueued, r.OffloadInFlight)
	}
	_ = tw.Flush()
}

// evictReport is evict's one-line answer: what was dropped and, when
// replicas were left in place, how many and why.
func evictReport(res masterapi.EvictDRAMResult) string {
	s := fmt.Sprintf("dropped %d DRAM replicas", res.Dropped)
	if n := res.Skipped(); n > 0 {
		s += fmt.Sprintf("; skipped %d: %s", n, res.SkipReasons())
	}
	return s
}
