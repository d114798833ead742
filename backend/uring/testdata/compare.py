#!/usr/bin/env python3
"""Run fio and the backend/uring Go benchmarks side by side, in rounds, on
the same directory, and print medians and ratios (markdown).

usage: compare.py [rounds]   (env TIERSTORE_BENCH_DIR: directory on the disk
                              under test; default /var/tmp)
Run from the repository root. Needs fio with the io_uring engine.
"""
import json, os, re, statistics, subprocess, sys, tempfile

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
base = os.environ.get("TIERSTORE_BENCH_DIR", "/var/tmp")
work = tempfile.mkdtemp(prefix="uring-compare-", dir=base)
env = dict(os.environ, TIERSTORE_BENCH_DIR=work)
testbin = os.path.join(work, "uring.test")
subprocess.run(["go", "test", "-c", "-o", testbin, "./backend/uring"], check=True)

res = {}  # name -> list of MB/s

def add(name, v):
    res.setdefault(name, []).append(v)

def fio(args):
    out = subprocess.run(["fio", "--output-format=json"] + args, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out[out.index("{"):])["jobs"][0]

def fio_write(mib):
    j = fio(["--name=w", "--directory=" + work, "--rw=write", "--bs=1M", "--direct=1",
             "--ioengine=io_uring", "--iodepth=16", "--size=%dM" % mib,
             "--fdatasync=%d" % mib, "--unlink=1"])
    # bytes over the job's wall time (writes and the final fdatasync)
    return j["write"]["io_bytes"] / (j["job_runtime"] / 1e3) / 1e6

def fio_randread(bs, path):
    j = fio(["--name=r", "--filename=" + path, "--rw=randread", "--bs=" + bs, "--direct=1",
             "--ioengine=io_uring", "--iodepth=32", "--size=256M", "--runtime=3", "--time_based"])
    return j["read"]["bw_bytes"] / 1e6

line = re.compile(r"^Benchmark(\S+?)-\d+\s+\d+\s+\d+ ns/op\s+([\d.]+) MB/s(?:\s+(\d+) cpu-ns/op)?")

def gobench(pattern, benchtime):
    out = subprocess.run([testbin, "-test.run", "^$", "-test.bench", pattern,
                          "-test.benchtime", benchtime], env=env, check=True,
                         capture_output=True, text=True).stdout
    for l in out.splitlines():
        m = line.match(l)
        if m:
            add(m.group(1), float(m.group(2)))
            if m.group(3):
                add("cpu:" + m.group(1), float(m.group(3)))

rfile = os.path.join(work, "fio-randread")
for r in range(rounds):
    print("round", r + 1, file=sys.stderr)
    for _ in range(4):
        add("fio/write/64MiB", fio_write(64))
    for _ in range(2):
        add("fio/write/256MiB", fio_write(256))
    gobench("WriteBucket", "4x")
    add("fio/randread/1MiB", fio_randread("1M", rfile))
    add("fio/randread/64KiB", fio_randread("64k", rfile))
    gobench("Read", "2s")
os.remove(rfile)

med = {k: statistics.median(v) for k, v in res.items()}
print("| benchmark | median MB/s | runs (MB/s) |")
print("|---|---|---|")
for k in sorted(med):
    if not k.startswith("cpu:"):
        print("| %s | %.0f | %s |" % (k, med[k], " ".join("%.0f" % x for x in res[k])))
print()
print("| comparison | uring | pwrite | fio | uring/fio | uring/pwrite | uring cpu-ms/op | pwrite cpu-ms/op |")
print("|---|---|---|---|---|---|---|---|")
def row(label, u, p, f):
    cu, cp = med.get("cpu:" + u, 0) / 1e6, med.get("cpu:" + p, 0) / 1e6
    print("| %s | %.0f | %.0f | %.0f | %.0f%% | %.2fx | %.1f | %.1f |" % (
        label, med[u], med[p], med[f], 100 * med[u] / med[f], med[u] / med[p], cu, cp))
for bucket in ("64MiB", "256MiB"):
    for obj in ("256KiB", "1MiB"):
        k = "WriteBucket/bucket=%s/obj=%s/" % (bucket, obj)
        row("write %s bucket, %s objects" % (bucket, obj), k + "uring+direct", k + "pwrite+direct", "fio/write/" + bucket)
for obj, f in (("1MiB", "fio/randread/1MiB"), ("64KiB", "fio/randread/64KiB")):
    for ops in ("32", "256"):
        k = "Read/obj=%s/ops=%s/" % (obj, ops)
        row("read %s objects, %s per Load, qd 32" % (obj, ops), k + "uring+direct", k + "pwrite+direct", f)
subprocess.run(["rm", "-rf", work])
