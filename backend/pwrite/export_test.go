package pwrite

// ForceDirect makes the backend believe O_DIRECT works, so that tests can
// exercise the fallback taken at WriteBucket or Read time (a file system that
// passed the probe at Open and refuses O_DIRECT later).
func (b *Backend) ForceDirect() { b.d.ForceDirect() }
