package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/tierstore/tierstore/client"
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
	"put":    "--master ADDR KEY [FILE]",
	"get":    "--master ADDR KEY [FILE]",
	"exists": "--master ADDR KEY",
	"rm":     "--master ADDR [--force] KEY",
	"stats":  "--master ADDR [--node PEER ...]",
	"evict":  "--master ADDR --tier memory [KEY...|--all]",
}

// runOp runs put, get, exists, rm, stats and evict against a master. Each
// command has its own FlagSet holding only its flags.
func runOp(cmd string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet(cmd)
	addr := fs.String("master", "127.0.0.1:50051", "master gRPC address host:port")
	timeout := fs.Duration("timeout", 30*time.Second, "bound on the whole command (> 0)")
	var (
		force, all bool
		tierName   string
		nodes      listFlag
	)
	switch cmd {
	case "rm":
		fs.BoolVar(&force, "force", false, "remove even while a read lease is active")
	case "evict":
		fs.StringVar(&tierName, "tier", "", "the tier to drop replicas from (only \"memory\"; required)")
		fs.BoolVar(&all, "all", false, "every object (instead of KEY...)")
	case "stats":
		fs.Var(&nodes, "node", "also report this node's segment and SSD tier (peer address host:port; repeatable)")
	}
	if code, done := parseCmd(fs, opSynopsis[cmd], args, stdout, stderr); done {
		return code
	}
	pos := fs.Args()
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "tierstore %s: %s\n", cmd, fmt.Sprintf(format, a...))
		return 2
	}
	if *addr == "" {
		return fail("--master: must not be empty (host:port)")
	}
	if *timeout <= 0 {
		return fail("--timeout: must be positive, got %v", *timeout)
	}
	switch cmd {
	case "put", "get":
		if len(pos) < 1 || len(pos) > 2 {
			return fail("want KEY [FILE], got %d arguments", len(pos))
		}
	case "exists", "rm":
		if len(pos) != 1 {
			return fail("want KEY, got %d arguments", len(pos))
		}
	case "stats":
		if len(pos) != 0 {
			return fail("takes no arguments, got %q", pos[0])
		}
	case "evict":
		if tierName != "memory" {
			return fail("--tier: %q is not supported (only memory)", tierName)
		}
		if all == (len(pos) > 0) {
			return fail("give keys or --all (not both)")
		}
	}
	if cmd != "stats" {
		for _, k := range pos[:min(len(pos), keyArgs(cmd))] {
			if k == "" {
				return fail("KEY must not be empty")
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	c, err := client.New(ctx, client.Config{MasterAddr: *addr})
	if err != nil {
		fmt.Fprintf(stderr, "tierstore %s: --master %s: %v\n", cmd, *addr, err)
		return 1
	}
	defer c.Close()
	errOut := func(err error) int {
		fmt.Fprintf(stderr, "tierstore %s: %v (%s)\n", cmd, err, client.CodeOf(err))
		return 1
	}
	switch cmd {
	case "put":
		var val []byte
		if len(pos) == 2 && pos[1] != "-" {
			val, err = os.ReadFile(pos[1])
		} else {
			val, err = io.ReadAll(stdin)
		}
		if err != nil {
			return errOut(err)
		}
		if err := c.Put(ctx, pos[0], val); err != nil {
			return errOut(err)
		}
		fmt.Fprintf(stderr, "stored %q: %d bytes, crc32c %08x\n", pos[0], len(val), client.CRC32C(val))
	case "get":
		val, err := c.Get(ctx, pos[0])
		if err != nil {
			return errOut(err)
		}
		if len(pos) == 2 && pos[1] != "-" {
			if err := os.WriteFile(pos[1], val, 0o644); err != nil {
				return errOut(err)
			}
		} else if _, err := stdout.Write(val); err != nil {
			return errOut(err)
		}
	case "exists":
		ok, err := c.Exists(ctx, pos[0])
		if err != nil {
			return errOut(err)
		}
		fmt.Fprintln(stdout, ok)
		if !ok {
			return 1
		}
	case "rm":
		if err := c.Remove(ctx, pos[0], force); err != nil {
			return errOut(err)
		}
	case "stats":
		st, err := c.Stats(ctx)
		if err != nil {
			return errOut(err)
		}
		fmt.Fprintf(stdout, "nodes              %d\n", st.Nodes)
		fmt.Fprintf(stdout, "segments           %d (%s capacity, %s used)\n", st.Segments, units.Human(st.SegmentCapacity), units.Human(st.SegmentUsed))
		fmt.Fprintf(stdout, "objects            %d\n", st.Objects)
		fmt.Fprintf(stdout, "memory replicas    %d (%s)\n", st.MemoryReplicas, units.Human(st.MemoryBytes))
		fmt.Fprintf(stdout, "disk replicas      %d (%s)\n", st.DiskReplicas, units.Human(st.DiskBytes))
		fmt.Fprintf(stdout, "offload            queued %d, in flight %d, persisted %d, failed %d\n", st.OffloadQueued, st.OffloadInFlight, st.OffloadPersisted, st.OffloadFailed)
		fmt.Fprintf(stdout, "dram evictions     %d\n", st.Evictions)
		fmt.Fprintf(stdout, "expired nodes      %d\n", st.ExpiredNodes)
		printNodeTable(stdout, st.PerNode)
		for _, addr := range nodes {
			ns, err := node.PeerStats(ctx, addr)
			if err != nil {
				return errOut(err)
			}
			fmt.Fprintf(stdout, "node %s (%s): segment %s %s; SSD %d objects, %d buckets, %s used; offload persisted %d, failed %d; reads served DRAM %d, SSD %d\n",
				addr, ns.Backend, ns.Segment, units.Human(ns.SegmentSize), ns.Tier.Objects, ns.Tier.Buckets,
				units.Human(ns.Tier.BytesUsed), ns.OffloadPersisted, ns.OffloadFailed, ns.PeerReadsDRAM, ns.PeerReadsSSD)
		}
	case "evict":
		n, err := c.EvictMemory(ctx, pos, all)
		if err != nil {
			return errOut(err)
		}
		fmt.Fprintf(stdout, "dropped %d memory replicas\n", n)
	}
	return 0
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
			r.MemoryReplicas, units.Human(r.MemoryBytes), r.DiskReplicas, units.Human(r.DiskBytes),
			r.OffloadQueued, r.OffloadInFlight)
	}
	_ = tw.Flush()
}
