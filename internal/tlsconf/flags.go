package tlsconf

import (
	"flag"
	"log/slog"
	"net"
	"net/netip"
)

// Register adds --tls_cert, --tls_key and --tls_ca to fs, stored in f.
func (f *Files) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.Cert, "tls_cert", "", "PEM certificate of this process for mutual TLS, naming its role as a SAN URI tierstore://role/client|node|master (with tls_key and tls_ca; empty: plaintext). Re-read when it changes")
	fs.StringVar(&f.Key, "tls_key", "", "PEM private key of tls_cert")
	fs.StringVar(&f.CA, "tls_ca", "", "PEM certificate(s) of the CA that signs every certificate of the cluster; peers are verified against it")
}

// Loopback reports whether host (an IP, "localhost", or host:port) names
// only this machine. An empty host or an unspecified address (every
// interface) is not loopback.
func Loopback(addr string) bool {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// WarnPlaintext logs one warning when a process serving what on addr
// without TLS binds an address other machines can reach.
func WarnPlaintext(log *slog.Logger, what, addr string) {
	if !Loopback(addr) {
		log.Warn("serving without TLS on a non-loopback address: anyone who reaches it can make every call (set --tls_cert, --tls_key, --tls_ca; docs/security.md)", "what", what, "address", addr)
	}
}
