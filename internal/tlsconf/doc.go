// Package tlsconf is tierstore's mutual TLS: it loads the certificate, key
// and CA of the --tls_cert, --tls_key and --tls_ca flags, re-reads them when
// they change on disk (rotation without restart), builds the server and
// client tls.Config of every tierstore connection (TLS 1.3 only, both sides
// present a certificate signed by the CA), and reads a peer's roles from its
// certificate.
//
// # Roles
//
// A certificate names the roles of its holder as SAN URIs
// tierstore://role/client, tierstore://role/node and tierstore://role/master
// (one certificate may carry several). A SAN URI rather than the subject's
// OU because: SANs are the field X.509 (RFC 5280) and the TLS libraries treat
// as the identity, the subject is legacy; a URI is typed and namespaced, so
// an OU "node" an operator's corporate CA puts in for its own reasons cannot
// be read as a tierstore role; several roles are several URIs, not a
// convention inside one string; and it is the SPIFFE shape (identity in a
// URI SAN, verified against the CA, hostnames not used), which service-mesh
// CAs issue already. A certificate without a tierstore role URI has no role
// and is refused (ErrNoRole).
//
// # Verification
//
// The server requires a client certificate and verifies it against the CA
// pool of the moment (crypto/tls's own verification, so the alert the client
// sees names the reason: unknown authority, expired). The client verifies the
// server's chain against the same CA pool and the role it expects of the
// server (a node when it dials a node, a master when it dials a master);
// hostnames are not checked: the CA is the trust boundary and every
// certificate it signs with a role is trusted in that role, whatever address
// it answers on (nodes announce IP endpoints; issuing a certificate per
// address would tie certificates to placement). Authorization per call is
// the caller's (Authorize for gRPC services, PeerRoles for the data plane).
//
// # Rotation
//
// Source stats the three files (size, modification time, inode) at each
// handshake, a few microseconds beside the handshake's signatures; when one
// changed it re-reads them.
// A pair that does not load (the certificate is new but the key not yet, a
// half-written file) leaves the previous one in use and is tried again at
// the next check, so a rotation written file by file never fails a
// handshake. Connections already established keep the certificate they
// were opened with.
//
// # The data plane
//
// A node's data plane (package wire, data plane 5) uses TLS for the
// handshake and the hellos only, then seals its records with keys it
// exports from the session (ExportKeyingMaterial); it needs the TLS 1.3
// these configurations insist on and refuses another version.
//
// Concurrency: a Source is safe for concurrent use; mu protects the loaded
// material, which handshakes read under it.
package tlsconf
