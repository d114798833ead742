package uring

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// abiLayout is the kernel ABI (include/uapi/linux/io_uring.h): size of each
// struct and offset of each field, by the Go field name used here, with
// the C field name it corresponds to.
var abiLayout = []struct {
	typ    reflect.Type
	cName  string
	size   uintptr
	fields map[string]struct {
		c   string
		off uintptr
	}
}{
	{reflect.TypeFor[params](), "io_uring_params", 120, fieldsOf(
		"SQEntries:sq_entries:0", "CQEntries:cq_entries:4", "Flags:flags:8", "SQThreadCPU:sq_thread_cpu:12",
		"SQThreadIdle:sq_thread_idle:16", "Features:features:20", "WQFd:wq_fd:24", "Resv:resv:28",
		"SQOff:sq_off:40", "CQOff:cq_off:80")},
	{reflect.TypeFor[sqringOffsets](), "io_sqring_offsets", 40, fieldsOf(
		"Head:head:0", "Tail:tail:4", "RingMask:ring_mask:8", "RingEntries:ring_entries:12",
		"Flags:flags:16", "Dropped:dropped:20", "Array:array:24", "Resv1:resv1:28", "UserAddr:resv2:32")},
	{reflect.TypeFor[cqringOffsets](), "io_cqring_offsets", 40, fieldsOf(
		"Head:head:0", "Tail:tail:4", "RingMask:ring_mask:8", "RingEntries:ring_entries:12",
		"Overflow:overflow:16", "CQEs:cqes:20", "Flags:flags:24", "Resv1:resv1:28", "UserAddr:resv2:32")},
	{reflect.TypeFor[sqe](), "io_uring_sqe", 64, fieldsOf(
		"Opcode:opcode:0", "Flags:flags:1", "Ioprio:ioprio:2", "Fd:fd:4", "Off:off:8", "Addr:addr:16",
		"Len:len:24", "OpFlags:rw_flags:28", "UserData:user_data:32", "BufIndex:buf_index:40",
		"Personality:personality:42", "SpliceFdIn:splice_fd_in:44", "Addr3:addr3:48", "Pad2:__pad2:56")},
	{reflect.TypeFor[cqe](), "io_uring_cqe", 16, fieldsOf("UserData:user_data:0", "Res:res:8", "Flags:flags:12")},
	{reflect.TypeFor[probeHeader](), "io_uring_probe", 16, fieldsOf("LastOp:last_op:0", "OpsLen:ops_len:1", "Resv:resv:2", "Resv2:resv2:4")},
	{reflect.TypeFor[probeOp](), "io_uring_probe_op", 8, fieldsOf("Op:op:0", "Resv:resv:1", "Flags:flags:2", "Resv2:resv2:4")},
}

func fieldsOf(specs ...string) map[string]struct {
	c   string
	off uintptr
} {
	m := make(map[string]struct {
		c   string
		off uintptr
	})
	for _, s := range specs {
		p := strings.Split(s, ":")
		off, err := strconv.Atoi(p[2])
		if err != nil {
			panic(err)
		}
		m[p[0]] = struct {
			c   string
			off uintptr
		}{p[1], uintptr(off)}
	}
	return m
}

// abiConsts are the constants of <linux/io_uring.h> this package uses.
var abiConsts = []struct {
	name string
	val  int
}{
	{"IORING_OP_NOP", int(OpNop)}, {"IORING_OP_READV", int(OpReadv)}, {"IORING_OP_WRITEV", int(OpWritev)},
	{"IORING_OP_FSYNC", int(OpFsync)}, {"IORING_OP_READ_FIXED", int(OpReadFixed)},
	{"IORING_OP_WRITE_FIXED", int(OpWriteFixed)}, {"IORING_OP_READ", int(OpRead)}, {"IORING_OP_WRITE", int(OpWrite)},
	{"IORING_FSYNC_DATASYNC", int(FsyncDatasync)}, {"IORING_SETUP_CQSIZE", int(setupCQSize)},
	{"IORING_FEAT_SINGLE_MMAP", int(FeatSingleMmap)}, {"IORING_FEAT_NODROP", int(FeatNoDrop)},
	{"IORING_FEAT_NATIVE_WORKERS", int(FeatNativeWorkers)}, {"IORING_ENTER_GETEVENTS", int(enterGetEvents)},
	{"IORING_SQ_CQ_OVERFLOW", int(sqCQOverflow)}, {"IORING_REGISTER_BUFFERS", int(registerBuffers)},
	{"IORING_UNREGISTER_BUFFERS", int(unregisterBuffers)}, {"IORING_REGISTER_PROBE", int(registerProbe)},
	{"IORING_OFF_SQ_RING", int(offSQRing)}, {"IORING_OFF_CQ_RING", int(offCQRing)}, {"IORING_OFF_SQES", int(offSQEs)},
	{"IO_URING_OP_SUPPORTED", int(opSupported)},
}

// TestLayoutMatchesKernelABI checks the Go structs against the ABI values
// written down above: every field is listed, sizes and offsets agree.
func TestLayoutMatchesKernelABI(t *testing.T) {
	for _, want := range abiLayout {
		require.Equal(t, want.size, want.typ.Size(), "sizeof(struct %s)", want.cName)
		require.Equal(t, len(want.fields), want.typ.NumField(), "fields of %s", want.typ)
		for i := range want.typ.NumField() {
			f := want.typ.Field(i)
			w, ok := want.fields[f.Name]
			require.True(t, ok, "%s.%s not in the ABI table", want.typ, f.Name)
			require.Equal(t, w.off, f.Offset, "offsetof(struct %s, %s)", want.cName, w.c)
		}
	}
	require.Equal(t, uintptr(16+256*8), unsafe.Sizeof(struct {
		hdr probeHeader
		ops [256]probeOp
	}{}))
}

// TestLayoutMatchesCHeader compiles a C program against the system's
// <linux/io_uring.h> and compares its sizeof/offsetof with the Go structs.
// Skipped when no C compiler or header is installed.
func TestLayoutMatchesCHeader(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler")
	}
	if _, err := os.Stat("/usr/include/linux/io_uring.h"); err != nil {
		t.Skip("no <linux/io_uring.h>")
	}
	var src strings.Builder
	src.WriteString("#include <stdio.h>\n#include <stddef.h>\n#include <linux/io_uring.h>\nint main(void) {\n")
	for _, s := range abiLayout {
		fmt.Fprintf(&src, "printf(\"%s size %%zu\\n\", sizeof(struct %s));\n", s.cName, s.cName)
		for _, f := range s.fields {
			fmt.Fprintf(&src, "printf(\"%s %s %%zu\\n\", offsetof(struct %s, %s));\n", s.cName, f.c, s.cName, f.c)
		}
	}
	for _, c := range abiConsts {
		fmt.Fprintf(&src, "printf(\"const %s %%lld\\n\", (long long)(%s));\n", c.name, c.name)
	}
	src.WriteString("return 0;\n}\n")
	dir := t.TempDir()
	cfile, bin := filepath.Join(dir, "abi.c"), filepath.Join(dir, "abi")
	require.NoError(t, os.WriteFile(cfile, []byte(src.String()), 0o644))
	if out, err := exec.Command(cc, "-o", bin, cfile).CombinedOutput(); err != nil {
		t.Skipf("cannot compile against <linux/io_uring.h>: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	require.NoError(t, err)
	got := make(map[string]int)
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		v, err := strconv.Atoi(f[2])
		require.NoError(t, err)
		got[f[0]+" "+f[1]] = v
	}
	for _, s := range abiLayout {
		require.Equal(t, int(s.typ.Size()), got[s.cName+" size"], "sizeof(struct %s)", s.cName)
		for goName, f := range s.fields {
			sf, ok := s.typ.FieldByName(goName)
			require.True(t, ok)
			require.Equal(t, int(sf.Offset), got[s.cName+" "+f.c], "offsetof(struct %s, %s)", s.cName, f.c)
		}
	}
	for _, c := range abiConsts {
		v, ok := got["const "+c.name]
		require.True(t, ok, c.name)
		require.Equal(t, v, c.val, c.name)
	}
}
