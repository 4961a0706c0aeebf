#!/usr/bin/env python3
"""Real Dask clusters with every connection through `framewire tap`, and the
workloads, faults, soak and overhead runs that use them.

A cluster is a real ``dask scheduler`` (``python -m distributed.cli.dask_scheduler``),
real ``dask worker`` processes (``python -m distributed.cli.dask_worker --no-nanny``)
and a ``Client`` in this process. With ``--framewire BIN`` (a "tap cluster"), one
``framewire tap`` runs in front of the scheduler and one in front of each worker:

    client ──▶ tap-scheduler ──▶ scheduler ◀── tap-scheduler ◀── worker i
    worker j / scheduler / client ──▶ tap-wI ──▶ worker i

Each worker listens on a port of its own (``--listen-address``) and advertises its
tap's address (``--contact-address``), so the scheduler, the client and the other
workers only ever reach it through the tap. Without ``--framewire`` (a "direct
cluster") the same processes talk to each other directly.

Subcommands (each prints one JSON object on its last line; exit 0 = every check passed):

    workloads --dir DIR [--framewire BIN] [--scatter N] [--array-mb MB] [--map N]
        (a) scatter and gather of N small keys, (b) a dask.array reduction and rechunk
        over MB megabytes, (c) client.map over N tasks; every result checked here.
    faults --dir DIR --framewire BIN [--kill-mb MB]
        a worker killed in the middle of sending an MB-MiB array through its tap (the
        computation must complete on the remaining worker), then a client that sends
        half a message to the scheduler's tap and closes (the cluster must carry on).
    soak --dir DIR --framewire BIN [--minutes N] [--host ADDR] [--tcp-timeout S]
         [--partition-netns NS --partition-host ADDR] [...]
        mixed workloads in a loop on a tap cluster and a direct cluster, alternately;
        one tap-cluster worker killed and restarted midway; with --partition-netns,
        that worker (in namespace NS) cut off by a partition at two thirds and
        healed; the taps' logs and memory. Run by scripts/soak.
    overhead --dir DIR --mode direct --mode tap=BIN [--mode before=BIN] [--rounds N] [--array-mb MB]
        the dask.array workload on fresh clusters of each mode, interleaved; medians.
    idle-conns --upstream-listen PORT_FILE | --connect ADDR --count N
        helpers of scripts/tap-memory (a Dask listener; N idle Dask connections).

Every process this script starts dies with it (PR_SET_PDEATHSIG) and is killed when
a cluster closes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import json
import math
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import time

LOOPBACK = "127.0.0.1"
STARTUP = 120.0  # seconds a Dask process gets to come up on a loaded machine

_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


_handed_out: set[int] = set()


def free_port(host: str = LOOPBACK) -> int:
    """A port nothing listens on at `host`, for a worker to bind later (its
    tap is started first, in front of it). It is taken below the kernel's
    ephemeral range when there is room: a port from bind(0) is free only
    until another bind(0) or an outgoing connection takes it (a worker once
    failed with EADDRINUSE that way), and neither takes one from below that
    range. (Checked in this process's network namespace: for a worker in
    another one, a port below that range is free there as long as nothing
    but this script's processes run in it.)"""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    if low - 1024 >= 1000:
        rng = random.Random()
        for _ in range(1000):
            port = rng.randrange(max(1024, low - 20000), low)
            if port in _handed_out:
                continue
            with socket.socket() as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue
            _handed_out.add(port)
            return port
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def in_netns(netns: str | None, argv: list[str]) -> list[str]:
    """`argv` run inside the network namespace `netns` (`ip netns exec`,
    which execs it: the process is the program's own), or as it is."""
    return ["ip", "netns", "exec", netns, *argv] if netns else argv


def log(*args) -> None:
    print(*args, file=sys.stderr, flush=True)


class Proc:
    """A background process, output to DIR/NAME.log; killed by close()."""

    def __init__(self, name: str, argv: list[str], directory: str, env: dict | None = None):
        self.name = name
        self.argv = argv
        self.path = os.path.join(directory, f"{name}.log")
        self.out = open(self.path, "ab")
        self.p = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=self.out,
            stderr=subprocess.STDOUT,
            cwd=directory,
            env=env,
            preexec_fn=_die_with_parent,
        )

    @property
    def pid(self) -> int:
        return self.p.pid

    def text(self) -> str:
        with open(self.path, "r", errors="replace") as f:
            return f.read()

    def wait_for(self, pattern: str, timeout: float = STARTUP) -> re.Match:
        """The first match of `pattern` in the log; raises if the process exits first."""
        deadline = time.monotonic() + timeout
        rx = re.compile(pattern)
        while True:
            m = rx.search(self.text())
            if m:
                return m
            if self.p.poll() is not None:
                raise RuntimeError(f"{self.name} exited ({self.p.returncode}):\n{self.text()[-4000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: no /{pattern}/ after {timeout}s:\n{self.text()[-4000:]}")
            time.sleep(0.05)

    def kill(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()
        self.out.close()

    def alive(self) -> bool:
        return self.p.poll() is None


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


class Tap:
    """`framewire tap` in front of `upstream` (HOST:PORT), listening on
    `host` (in the network namespace `netns`, if given), logging to
    DIR/tap-NAME.log."""

    def __init__(self, framewire: str | list[str], name: str, upstream: str, directory: str,
                 host: str = LOOPBACK, netns: str | None = None):
        """`framewire`: the binary, or the binary and more `tap` options."""
        self.name = name
        self.log_path = os.path.join(directory, f"tap-{name}.log")
        binary, *options = [framewire] if isinstance(framewire, str) else framewire
        self.proc = Proc(
            f"tap-{name}.stderr",
            in_netns(netns, [binary, "tap", *options, "--listen", f"{host}:0", "--upstream", upstream,
                             "--log", self.log_path]),
            directory,
        )
        m = self.proc.wait_for(r"framewire tap: listening on ([0-9.]+:[0-9]+),", timeout=30)
        self.address = m.group(1)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def quiet(self) -> bool:
        """Whether every connection the tap opened has been logged closed."""
        with open(self.log_path, errors="replace") as f:
            text = f.read()
        return text.count(" open client=") == len(CLOSED_ANY.findall(text))

    def info(self) -> dict:
        return {"name": self.name, "log": self.log_path, "pid": self.pid, "address": self.address}


class Cluster:
    """A scheduler and `workers` workers (one thread each), through taps when
    `framewire` is given; a Client in this process.

    Every process listens on `host` (loopback by default), but the workers
    of `elsewhere` (index -> (network namespace, host)): those, and their
    taps, run in that namespace and listen on that host."""

    def __init__(self, directory: str, framewire: str | list[str] | None = None, workers: int = 2,
                 label: str = "", host: str = LOOPBACK,
                 elsewhere: dict[int, tuple[str, str]] | None = None):
        self.dir = directory
        self.framewire = framewire
        self.label = label
        self.host = host
        self.elsewhere = elsewhere or {}
        self.taps: dict[str, Tap] = {}
        self.procs: list[Proc] = []
        self.workers: dict[int, Proc] = {}
        self.worker_ports: dict[int, int] = {}
        self.worker_contact: dict[int, str] = {}
        self.client = None
        os.makedirs(directory, exist_ok=True)
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        try:
            self._start(workers)
        except BaseException:
            self.close()
            raise

    def _name(self, base: str) -> str:
        return f"{self.label}{base}"

    def _start(self, n: int) -> None:
        py = sys.executable
        sched = Proc(
            self._name("scheduler"),
            [py, "-m", "distributed.cli.dask_scheduler", "--host", self.host, "--port", "0", "--no-dashboard"],
            self.dir,
            self.env,
        )
        self.procs.append(sched)
        self.scheduler = sched
        port = sched.wait_for(r"Scheduler at:\s+tcp://[0-9.]+:(\d+)").group(1)
        self.scheduler_real = f"{self.host}:{port}"
        if self.framewire:
            tap = Tap(self.framewire, self._name("scheduler"), self.scheduler_real, self.dir, self.host)
            self.taps["scheduler"] = tap
            self.scheduler_address = f"tcp://{tap.address}"
        else:
            self.scheduler_address = f"tcp://{self.scheduler_real}"
        for i in range(n):
            netns, host = self.worker_place(i)
            self.worker_ports[i] = free_port(self.host)
            real = f"{host}:{self.worker_ports[i]}"
            if self.framewire:
                tap = Tap(self.framewire, self._name(f"w{i}"), real, self.dir, host, netns)
                self.taps[f"w{i}"] = tap
                self.worker_contact[i] = f"tcp://{tap.address}"
            else:
                self.worker_contact[i] = f"tcp://{real}"
            self.start_worker(i, wait=False)
        for i in range(n):
            self.workers[i].wait_for(r"Registered to:")
        from distributed import Client

        self.client = Client(self.scheduler_address, timeout="60s")
        self.client.wait_for_workers(n, timeout=STARTUP)
        # The workers registered with their taps' addresses.
        registered = set(self.client.scheduler_info()["workers"])
        expected = set(self.worker_contact.values())
        if registered != expected:
            raise RuntimeError(f"workers registered as {registered}, expected {expected}")

    def worker_place(self, i: int) -> tuple[str | None, str]:
        """Worker `i`'s network namespace (None: this process's) and host."""
        return self.elsewhere.get(i, (None, self.host))

    def start_worker(self, i: int, wait: bool = True) -> None:
        py = sys.executable
        local = os.path.join(self.dir, self._name(f"w{i}-space"))
        os.makedirs(local, exist_ok=True)
        netns, host = self.worker_place(i)
        w = Proc(
            self._name(f"w{i}"),
            in_netns(netns, [
                py, "-m", "distributed.cli.dask_worker", self.scheduler_address,
                "--no-nanny", "--nthreads", "1", "--name", f"w{i}", "--no-dashboard",
                "--memory-limit", "0", "--local-directory", local,
                "--listen-address", f"tcp://{host}:{self.worker_ports[i]}",
                "--contact-address", self.worker_contact[i],
            ]),
            self.dir,
            self.env,
        )
        self.procs.append(w)
        self.workers[i] = w
        if wait:
            w.wait_for(r"Registered to:")

    def kill_worker(self, i: int) -> None:
        self.workers[i].kill()

    def restart_worker(self, i: int) -> None:
        before = len(self.client.scheduler_info()["workers"])
        # The killed worker's port may linger a moment in the kernel.
        self.start_worker(i, wait=True)
        self.client.wait_for_workers(before + 1, timeout=STARTUP)

    def tap_pids(self) -> dict[str, int]:
        return {n: t.pid for n, t in self.taps.items()}

    def info(self) -> dict:
        return {
            "scheduler": self.scheduler_address,
            "workers": dict(self.worker_contact),
            "taps": [t.info() for t in self.taps.values()],
        }

    def close(self) -> None:
        """Shuts the cluster down cleanly, in an order where nothing tries to
        reconnect to a process that is gone: the client closes, then the
        workers (SIGTERM: `dask worker` closes and unregisters), then the
        scheduler (SIGTERM). Waits (bounded) until every tap has logged the
        close of every connection it opened, then kills whatever is left."""
        if self.client is not None:
            with contextlib.suppress(Exception):
                self.client.close(timeout=10)
            self.client = None
            deadline = time.monotonic() + 30
            for group in (list(self.workers.values()), [self.scheduler]):
                for p in group:
                    if p.alive():
                        p.p.send_signal(signal.SIGTERM)
                for p in group:
                    while p.alive() and time.monotonic() < deadline:
                        time.sleep(0.05)
            for t in self.taps.values():
                while not t.quiet() and time.monotonic() < deadline:
                    time.sleep(0.05)
        for p in reversed(self.procs):
            p.kill()
        for t in self.taps.values():
            t.proc.kill()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ============================================================================
# Workloads: each checks its own results and returns (checks, details)
# ============================================================================


def inc(x):
    return x + 1


def scatter_gather(client, n: int) -> dict:
    """(a) `client.scatter(list(range(n)))` (one `scatter` message of 2n+1
    frames to the scheduler), then `client.gather` of the n futures (the
    scheduler gathers them from the workers and replies with 2n+1 frames)."""
    data = list(range(n))
    t0 = time.perf_counter()
    futures = client.scatter(data)
    t1 = time.perf_counter()
    back = client.gather(futures)
    t2 = time.perf_counter()
    ok = back == data
    del futures, back
    return {
        "checks": {"scatter_gather": ok},
        "scatter_s": round(t1 - t0, 3),
        "gather_s": round(t2 - t1, 3),
        "keys": n,
    }


def array_side(mb: float) -> int:
    """The side of a square float64 array of about `mb` megabytes (10^6 bytes),
    a multiple of 8 (eight chunks per side)."""
    side = int(math.sqrt(mb * 1e6 / 8))
    return max(8, side - side % 8)


def array_workload(client, mb: float) -> dict:
    """(b) A float64 array x[i, j] = i * side + j of about `mb` MB in row chunks,
    persisted on the workers; its sum and column sums (reductions); then a
    rechunk to column chunks (every output chunk gathers a piece of every
    input chunk: all-to-all transfers between the workers) checked element by
    element against the same formula computed in column chunks."""
    import dask.array as da

    n = array_side(mb)
    c = n // 8
    t0 = time.perf_counter()
    # Collections compute on the current client: this one (another
    # cluster's client may be the default).
    with client.as_current():
        rows = da.arange(n, chunks=c, dtype="f8")[:, None]
        x = (rows * n + da.arange(n, chunks=n, dtype="f8")[None, :]).persist()
        total = x.sum().compute()
        colsums = x.sum(axis=0).compute()
        y = x.rechunk((n, c))
        expected = da.arange(n, chunks=n, dtype="f8")[:, None] * n + da.arange(n, chunks=c, dtype="f8")[None, :]
        mismatch = abs(y - expected).max().compute()
    t1 = time.perf_counter()
    import numpy as np

    big = n * n
    j = np.arange(n, dtype="f8")
    checks = {
        # Integers below 2^53: every partial sum is exact.
        "array_sum": float(total) == big * (big - 1) / 2,
        "array_colsums": bool(np.array_equal(colsums, n * (n * (n - 1) / 2) + n * j)),
        "array_rechunk": float(mismatch) == 0.0,
    }
    del x, y
    return {"checks": checks, "array_s": round(t1 - t0, 3), "array_bytes": big * 8, "side": n}


def map_workload(client, n: int) -> dict:
    """(c) `client.map(inc, range(n))`, their sum on the cluster, and a gather."""
    t0 = time.perf_counter()
    futures = client.map(inc, range(n))
    total = client.submit(sum, futures).result()
    back = client.gather(futures)
    t1 = time.perf_counter()
    checks = {
        "map_sum": total == n * (n + 1) // 2,
        "map_gather": back == [i + 1 for i in range(n)],
    }
    del futures
    return {"checks": checks, "map_s": round(t1 - t0, 3), "tasks": n}


def merge(results: list[dict]) -> dict:
    out = {"checks": {}}
    for r in results:
        out["checks"].update(r.pop("checks"))
        out.update(r)
    out["ok"] = all(out["checks"].values())
    return out


# ============================================================================
# Tap logs
# ============================================================================

MSG = re.compile(r" conn=(\d+) (c->u|u->c) op=(\S+) frames=(\d+) bytes=(\d+)")
CLOSED = re.compile(r" conn=(\d+) closed(.*)$")
CLOSED_ANY = re.compile(r" conn=\d+ closed", re.M)


def read_tap_log(path: str) -> dict:
    """Counts of a tap's log: messages, bytes, errors, closes by reason, and
    the bytes the tap copied and spliced (from the close lines)."""
    msgs = 0
    wire = 0
    errors = []
    reasons: dict[str, int] = {}
    copied = spliced = 0
    max_frames = 0
    ops: dict[str, int] = {}
    with open(path, errors="replace") as f:
        for line in f:
            m = MSG.search(line)
            if m:
                msgs += 1
                wire += int(m.group(5))
                max_frames = max(max_frames, int(m.group(4)))
                for run in m.group(3).split(","):
                    op, _, k = run.partition("*")
                    ops[op] = ops.get(op, 0) + (int(k) if k.isdigit() else 1)
                continue
            if " error" in line:
                errors.append(line.rstrip("\n"))
            c = CLOSED.search(line)
            if c:
                fields = dict(w.split("=", 1) for w in c.group(2).split() if "=" in w)
                reason = fields.get("reason", "error")
                reasons[reason] = reasons.get(reason, 0) + 1
                copied += int(fields.get("copied", 0))
                spliced += int(fields.get("spliced", 0))
    return {
        "messages": msgs,
        "bytes": wire,
        "errors": errors,
        "closes": reasons,
        "copied": copied,
        "spliced": spliced,
        "max_frames": max_frames,
        "ops": ops,
    }


# ============================================================================
# Subcommands
# ============================================================================


def cmd_workloads(a) -> int:
    with Cluster(a.dir, a.framewire) as cl:
        client = cl.client
        results = []
        if a.scatter:
            results.append(scatter_gather(client, a.scatter))
        if a.array_mb:
            results.append(array_workload(client, a.array_mb))
        if a.map:
            results.append(map_workload(client, a.map))
        out = merge(results)
        out["cluster"] = cl.info()
        out["workers_end"] = len(client.scheduler_info()["workers"])
    print(json.dumps(out), flush=True)
    return 0 if out["ok"] else 1


def make_array(nbytes: int, seed: int):
    import numpy as np

    return np.random.default_rng(seed).integers(0, 255, nbytes, dtype="u1")


def digest(arr) -> str:
    import hashlib

    return hashlib.sha256(arr.tobytes()).hexdigest()


def wait_log_line(path: str, pattern: re.Pattern, after: int, timeout: float) -> tuple[str, int]:
    """Polls `path` (every millisecond) for a line matching `pattern` past byte
    offset `after`; returns the line and its end offset."""
    deadline = time.monotonic() + timeout
    pos = after
    pending = b""
    while time.monotonic() < deadline:
        with open(path, "rb") as f:
            f.seek(pos)
            chunk = f.read()
        if chunk:
            pos += len(chunk)
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for i, line in enumerate(lines):
                text = line.decode(errors="replace")
                if pattern.search(text):
                    end = pos - len(pending) - sum(len(x) + 1 for x in lines[i + 1:])
                    return text, end
        time.sleep(0.001)
    raise RuntimeError(f"no /{pattern.pattern}/ in {path} after {timeout}s")


def cmd_faults(a) -> int:
    """Fault 1: worker w0 holds an array of `kill_mb` MiB; a task pinned to w1
    needs it, so w1 fetches it from w0 through tap-w0 (`get_data`, answered by
    one message of about that size). When tap-w0 logs the answer's first line
    (logged once frame 0 is in, before the payload is relayed), w0 is killed:
    the transfer breaks in the middle. Dask must recompute the array on w1 and
    finish; tap-w0 must show that connection ended abnormally, the other taps
    nothing of the kind, and the client's connection must carry on.

    Fault 2: a raw TCP client sends the handshake and half of a message to the
    scheduler's tap, then closes; the cluster must carry on (a computation
    after it, through the same tap)."""
    out: dict = {"checks": {}}
    nbytes = int(a.kill_mb * (1 << 20))
    with Cluster(a.dir, a.framewire) as cl:
        client = cl.client
        w0, w1 = cl.worker_contact[0], cl.worker_contact[1]
        # Warm up both workers (numpy imported, connections open).
        warm = client.map(inc, range(4), workers=[w0], pure=False)
        warm += client.map(inc, range(4), workers=[w1], pure=False)
        client.gather(warm)
        del warm

        src = client.submit(make_array, nbytes, 2026, workers=[w0], allow_other_workers=True)
        # Wait until it is in w0's memory without fetching it to the client.
        from distributed import wait

        wait(src)
        expected = digest(make_array(nbytes, 2026))
        tap_w0 = cl.taps["w0"].log_path
        start = os.path.getsize(tap_w0)
        t_kill = None
        fut = client.submit(digest, src, workers=[w1], allow_other_workers=True)
        # The get_data answer: u->c, about nbytes on the wire.
        answer = re.compile(r" u->c op=\S+ frames=\d+ bytes=(\d+)")
        while True:
            line, start = wait_log_line(tap_w0, answer, start, timeout=120)
            if int(answer.search(line).group(1)) >= nbytes:
                break
        cl.kill_worker(0)
        t_kill = time.time()
        out["kill_line"] = line
        result = fut.result(timeout=300)
        t_done = time.time()
        out["checks"]["recomputed"] = result == expected
        who = client.who_has(fut)
        out["checks"]["on_w1"] = [tuple(v) for v in who.values()] == [(w1,)]
        out["recovery_s"] = round(t_done - t_kill, 3)
        out["kill_time"] = t_kill
        # The cluster carries on: a computation on w1, through the taps.
        more = client.map(inc, range(100), pure=False)
        out["checks"]["after_kill"] = sum(client.gather(more)) == sum(range(1, 101))
        del more, fut, src

        # Fault 2: half a message to the scheduler, then close.
        host, port = cl.taps["scheduler"].address.split(":")
        out["half_message_time"] = time.time()
        out["half_message"] = half_message(host, int(port))
        time.sleep(0.5)
        more = client.map(inc, range(100), pure=False)
        out["checks"]["after_half_message"] = sum(client.gather(more)) == sum(range(1, 101))
        del more
        out["workers_end"] = sorted(client.scheduler_info()["workers"])
        out["cluster"] = cl.info()
        out["w0_pid"] = cl.workers[0].pid
    out["ok"] = all(out["checks"].values())
    print(json.dumps(out), flush=True)
    return 0 if out["ok"] else 1


def dask_message(frames: list[bytes]) -> bytes:
    """Dask's framing of one message (SPEC.md §2): every frame in the first read."""
    import struct

    head = struct.pack("<Q", len(frames)) + b"".join(struct.pack("<Q", len(f)) for f in frames)
    body = b"".join(frames)
    return struct.pack("<Q", len(head) + len(body)) + head + body


def half_message(host: str, port: int) -> dict:
    """Connects, exchanges Dask handshakes, sends the first half of an
    `identity` message (declared in full), and closes. Returns the local
    port, the bytes of the message sent and its size."""
    import msgpack

    s = socket.create_connection((host, port), timeout=30)
    hs = msgpack.packb({"compression": None, "python": list(sys.version_info[:3]), "pickle-protocol": 5})
    s.sendall(dask_message([hs]))
    # Their handshake: read the prelude, then the frames.
    import struct

    def read_exact(n):
        buf = b""
        while len(buf) < n:
            got = s.recv(n - len(buf))
            if not got:
                raise RuntimeError("closed during the handshake")
            buf += got
        return buf

    first = struct.unpack("<Q", read_exact(8))[0]
    read_exact(first)
    msg = dask_message([msgpack.packb({"op": "identity", "reply": True}), b"x" * 100_000])
    sent = len(msg) // 2
    s.sendall(msg[:sent])
    port = s.getsockname()[1]
    s.close()
    return {"port": port, "sent": sent, "total": len(msg)}


def vmrss_all(pids: dict[str, int]) -> dict[str, int]:
    return {n: rss_kib(p) for n, p in pids.items()}


def soak_iteration(client, a) -> dict:
    results = [
        scatter_gather(client, a.scatter),
        array_workload(client, a.array_mb),
        map_workload(client, a.map),
    ]
    return merge(results)


def log_time(line: str) -> float:
    """Seconds since the epoch of a tap log line's timestamp."""
    import datetime

    stamp = line.split(" ", 1)[0]
    return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc
    ).timestamp()


def soak_events(path: str, windows: dict[str, tuple[float, float]]) -> dict:
    """A tap log's error lines and its closes other than `eof` (`reset`,
    `truncated`, `peer-timeout`), split by the fault window they happened in
    (`windows`: name -> (start, end), e.g. the killed worker's: from the
    kill to a little after its restart) or outside them all."""
    out: dict = {"windows": {w: {"errors": [], "resets": 0, "truncated": 0, "peer_timeouts": 0} for w in windows},
                 "errors_outside": [], "resets_outside": [], "truncated_outside": [], "peer_timeouts_outside": []}
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if MSG.search(line):
                continue
            t = log_time(line)
            inside = next((w for w, (t0, t1) in windows.items() if t0 <= t <= t1), None)
            if " error" in line:
                (out["windows"][inside]["errors"] if inside else out["errors_outside"]).append(line)
                continue
            c = CLOSED.search(line)
            for reason, key in (("reset", "resets"), ("truncated", "truncated"), ("peer-timeout", "peer_timeouts")):
                if c and f"reason={reason}" in c.group(2):
                    if inside:
                        out["windows"][inside][key] += 1
                    else:
                        out[f"{key}_outside"].append(line)
    return out


OPEN = re.compile(r" conn=(\d+) open client=(\S+):\d+ ")


def closes_across_the_cut(path: str, far_host: str, far_tap: bool, cut: float, bound: float) -> dict:
    """The connections of a tap's log that crossed a partition and were open
    when it began at `cut`: how many, how many were logged closed within
    `bound` seconds of it, why, and when. `far_host`: the address of the
    side that was cut off; `far_tap`: whether the tap is on that side (its
    clients from elsewhere crossed), or not (its clients from there did)."""
    opened: dict[str, tuple[float, str]] = {}
    ends: dict[str, tuple[float, str, str]] = {}
    with open(path, errors="replace") as f:
        for line in f:
            if MSG.search(line):
                continue
            o = OPEN.search(line)
            if o:
                opened[o.group(1)] = (log_time(line), o.group(2))
                continue
            c = CLOSED.search(line)
            if c:
                fields = dict(w.split("=", 1) for w in c.group(2).split() if "=" in w)
                ends[c.group(1)] = (log_time(line), fields.get("reason", "error"), line.rstrip("\n"))
    across = [conn for conn, (t, client) in opened.items()
              if t < cut and (client == far_host) != far_tap and not (conn in ends and ends[conn][0] < cut)]
    delays = {conn: round(ends[conn][0] - cut, 3) for conn in across if conn in ends}
    reasons: dict[str, int] = {}
    for conn in delays:
        reasons[ends[conn][1]] = reasons.get(ends[conn][1], 0) + 1
    late = [conn for conn in across if delays.get(conn, math.inf) > bound]
    return {
        "open_at_cut": len(across),
        "closed_within_bound": len(across) - len(late),
        "reasons": reasons,
        "first_s": min(delays.values(), default=None),
        "last_s": max(delays.values(), default=None),
        "late": [ends[conn][2] if conn in ends else f"conn={conn} never logged closed" for conn in late][:10],
    }


def dask_log_time(line: str) -> float:
    """Seconds since the epoch of a Dask log line's timestamp (local time,
    `2026-12-02 20:09:21,308 - distributed...`)."""
    stamp, ms = line[:23].split(",")
    return time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) + int(ms) / 1000


def comm_tcp_timeout():
    """This process's `distributed.comm.timeouts.tcp`, in seconds."""
    import dask
    from dask.utils import parse_timedelta

    return parse_timedelta(dask.config.get("distributed.comm.timeouts.tcp"), default="seconds")


def tcp_timeouts(client) -> dict:
    """`distributed.comm.timeouts.tcp` in the client, its scheduler and its workers."""
    return {"client": comm_tcp_timeout(), "scheduler": client.run_on_scheduler(comm_tcp_timeout),
            **client.run(comm_tcp_timeout)}


def ip_link(netns: str, dev: str, state: str) -> float:
    """Sets `dev` `state` (up, down) inside the network namespace `netns`;
    returns the time it was done."""
    subprocess.run(["ip", "-n", netns, "link", "set", dev, state], check=True)
    return time.time()


def partition_phase(cl: Cluster, a) -> dict:
    """w1 of `cl` (with its tap, alone in the network namespace
    `a.partition_netns`) is cut off for `a.partition_s` seconds: its end of
    the link set down inside its namespace, then up again, while the array
    and map workloads run in a loop on the cluster (checked, each one; not
    scatter/gather, as in the kill: a scattered key has no lineage, so Dask
    loses it, by design, with the only worker that held it). Who
    noticed and when: the scheduler removing w1 (polled), every connection
    across the cut each tap had open (its close line), w1 itself (whether it
    left, as a Dask worker that lost its scheduler does). Recovery: w1, once
    gone, is started again after the heal, as its nanny would (this cluster
    runs `dask worker --no-nanny`), and must register again and hold keys.
    Results in a dict; its "checks" say whether each of it went right."""
    import threading

    client = cl.client
    bound = a.tcp_timeout + 5
    w1 = cl.worker_contact[1]
    out: dict = {"netns": a.partition_netns, "dev": a.partition_dev, "tcp_timeout_s": a.tcp_timeout,
                 "bound_s": bound, "checks": {}}
    results: list[dict] = []
    stop = threading.Event()

    def work():
        while not stop.is_set():
            t0 = time.time()
            try:
                r = merge([array_workload(client, a.array_mb), map_workload(client, a.map)])
            except Exception as e:  # noqa: BLE001
                r = {"ok": False, "error": repr(e)}
            results.append({"start": t0, "end": time.time(), "ok": r["ok"],
                            **({} if r["ok"] else {"detail": r.get("error") or r.get("checks")})})

    th = threading.Thread(target=work, daemon=True)
    th.start()
    time.sleep(a.kill_after)
    w1_proc = cl.workers[1]
    w1_log_at_cut = os.path.getsize(w1_proc.path)
    sched_log_at_cut = os.path.getsize(cl.scheduler.path)
    cut = out["start"] = ip_link(a.partition_netns, a.partition_dev, "down")
    log(f"soak: partition: {a.partition_dev} down in {a.partition_netns} (w1 and its tap cut off)")
    removed = exited = None
    while time.time() < cut + a.partition_s:
        if removed is None and w1 not in client.scheduler_info()["workers"]:
            removed = time.time()
            log(f"soak: partition: the scheduler removed w1 after {removed - cut:.1f} s")
        if exited is None and not w1_proc.alive():
            exited = time.time()
        time.sleep(0.2)
    heal = out["end"] = ip_link(a.partition_netns, a.partition_dev, "up")
    log(f"soak: partition: healed after {heal - cut:.1f} s")
    # w1 leaves by itself once it has lost its scheduler (a Dask worker
    # closes then): it has had time to; then it is started again.
    deadline = heal + 60
    while exited is None and time.time() < deadline:
        if not w1_proc.alive():
            exited = time.time()
        time.sleep(0.2)
    left = exited is not None
    if not left:
        w1_proc.kill()
    w1_proc.out.close()
    with open(w1_proc.path, errors="replace") as f:
        f.seek(w1_log_at_cut)
        w1_lines = [x.rstrip("\n") for x in f if " - distributed." in x]
    with open(cl.scheduler.path, errors="replace") as f:
        f.seek(sched_log_at_cut)
        sched_lines = [x.rstrip("\n") for x in f if "Remove worker" in x and w1 in x]
    stopping = next((dask_log_time(x) for x in w1_lines if "Stopping worker" in x), None)
    out["noticed"] = {
        "scheduler": {"removed_after_s": None if removed is None else round(removed - cut, 3),
                      "log": sched_lines[:2]},
        "w1": {"stopping_after_s": None if stopping is None else round(stopping - cut, 3),
               "left_after_s": None if exited is None else round(exited - cut, 3),
               "exit_status": w1_proc.p.returncode, "left_by_itself": left, "log": w1_lines[:8]},
    }
    cl.restart_worker(1)
    registered = time.time()
    log(f"soak: partition: w1 restarted (pid {cl.workers[1].pid}), registered {registered - heal:.1f} s after the heal")
    # It takes work again: tasks only it may run, their results held there.
    futures = client.map(inc, range(200), workers=[w1], allow_other_workers=False, pure=False)
    held = client.gather(futures) == [i + 1 for i in range(200)]
    holders = {tuple(v) for v in client.who_has(futures).values()}
    w1_keys = len(client.has_what().get(w1, ()))
    del futures
    out["recovery"] = {
        "how": ("w1 left by itself; restarted by this harness after the heal, as its nanny would restart it"
                if left else "w1 did not leave by itself: killed and restarted after the heal"),
        "registered_after_heal_s": round(registered - heal, 3),
        "tasks_on_w1_right": held,
        "keys_held_by_w1": w1_keys,
    }
    # The workloads run on across the heal and the restart: one more
    # begins after it, then they stop.
    wait_until = time.monotonic() + 900
    while not any(r["start"] > registered for r in results) and th.is_alive() and time.monotonic() < wait_until:
        time.sleep(0.2)
    stop.set()
    th.join(timeout=900)
    out["workloads_stopped"] = time.time()
    spanning = [r for r in results if r["start"] < cut < r["end"]]
    out["workloads"] = {
        "n": len(results),
        "ok": sum(r["ok"] for r in results),
        "across_the_cut": len(spanning),
        "during_the_partition": sum(r["start"] < heal and r["end"] > cut for r in results),
        "after_the_restart": sum(r["start"] > registered for r in results),
        "failed": [r for r in results if not r["ok"]][:5],
    }
    out["checks"]["partition_noticed_by_the_scheduler"] = removed is not None and removed - cut <= bound
    # w1 noticed too: it lost its scheduler stream and closed (its log's
    # "Stopping worker" line), and left.
    out["checks"]["partition_noticed_by_w1"] = left and stopping is not None and stopping - cut <= bound
    out["checks"]["partition_recovered"] = (held and holders == {(w1,)} and w1_keys >= 200)
    out["checks"]["partition_workloads"] = bool(
        not th.is_alive() and results and all(r["ok"] for r in results) and spanning
        and out["workloads"]["after_the_restart"] >= 1)
    return out


def cmd_soak(a) -> int:
    """Mixed workloads in a loop on a tap cluster and a direct cluster,
    alternately (the order swapped every iteration), for `a.minutes`; at
    half time, w1 of the tap cluster is killed while an array and a map
    workload run (Dask recomputes what it held), then restarted; at two
    thirds, with `--partition-netns`, w1 is cut off by a partition
    (`partition_phase`)."""
    import threading

    partition = bool(a.partition_netns)
    if partition and not (a.partition_host and a.tcp_timeout):
        raise SystemExit("soak: --partition-netns needs --partition-host and --tcp-timeout")
    if a.tcp_timeout:
        # Every Dask process of the soak (they inherit it) and this one.
        os.environ["DASK_DISTRIBUTED__COMM__TIMEOUTS__TCP"] = f"{a.tcp_timeout}s"
    framewire = [a.framewire, "--tcp-timeout", str(a.tcp_timeout)] if a.tcp_timeout else a.framewire
    elsewhere = {1: (a.partition_netns, a.partition_host)} if partition else {}
    tap_dir = os.path.join(a.dir, "taps")
    direct_dir = os.path.join(a.dir, "direct")
    report: dict = {"iterations": [], "rss_kib": {}, "checks": {}, "sizes": {
        "scatter_keys": a.scatter, "array_mb": a.array_mb, "map_tasks": a.map}}
    log(f"soak: {a.minutes} min; each iteration: scatter/gather {a.scatter} keys, "
        f"array {a.array_mb} MB, map {a.map} tasks")
    with Cluster(tap_dir, framewire, host=a.host, elsewhere=elsewhere) as taps, \
            Cluster(direct_dir, None, host=a.host) as direct:
        pids = taps.tap_pids()
        if a.tcp_timeout:
            seen = {"taps": tcp_timeouts(taps.client), "direct": tcp_timeouts(direct.client)}
            report["tcp_timeout_s"] = seen
            report["checks"]["tcp_timeout_everywhere"] = all(
                v == a.tcp_timeout for c in seen.values() for v in c.values())
        t_start = time.monotonic()
        deadline = t_start + a.minutes * 60
        killed = False
        partitioned = not partition
        after_partition = 0
        all_ok = True
        i = 0
        while time.monotonic() < deadline or i < 2 or not killed or not partitioned or (
                partition and after_partition < 1):
            pair = [("taps", taps), ("direct", direct)]
            for mode, cl in pair if i % 2 == 0 else pair[::-1]:
                t0 = time.perf_counter()
                r = soak_iteration(cl.client, a)
                wall = time.perf_counter() - t0
                all_ok &= r["ok"]
                entry = {"i": i, "mode": mode, "wall_s": round(wall, 3), "ok": r["ok"]}
                if not r["ok"]:
                    entry["checks"] = r["checks"]
                report["iterations"].append(entry)
                log(f"soak: iteration {i:3} {mode:6} {wall:7.2f}s ok={r['ok']}")
            if i == 0:
                report["rss_kib"]["start"] = vmrss_all(pids)
            i += 1
            elapsed = time.monotonic() - t_start
            if killed and partitioned:
                after_partition += 1
            if killed and not partitioned and elapsed >= a.minutes * 60 * 2 / 3:
                report["partition"] = partition_phase(taps, a)
                report["checks"].update(report["partition"].pop("checks"))
                partitioned = True
            if not killed and elapsed >= a.minutes * 60 / 2:
                report["rss_kib"]["middle"] = vmrss_all(pids)
                # Kill w1 of the tap cluster while work is running on both
                # workers (array chunks and mapped results are recomputed).
                outcome: dict = {}

                def work():
                    try:
                        outcome["r"] = merge([array_workload(taps.client, a.array_mb),
                                              map_workload(taps.client, a.map)])
                    except Exception as e:  # noqa: BLE001
                        outcome["error"] = repr(e)

                th = threading.Thread(target=work)
                th.start()
                time.sleep(a.kill_after)
                report["kill_time"] = time.time()
                taps.kill_worker(1)
                log(f"soak: killed w1 of the tap cluster (pid {taps.workers[1].pid})")
                th.join(timeout=900)
                ok = not th.is_alive() and "r" in outcome and outcome["r"]["ok"]
                report["checks"]["workload_across_the_kill"] = ok
                if not ok:
                    report["kill_outcome"] = outcome.get("error") or outcome.get("r")
                taps.restart_worker(1)
                report["restart_time"] = time.time()
                log(f"soak: restarted w1 (pid {taps.workers[1].pid}); the workload across the kill: ok={ok}")
                killed = True
        report["rss_kib"]["end"] = vmrss_all(pids)
        report["minutes"] = round((time.monotonic() - t_start) / 60, 2)
        logs = {n: t.log_path for n, t in taps.taps.items()}
    # The clusters are shut down: every close is in the logs.
    windows = {"kill": (report.get("kill_time", 0), report.get("restart_time", 0) + 5)}
    if partition:
        p = report["partition"]
        windows["partition"] = (p["start"], p["workloads_stopped"] + 5)
        # Across the cut: connections from w1's address to the taps on
        # this side, and to w1's tap from any other.
        p["noticed"]["taps"] = {n: closes_across_the_cut(path, a.partition_host, n == "w1", p["start"], p["bound_s"])
                                for n, path in logs.items()}
        # Every connection across the cut was closed within the bound, and
        # the scheduler's tap closed w1's (its scheduler stream, at least)
        # when w1 stopped answering.
        report["checks"]["partition_noticed_by_the_taps"] = all(
            t["closed_within_bound"] == t["open_at_cut"] for t in p["noticed"]["taps"].values()
        ) and p["noticed"]["taps"]["scheduler"]["reasons"].get("peer-timeout", 0) >= 1
    report["logs"] = {n: read_tap_log(p) for n, p in logs.items()}
    report["events"] = {n: soak_events(p, windows) for n, p in logs.items()}
    for v in report["logs"].values():
        v["errors"] = len(v["errors"])
    rss = report["rss_kib"]
    report["checks"]["results"] = all_ok
    report["checks"]["killed_and_restarted"] = killed
    # No error line, no message cut short and no peer gone silent, but in
    # the faults' windows.
    report["checks"]["no_errors_outside_the_faults"] = all(
        not e["errors_outside"] and not e["truncated_outside"] and not e["peer_timeouts_outside"]
        for e in report["events"].values())
    # The array workloads ran on the tap cluster: their P2P rechunks sent
    # shards between the workers through the workers' taps.
    shards = sum(v["ops"].get("shuffle_receive", 0) for n, v in report["logs"].items() if n != "scheduler")
    report["shuffle_receive_relayed"] = shards
    report["checks"]["rechunks_through_taps"] = shards >= sum(
        1 for e in report["iterations"] if e["mode"] == "taps")
    # Resident memory must not grow: the end within 10 % (+1 MiB) of the
    # larger of start and middle, for every tap.
    report["checks"]["rss_flat"] = all(
        rss["end"][n] <= max(rss["start"][n], rss.get("middle", {}).get(n, 0)) * 1.10 + 1024 for n in rss["end"])
    walls = {m: [e["wall_s"] for e in report["iterations"] if e["mode"] == m] for m in ("taps", "direct")}
    report["wall_s"] = {m: {"median": round(statistics.median(w), 3), "min": min(w), "max": max(w), "n": len(w)}
                        for m, w in walls.items()}
    report["wall_ratio"] = round(report["wall_s"]["taps"]["median"] / report["wall_s"]["direct"]["median"], 3)
    report["ok"] = all(report["checks"].values())
    print(json.dumps(report), flush=True)
    return 0 if report["ok"] else 1


def machine_busy() -> float:
    """CPU-seconds the whole machine has spent busy (all CPUs, /proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def wait_quiet(limit: float, patience: float) -> float:
    """Waits (at most `patience` s) for a 1 s window in which the machine is
    busy less than `limit` CPU-seconds; returns the last window's busy time."""
    deadline = time.monotonic() + patience
    while True:
        b0 = machine_busy()
        time.sleep(1.0)
        busy = machine_busy() - b0
        if busy < limit or time.monotonic() > deadline:
            return busy


def cmd_overhead(a) -> int:
    """The array workload on fresh clusters of each mode, interleaved. Per
    timed run: wall time, the CPU time of the cluster's own processes
    (scheduler, workers, taps, this client) and the CPU time the rest of the
    machine took meanwhile (`others`: load from outside the measurement,
    which slows a 2-core run down). Before each timed run, waits (bounded)
    for a quiet second."""
    modes = []
    for m in a.mode:
        if m == "direct":
            modes.append(("direct", None))
        else:
            label, _, spec = m.partition("=")
            path, *tap_args = spec.split()
            if not path:
                raise SystemExit(f"--mode {m}: expected LABEL=PATH_TO_FRAMEWIRE [TAP OPTION...]")
            modes.append((label, [os.path.abspath(path), *tap_args]))
    samples: dict[str, list[dict]] = {label: [] for label, _ in modes}
    for r in range(a.rounds):
        order = modes if r % 2 == 0 else list(reversed(modes))
        for label, fw in order:
            d = os.path.join(a.dir, f"round{r}-{label}")
            with Cluster(d, fw) as cl:
                array_workload(cl.client, min(a.array_mb, 16))  # warm-up
                pids = [p.pid for p in cl.procs] + list(cl.tap_pids().values()) + [os.getpid()]
                runs = []
                for _ in range(a.reps):
                    # A run during which the rest of the machine took more
                    # than `max_others` of a core is done again (at most
                    # `attempts` times; the quietest one counts).
                    tries = []
                    for _attempt in range(a.attempts):
                        quiet = wait_quiet(a.quiet, a.quiet_wait)
                        cpu0 = {p: cpu_seconds(p) for p in pids}
                        tap_cpu0 = {n: cpu_seconds(p) for n, p in cl.tap_pids().items()}
                        busy0 = machine_busy()
                        t0 = time.perf_counter()
                        res = array_workload(cl.client, a.array_mb)
                        wall = time.perf_counter() - t0
                        busy = machine_busy() - busy0
                        ours = sum(cpu_seconds(p) - cpu0[p] for p in pids)
                        taps_cpu = sum(cpu_seconds(p) - tap_cpu0[n] for n, p in cl.tap_pids().items())
                        if not all(res["checks"].values()):
                            raise RuntimeError(f"{label}: wrong results {res}")
                        tries.append({"wall": wall, "cpu": ours, "taps_cpu": taps_cpu,
                                      "others": max(0.0, busy - ours), "quiet_before": quiet})
                        if tries[-1]["others"] <= a.max_others * wall:
                            break
                    best = min(tries, key=lambda t: t["others"] / t["wall"])
                    best["attempts"] = len(tries)
                    runs.append(best)
                cl.close()
                extra = ""
                relay = {}
                if fw:
                    logs = {n: read_tap_log(t_.log_path) for n, t_ in cl.taps.items()}
                    errors = sum(len(v["errors"]) for v in logs.values())
                    copied = sum(v["copied"] for v in logs.values())
                    spliced = sum(v["spliced"] for v in logs.values())
                    relayed = sum(v["bytes"] for v in logs.values())
                    extra = f" relayed={relayed} copied={copied} spliced={spliced} errors={errors}"
                    if errors:
                        raise RuntimeError(f"{label}: tap errors {logs}")
                    relay = {"relayed": relayed, "copied": copied, "spliced": spliced}
            med = {k: statistics.median(x[k] for x in runs) for k in runs[0]}
            samples[label].append(dict(med, **relay))
            log(f"overhead: round {r} {label:8} {med['wall']:7.3f}s cpu={med['cpu']:.2f}s "
                f"taps_cpu={med['taps_cpu']:.3f}s others={med['others']:.2f}s "
                f"attempts={'+'.join(str(x['attempts']) for x in runs)}{extra}")
    out = {"rounds": a.rounds, "reps": a.reps, "array_mb": a.array_mb, "modes": {}}
    base = statistics.median(x["wall"] for x in samples[modes[0][0]])
    base_cpu = statistics.median(x["cpu"] for x in samples[modes[0][0]])
    for label, _ in modes:
        ws = [x["wall"] for x in samples[label]]
        med = statistics.median(ws)
        cpu = statistics.median(x["cpu"] for x in samples[label])
        out["modes"][label] = {
            "median_s": round(med, 3),
            "min_s": round(min(ws), 3),
            "max_s": round(max(ws), 3),
            "times_s": [round(t, 3) for t in ws],
            "ratio_to_first": round(med / base, 3),
            "cpu_s": round(cpu, 3),
            "cpu_ratio_to_first": round(cpu / base_cpu, 3),
            "taps_cpu_s": round(statistics.median(x["taps_cpu"] for x in samples[label]), 3),
            "others_s": round(statistics.median(x["others"] for x in samples[label]), 3),
        }
        if "relayed" in samples[label][0]:
            # Bytes the taps relayed over every round (each round's cluster, warm-up
            # included), and how many of them went through their memory or were
            # spliced; a round with a tap error has already stopped the run.
            out["modes"][label].update({k: sum(x[k] for x in samples[label])
                                        for k in ("relayed", "copied", "spliced")})
    print(json.dumps(out), flush=True)
    return 0


# ---- helpers of scripts/tap-memory ---------------------------------------------


async def _upstream(port_file: str) -> None:
    from distributed.comm import listen

    held = []

    async def handler(comm):
        held.append(comm)  # keep it open, idle
        with contextlib.suppress(Exception):
            await comm.read()

    listener = listen(f"tcp://{LOOPBACK}:0", handler)
    await listener.start()
    with open(port_file + ".tmp", "w") as f:
        f.write(listener.contact_address)
    os.rename(port_file + ".tmp", port_file)
    await asyncio.Event().wait()


async def _idle_conns(address: str, count: int, ready_file: str) -> None:
    from distributed.comm import connect

    comms = []
    batch = 200
    for start in range(0, count, batch):
        comms += await asyncio.gather(
            *(connect(address, timeout=60) for _ in range(min(batch, count - start)))
        )
    with open(ready_file + ".tmp", "w") as f:
        f.write(str(len(comms)))
    os.rename(ready_file + ".tmp", ready_file)
    await asyncio.Event().wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("workloads")
    w.add_argument("--dir", required=True)
    w.add_argument("--framewire")
    w.add_argument("--scatter", type=int, default=0)
    w.add_argument("--array-mb", type=float, default=0)
    w.add_argument("--map", type=int, default=0)
    f = sub.add_parser("faults")
    f.add_argument("--dir", required=True)
    f.add_argument("--framewire", required=True)
    f.add_argument("--kill-mb", type=float, default=256)
    s = sub.add_parser("soak")
    s.add_argument("--dir", required=True)
    s.add_argument("--framewire", required=True)
    s.add_argument("--minutes", type=float, default=10)
    s.add_argument("--scatter", type=int, default=20_000)
    s.add_argument("--array-mb", type=float, default=100)
    s.add_argument("--map", type=int, default=2_000)
    s.add_argument("--kill-after", type=float, default=2.0,
                   help="seconds into the workload at which w1 is killed (or cut off)")
    s.add_argument("--host", default=LOOPBACK,
                   help="the address every process listens on (but w1 with --partition-netns)")
    s.add_argument("--tcp-timeout", type=int,
                   help="distributed.comm.timeouts.tcp (seconds) of every Dask process, and the taps' --tcp-timeout")
    s.add_argument("--partition-netns",
                   help="run w1 of the tap cluster and its tap in this network namespace, and cut it off "
                        "at two thirds (needs root)")
    s.add_argument("--partition-host", help="w1's address there")
    s.add_argument("--partition-dev", default="fw0", help="the link set down there")
    s.add_argument("--partition-s", type=float, default=25.0, help="how long the partition lasts")
    o = sub.add_parser("overhead")
    o.add_argument("--dir", required=True)
    o.add_argument("--mode", action="append", required=True)
    o.add_argument("--rounds", type=int, default=5)
    o.add_argument("--reps", type=int, default=1)
    o.add_argument("--array-mb", type=float, default=400)
    o.add_argument("--quiet", type=float, default=0.3,
                   help="a timed run starts after a second with less CPU-seconds than this busy")
    o.add_argument("--quiet-wait", type=float, default=60,
                   help="seconds to wait for such a second at most")
    o.add_argument("--max-others", type=float, default=0.2,
                   help="a timed run is done again when the rest of the machine took more than "
                        "this many cores on average meanwhile")
    o.add_argument("--attempts", type=int, default=4, help="at most this many tries per timed run")
    u = sub.add_parser("upstream")
    u.add_argument("--port-file", required=True)
    c = sub.add_parser("idle-conns")
    c.add_argument("--connect", required=True)
    c.add_argument("--count", type=int, required=True)
    c.add_argument("--ready-file", required=True)
    a = ap.parse_args()
    if getattr(a, "framewire", None):
        a.framewire = os.path.abspath(a.framewire)
    if a.cmd == "workloads":
        return cmd_workloads(a)
    if a.cmd == "faults":
        return cmd_faults(a)
    if a.cmd == "soak":
        return cmd_soak(a)
    if a.cmd == "overhead":
        return cmd_overhead(a)
    if a.cmd == "upstream":
        asyncio.run(_upstream(a.port_file))
        return 0
    if a.cmd == "idle-conns":
        asyncio.run(_idle_conns(a.connect, a.count, a.ready_file))
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
