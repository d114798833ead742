package mastergrpc

import (
	"io"
	"sync"

	"google.golang.org/grpc"
)

// Conn is what a Client sends its calls on: a *grpc.ClientConn for
// host:port, or the connection of a registered scheme (one that follows an
// elected leader, package ha).
type Conn interface {
	grpc.ClientConnInterface
	io.Closer
}

// Follower is implemented by a Conn that follows an elected leader; the
// Client's Term, LeaderChanged and LeaderAddr are its.
type Follower interface {
	// Term is the newest leadership term seen (from the election or an
	// answer's TermTrailer).
	Term() uint64
	// LeaderChanged returns the term of the leader as last resolved and a
	// channel closed when the resolved leader changes.
	LeaderChanged() (term uint64, changed <-chan struct{})
	// LeaderAddr is the resolved leader's address ("" while none).
	LeaderAddr() string
}

// SchemeDialer opens the connection for an address of its scheme
// ("scheme://..."), with the Client's dial options (DefaultDialOptions
// and the caller's) for each master it connects to.
type SchemeDialer func(addr string, opts []grpc.DialOption) (Conn, error)

var (
	schemesMu sync.RWMutex // protects schemes
	schemes   = map[string]SchemeDialer{}
)

// RegisterScheme makes Dial accept addresses "scheme://...", opened by d.
// A package registers its scheme in its init function, so a program opts
// into it by importing that package (as package ha does for etcd://); a
// program that imports none links none. Registering a scheme twice panics.
func RegisterScheme(scheme string, d SchemeDialer) {
	schemesMu.Lock()
	defer schemesMu.Unlock()
	if _, dup := schemes[scheme]; dup {
		panic("mastergrpc: scheme " + scheme + " registered twice")
	}
	schemes[scheme] = d
}

func schemeDialer(scheme string) SchemeDialer {
	schemesMu.RLock()
	defer schemesMu.RUnlock()
	return schemes[scheme]
}
