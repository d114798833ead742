package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/tierstore/tierstore/ha"
)

// EtcdArgs are the flags of a tierstore-etcd keeping its data in dir and
// serving clients on 127.0.0.1:port (0: any free port; give the same port
// to restart it where nodes and masters look for it).
func EtcdArgs(dir string, port int) []string {
	return []string{"--data-dir", dir, "--listen-client", fmt.Sprintf("127.0.0.1:%d", port)}
}

// HAMasterArgs are the flags of a test master that campaigns for
// leadership in etcd at endpoints: MasterArgs on any free port, with
// enable_ha and a session TTL of 2 s (a dead leader is replaced in about
// 2.5 s).
func HAMasterArgs(endpoints string, extra ...string) []string {
	return MasterArgs(0, append([]string{"--enable_ha=true", "--etcd_endpoints=" + endpoints, "--ha_session_ttl=2"}, extra...)...)
}

// EtcdURL is the --master value that names the leader elected in the etcd
// of p (a tierstore-etcd process).
func EtcdURL(p *Proc) string { return "etcd://" + p.Addr }

// WaitLeader waits until the etcd at url (etcd://...) names a leader of a
// term above after, and returns it.
func WaitLeader(ctx context.Context, url string, after uint64) (ha.Leader, error) {
	u, err := ha.ParseMasterURL(url)
	if err != nil {
		return ha.Leader{}, fmt.Errorf("cluster: %w", err)
	}
	r, err := ha.NewResolver(u, ha.ResolverOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return ha.Leader{}, fmt.Errorf("cluster: %w", err)
	}
	defer r.Close()
	l, err := r.WaitNewer(ctx, after)
	if err != nil {
		return l, fmt.Errorf("cluster: no leader after term %d: %w", after, err)
	}
	return l, nil
}

// WaitOutput waits up to d for the process to print s (stdout or stderr).
func (p *Proc) WaitOutput(s string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for !strings.Contains(p.Output(), s) {
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster: %s did not print %q within %v", p.Name, s, d)
		}
		if p.Exited() {
			return fmt.Errorf("cluster: %s exited without printing %q: %v", p.Name, s, p.err)
		}
		time.Sleep(20 * time.Millisecond) // poll the captured output
	}
	return nil
}
