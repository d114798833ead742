"""Fixtures: REAL tierstore processes on 127.0.0.1, built from this tree.

The binaries are built once per session (`go build -o <tmp>/ ./cmd/...`);
each server is started with port 0 and its address read from its
"listening" line (bounded wait); every process this file starts is killed
at teardown (SIGTERM, then SIGKILL after 10 s). Nothing binds anything but
127.0.0.1.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYDIR = os.path.join(REPO, "python")
if PYDIR not in sys.path:
    sys.path.insert(0, PYDIR)

START_TIMEOUT = 60.0  # seconds for a server to print its listening line (CI: 2 loaded cores)


class Proc:
    """One server process; its stdout lines are collected by a reader thread."""

    def __init__(self, name, argv, env=None):
        self.name = name
        self.argv = argv
        self.lines = []                 # stdout+stderr lines so far (guarded by _cond)
        self._cond = threading.Condition()
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  env=env, start_new_session=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.p.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_line(self, pattern, timeout=START_TIMEOUT, start=0):
        """The first match of pattern in a line at index >= start; fails after timeout or if the process exits."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        i = start
        with self._cond:
            while True:
                while i < len(self.lines):
                    m = rx.search(self.lines[i])
                    if m:
                        return m
                    i += 1
                if self.p.poll() is not None and not self._reader.is_alive():
                    raise AssertionError(f"{self.name} exited ({self.p.returncode}) before printing {pattern!r}:\n"
                                         + "\n".join(self.lines[-20:]))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{self.name} printed no {pattern!r} in {timeout}s:\n"
                                         + "\n".join(self.lines[-20:]))
                self._cond.wait(min(left, 0.5))

    def kill(self, sig=signal.SIGKILL):
        if self.p.poll() is None:
            self.p.send_signal(sig)

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(10)
        self._reader.join(5)


@pytest.fixture(scope="session")
def binaries(tmp_path_factory):
    """{name: path} of tierstore, tierstore-master, tierstore-node, tierstore-etcd built from this tree."""
    out = tmp_path_factory.mktemp("bin")
    names = ["tierstore", "tierstore-master", "tierstore-node", "tierstore-etcd"]
    r = subprocess.run(["go", "build", "-o", str(out) + "/"] + [f"./cmd/{n}" for n in names],
                       cwd=REPO, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"go build failed:\n{r.stderr}"
    return {n: str(out / n) for n in names}


class Cluster:
    """A master and its nodes; addresses as "127.0.0.1:PORT"."""

    def __init__(self, binaries, tmp):
        self.bin = binaries
        self.tmp = tmp
        self.procs = []
        self.master = ""
        self.nodes = []  # peer addresses

    def start_master(self, *flags):
        p = Proc("tierstore-master", [self.bin["tierstore-master"], "--rpc_port=0", "--metrics_port=0", *flags])
        self.procs.append(p)
        return p, p.wait_line(r"tierstore-master listening on (\S+)").group(1)

    def start_node(self, master, memory="256MiB", ssd=True, *flags):
        argv = [self.bin["tierstore-node"], f"--master={master}", "--listen=127.0.0.1:0", f"--memory={memory}",
                "--heartbeat_interval=200ms"]
        if ssd:
            d = os.path.join(self.tmp, f"ssd{len(self.nodes)}")
            os.makedirs(d, exist_ok=True)
            argv += ["--enable_offload", f"--ssd_dir={d}"]
        p = Proc("tierstore-node", argv + list(flags))
        self.procs.append(p)
        addr = p.wait_line(r"tierstore-node listening on (\S+)").group(1)
        self.nodes.append(addr)
        return p, addr

    def cli(self, *args, timeout=60):
        """Run the tierstore command against this cluster's master; returns its CompletedProcess."""
        cmd, rest = args[0], args[1:]
        return subprocess.run([self.bin["tierstore"], cmd, "--master", self.master, *rest],
                              capture_output=True, text=True, timeout=timeout)

    def stop(self):
        for p in reversed(self.procs):
            p.stop()


@pytest.fixture(scope="session")
def cluster(binaries, tmp_path_factory):
    """One master (offload on) and one node of 256 MiB DRAM with an SSD tier, shared by the session.

    Tests use keys of their own (a prefix per test) so that they do not see each other's objects.
    """
    c = Cluster(binaries, str(tmp_path_factory.mktemp("cluster")))
    try:
        _, c.master = c.start_master("--enable_offload=true")
        c.start_node(c.master)
        yield c
    finally:
        c.stop()


@pytest.fixture
def ha_cluster(binaries, tmp_path):
    """tierstore-etcd, two masters with --enable_ha and one node on etcd://; .master is the etcd:// URL."""
    c = Cluster(binaries, str(tmp_path))
    try:
        etcd = Proc("tierstore-etcd", [binaries["tierstore-etcd"], "--data-dir", str(tmp_path / "etcd"),
                                       "--listen-client", "127.0.0.1:0"])
        c.procs.append(etcd)
        m = etcd.wait_line(r"tierstore-etcd listening on (\S+) master=(\S+)")
        endpoint, c.master = m.group(1), m.group(2)
        c.masters = []
        for _ in range(2):
            p, addr = c.start_master("--enable_ha=true", f"--etcd_endpoints={endpoint}", "--ha_session_ttl=1",
                                     "--enable_offload=true")
            c.masters.append(p)
        c.start_node(c.master, "128MiB", False)
        yield c
    finally:
        c.stop()


def leader(c, timeout=START_TIMEOUT):
    """The master Proc of c (an ha_cluster) that printed it leads, and has not printed a standby line since."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in c.masters:
            if p.p.poll() is not None:
                continue
            lead = [i for i, l in enumerate(p.lines) if " leading term=" in l]
            down = [i for i, l in enumerate(p.lines) if " standby (term" in l]
            if lead and (not down or down[-1] < lead[-1]):
                return p
        time.sleep(0.1)
    raise AssertionError("no master leads")
