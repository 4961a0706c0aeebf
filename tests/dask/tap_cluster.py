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
    soak --dir DIR --framewire BIN [--minutes N] [...]
        mixed workloads in a loop on a tap cluster and a direct cluster, alternately;
        one tap-cluster worker killed and restarted midway; the taps' logs and memory.
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


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
    """`framewire tap` in front of `upstream` (HOST:PORT), logging to DIR/tap-NAME.log."""

    def __init__(self, framewire: str | list[str], name: str, upstream: str, directory: str):
        """`framewire`: the binary, or the binary and more `tap` options."""
        self.name = name
        self.log_path = os.path.join(directory, f"tap-{name}.log")
        binary, *options = [framewire] if isinstance(framewire, str) else framewire
        self.proc = Proc(
            f"tap-{name}.stderr",
            [binary, "tap", *options, "--listen", f"{LOOPBACK}:0", "--upstream", upstream,
             "--log", self.log_path],
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
    `framewire` is given; a Client in this process."""

    def __init__(self, directory: str, framewire: str | list[str] | None = None, workers: int = 2,
                 label: str = ""):
        self.dir = directory
        self.framewire = framewire
        self.label = label
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
        port = free_port()
        sched = Proc(
            self._name("scheduler"),
            [py, "-m", "distributed.cli.dask_scheduler", "--host", LOOPBACK, "--port", str(port), "--no-dashboard"],
            self.dir,
            self.env,
        )
        self.procs.append(sched)
        self.scheduler = sched
        sched.wait_for(r"Scheduler at:\s+tcp://")
        self.scheduler_real = f"{LOOPBACK}:{port}"
        if self.framewire:
            tap = Tap(self.framewire, self._name("scheduler"), self.scheduler_real, self.dir)
            self.taps["scheduler"] = tap
            self.scheduler_address = f"tcp://{tap.address}"
        else:
            self.scheduler_address = f"tcp://{self.scheduler_real}"
        for i in range(n):
            self.worker_ports[i] = free_port()
            real = f"{LOOPBACK}:{self.worker_ports[i]}"
            if self.framewire:
                tap = Tap(self.framewire, self._name(f"w{i}"), real, self.dir)
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

    def start_worker(self, i: int, wait: bool = True) -> None:
        py = sys.executable
        local = os.path.join(self.dir, self._name(f"w{i}-space"))
        os.makedirs(local, exist_ok=True)
        w = Proc(
            self._name(f"w{i}"),
            [
                py, "-m", "distributed.cli.dask_worker", self.scheduler_address,
                "--no-nanny", "--nthreads", "1", "--name", f"w{i}", "--no-dashboard",
                "--memory-limit", "0", "--local-directory", local,
                "--listen-address", f"tcp://{LOOPBACK}:{self.worker_ports[i]}",
                "--contact-address", self.worker_contact[i],
            ],
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
    with open(path, errors="replace") as f:
        for line in f:
            m = MSG.search(line)
            if m:
                msgs += 1
                wire += int(m.group(5))
                max_frames = max(max_frames, int(m.group(4)))
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
        out["checks"]["on_w1"] = list(who.values()) == [(w1,)] if who else False
        out["recovery_s"] = round(t_done - t_kill, 3)
        out["kill_time"] = t_kill
        # The cluster carries on: a computation on w1, through the taps.
        more = client.map(inc, range(100), pure=False)
        out["checks"]["after_kill"] = sum(client.gather(more)) == sum(range(1, 101))
        del more, fut, src

        # Fault 2: half a message to the scheduler, then close.
        host, port = cl.taps["scheduler"].address.split(":")
        out["half_message_time"] = time.time()
        half_message(host, int(port))
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


def half_message(host: str, port: int) -> None:
    """Connects, exchanges Dask handshakes, sends the first half of an
    `identity` message (declared in full), and closes."""
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
    s.sendall(msg[: len(msg) // 2])
    s.close()


def vmrss_all(pids: dict[str, int]) -> dict[str, int]:
    return {n: rss_kib(p) for n, p in pids.items()}


def soak_iteration(client, a, i: int) -> dict:
    results = [
        scatter_gather(client, a.scatter),
        array_workload(client, a.array_mb),
        map_workload(client, a.map),
    ]
    return merge(results)


def cmd_soak(a) -> int:
    tap_dir = os.path.join(a.dir, "taps")
    direct_dir = os.path.join(a.dir, "direct")
    deadline = time.monotonic() + a.minutes * 60
    report: dict = {"iterations": [], "rss_kib": {}, "checks": {}}
    log(f"soak: {a.minutes} min, scatter={a.scatter} array={a.array_mb}MB map={a.map}")
    with Cluster(tap_dir, a.framewire, label="") as taps, Cluster(direct_dir, None, label="") as direct:
        pids = taps.tap_pids()
        killed = False
        half = a.minutes * 60 / 2
        t_start = time.monotonic()
        i = 0
        all_ok = True
        while time.monotonic() < deadline or i < 2:
            for mode, cl in (("taps", taps), ("direct", direct)) if i % 2 == 0 else (("direct", direct), ("taps", taps)):
                t0 = time.perf_counter()
                r = soak_iteration(cl.client, a, i)
                wall = time.perf_counter() - t0
                all_ok &= r["ok"]
                entry = {"i": i, "mode": mode, "wall_s": round(wall, 3), "ok": r["ok"]}
                if not r["ok"]:
                    entry["checks"] = r["checks"]
                report["iterations"].append(entry)
                log(f"soak: iteration {i} {mode:6} {wall:7.2f}s ok={r['ok']}")
            if i == 0:
                report["rss_kib"]["start"] = vmrss_all(pids)
            i += 1
            if not killed and time.monotonic() - t_start >= half:
                report["rss_kib"]["middle"] = vmrss_all(pids)
                # Kill w1 of the tap cluster in the middle of a workload.
                fut = taps.client.submit(array_workload_remote, a.array_mb, pure=False)
                time.sleep(1.0)
                report["kill_time"] = time.time()
                taps.kill_worker(1)
                log("soak: killed w1 of the tap cluster")
                try:
                    fut.result(timeout=600)
                    report["checks"]["kill_workload"] = True
                except Exception as e:  # noqa: BLE001
                    report["checks"]["kill_workload"] = False
                    report["kill_error"] = repr(e)
                taps.restart_worker(1)
                report["restart_time"] = time.time()
                log("soak: restarted w1")
                killed = True
        report["rss_kib"]["end"] = vmrss_all(pids)
        report["logs"] = {n: read_tap_log(t.log_path) for n, t in taps.taps.items()}
    report["minutes"] = round((time.monotonic() - t_start) / 60, 2)
    report["checks"]["results"] = all_ok
    report["checks"]["killed"] = killed
    report["ok"] = all(report["checks"].values())
    print(json.dumps(report), flush=True)
    return 0 if report["ok"] else 1


def array_workload_remote(mb: float):
    """The array workload from inside a task (so that the kill hits a worker
    while a computation is running): submits through the worker's client."""
    from distributed import worker_client

    with worker_client() as client:
        r = array_workload(client, mb)
    if not all(r["checks"].values()):
        raise RuntimeError(f"wrong results: {r}")
    return r


def cmd_overhead(a) -> int:
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
    times: dict[str, list[float]] = {label: [] for label, _ in modes}
    for r in range(a.rounds):
        order = modes if r % 2 == 0 else list(reversed(modes))
        for label, fw in order:
            d = os.path.join(a.dir, f"round{r}-{label}")
            with Cluster(d, fw) as cl:
                array_workload(cl.client, min(a.array_mb, 16))  # warm-up
                best = []
                cpu0 = {n: cpu_seconds(p) for n, p in cl.tap_pids().items()}
                for _ in range(a.reps):
                    t0 = time.perf_counter()
                    res = array_workload(cl.client, a.array_mb)
                    best.append(time.perf_counter() - t0)
                    if not all(res["checks"].values()):
                        raise RuntimeError(f"{label}: wrong results {res}")
                tap_cpu = sum(cpu_seconds(p) - cpu0[n] for n, p in cl.tap_pids().items())
                t = statistics.median(best)
                times[label].append(t)
                extra = ""
                cl.close()
                if fw:
                    extra = f" taps_cpu={tap_cpu / a.reps:.3f}s"
                    logs = {n: read_tap_log(t_.log_path) for n, t_ in cl.taps.items()}
                    errors = sum(len(v["errors"]) for v in logs.values())
                    copied = sum(v["copied"] for v in logs.values())
                    spliced = sum(v["spliced"] for v in logs.values())
                    relayed = sum(v["bytes"] for v in logs.values())
                    extra += f" relayed={relayed} copied={copied} spliced={spliced} errors={errors}"
                    if errors:
                        raise RuntimeError(f"{label}: tap errors {logs}")
                log(f"overhead: round {r} {label:8} {t:7.3f}s{extra}")
    out = {"rounds": a.rounds, "array_mb": a.array_mb, "modes": {}}
    base = statistics.median(times[modes[0][0]])
    for label, _ in modes:
        ts = times[label]
        med = statistics.median(ts)
        out["modes"][label] = {
            "median_s": round(med, 3),
            "min_s": round(min(ts), 3),
            "max_s": round(max(ts), 3),
            "times_s": [round(t, 3) for t in ts],
            "ratio_to_first": round(med / base, 3),
        }
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
    o = sub.add_parser("overhead")
    o.add_argument("--dir", required=True)
    o.add_argument("--mode", action="append", required=True)
    o.add_argument("--rounds", type=int, default=5)
    o.add_argument("--reps", type=int, default=1)
    o.add_argument("--array-mb", type=float, default=400)
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
