package bfile

// MaxIovecs bounds the iovecs of one vectored write (IOV_MAX on Linux).
const MaxIovecs = 1024

// NextIovecs appends to iov the non-empty slices at the front of data, at
// most MaxIovecs in iov and until they hold limit bytes or more. It returns
// iov, the rest of data and the number of bytes appended.
func NextIovecs(iov, data [][]byte, limit int64) ([][]byte, [][]byte, int64) {
	var n int64
	for len(data) > 0 && len(iov) < MaxIovecs && n < limit {
		if len(data[0]) > 0 {
			iov = append(iov, data[0])
			n += int64(len(data[0]))
		}
		data = data[1:]
	}
	return iov, data, n
}

// Advance drops the first n bytes of bufs, cutting its first slice in place.
func Advance(bufs [][]byte, n int) [][]byte {
	for n > 0 && len(bufs) > 0 {
		if n >= len(bufs[0]) {
			n -= len(bufs[0])
			bufs = bufs[1:]
		} else {
			bufs[0] = bufs[0][n:]
			n = 0
		}
	}
	return bufs
}
