"""The data worker's performance table (BENCHMARKS.md), measured side by side
in one run: scripts/bench-worker runs this with the release build of
examples/data_worker.rs.

    python bench_worker.py --binary PATH [--rounds 5] [--mib 256] [--small 10000] [--rss-mib 1024]
                           [--command CMD] [--no-render]

Keeps the rounds in docs/bench/worker.json and renders them into
BENCHMARKS.md's table (benches/figures.py, region `worker`), headed by the
commit, date, machine, load and CMD; --no-render prints the rounds as JSON
instead.

One `dask scheduler`, two Python `dask worker`s ("fetcher" and "source") and
the Rust data worker, all on this machine. Rounds alternate which side goes
first. Rows:

1. A Python worker (the fetcher) fetching a MIB MiB numpy array, from the
   Rust worker and from the source Python worker: the fetcher's own
   transfer log (the `get_data` it made, start to stop), in MB/s.
2. SMALL small keys (100-byte bytes values) scattered to, then gathered
   from, the Rust worker and the source Python worker, through the
   scheduler as `client.scatter` / `client.gather` do: seconds, both calls.
3. Resident memory (VmRSS) of a fresh Rust worker process holding RSS_MIB
   MiB of numpy arrays (256 MiB each), against the data held; the same for
   a fresh Python worker, for comparison.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from distributed import Client

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benches"))
import figures  # noqa: E402 (benches/figures.py: the table, rendered into BENCHMARKS.md)


def start(cmd, log, env=None):
    return subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
    )


def wait_line(path, marker, proc, timeout=90):
    deadline = time.time() + timeout
    while time.time() < deadline:
        with open(path) as f:
            for line in f:
                if marker in line:
                    return line
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args} exited: {open(path).read()}")
        time.sleep(0.05)
    raise RuntimeError(f"no {marker!r} in {path}")


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


class Cluster:
    def __init__(self, binary, tmp):
        self.tmp, self.binary, self.procs = tmp, binary, []
        py = sys.executable
        self.sched_log = os.path.join(tmp, "scheduler.log")
        s = self.spawn([py, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                        "--port", "0", "--no-dashboard"], self.sched_log)
        line = wait_line(self.sched_log, "Scheduler at:", s)
        self.address = next(w for w in line.split() if w.startswith("tcp://"))

    def spawn(self, cmd, log):
        p = start(cmd, open(log, "w"))
        self.procs.append(p)
        return p

    def python_worker(self, name):
        log = os.path.join(self.tmp, f"{name}.log")
        p = self.spawn([sys.executable, "-m", "distributed.cli.dask_worker", self.address,
                        "--nthreads", "1", "--no-nanny", "--no-dashboard", "--host", "127.0.0.1",
                        "--name", name, "--memory-limit", "0"], log)
        line = wait_line(log, "Start worker at:", p)
        wait_line(log, "Registered to:", p)
        return p, next(w for w in line.split() if w.startswith("tcp://"))

    def rust_worker(self, name):
        out = os.path.join(self.tmp, f"{name}.out")
        p = subprocess.Popen([self.binary, self.address, "--name", name],
                             stdout=open(out, "w"), stderr=open(out + ".err", "w"),
                             stdin=subprocess.DEVNULL)
        self.procs.append(p)
        line = wait_line(out, "listening on", p)
        return p, line.split()[-1]

    def close(self):
        for p in reversed(self.procs):
            p.kill()
            p.wait()


def gone(client, keys):
    def check():
        who = client.who_has(keys)
        return not any(who.get(k) for k in keys)
    deadline = time.time() + 60
    while not check():
        if time.time() > deadline:
            raise RuntimeError("keys not released")
        time.sleep(0.05)


def fetch_round(client, source, fetcher, arr):
    f = client.scatter(arr, workers=[source], hash=False)
    t = client.submit(lambda x: x.nbytes, f, workers=[fetcher], allow_other_workers=False,
                      pure=False)
    assert t.result() == arr.nbytes
    log = client.run(lambda dask_worker: list(dask_worker.transfer_incoming_log),
                     workers=[fetcher])[fetcher]
    entry = [e for e in log if f.key in e["keys"]][-1]
    assert entry["who"] == source, entry
    keys = [f.key, t.key]
    del f, t
    gone(client, keys)
    return arr.nbytes / entry["duration"] / 1e6


def small_round(client, target, n, r):
    data = [(b"%06d-%06d-" % (r, i)) * 7 + b"xx" for i in range(n)]
    assert all(len(d) == 100 for d in data)
    t0 = time.perf_counter()
    futs = client.scatter(data, workers=[target], hash=False)
    t1 = time.perf_counter()
    back = client.gather(futs)
    t2 = time.perf_counter()
    assert back == data
    assert {h for v in client.who_has(futs[:10]).values() for h in v} == {target}
    keys = [f.key for f in futs]
    del futs
    gone(client, keys[:50])
    return t1 - t0, t2 - t1, t2 - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--small", type=int, default=10_000)
    ap.add_argument("--rss-mib", type=int, default=1024)
    ap.add_argument("--command", default="tests/dask/bench_worker.py",
                    help="the command as typed, for the table's header (scripts/bench-worker passes it)")
    ap.add_argument("--no-render", action="store_true",
                    help="print the results as JSON; leave BENCHMARKS.md and docs/bench/ alone")
    a = ap.parse_args()

    env = figures.environment()
    with tempfile.TemporaryDirectory() as tmp:
        cl = Cluster(a.binary, tmp)
        try:
            _, fetcher = cl.python_worker("fetcher")
            _, source = cl.python_worker("source")
            _, rust = cl.rust_worker("rust")
            with Client(cl.address, timeout=60) as client:
                arr = np.random.default_rng(0).random(a.mib * (1 << 20) // 8)
                fetch = {rust: [], source: []}
                small = {rust: [], source: []}
                for r in range(a.rounds):
                    order = [rust, source] if r % 2 == 0 else [source, rust]
                    for target in order:
                        fetch[target].append(fetch_round(client, target, fetcher, arr))
                    for target in order:
                        small[target].append(small_round(client, target, a.small, r))
                del arr
            # Row 3: fresh processes, each holding the same arrays.
            rss_rows = {}
            n_arrays = max(1, a.rss_mib // 256)
            p_rust, rust2 = cl.rust_worker("rust-rss")
            p_py, py2 = cl.python_worker("python-rss")
            with Client(cl.address, timeout=60) as client:
                for name, proc, addr in [("rust", p_rust, rust2), ("python", p_py, py2)]:
                    base = rss(proc.pid)
                    held = []
                    for i in range(n_arrays):
                        x = np.random.default_rng(100 + i).random(256 * (1 << 20) // 8)
                        held.append(client.scatter(x, workers=[addr], hash=False))
                        del x
                    n = n_arrays * 256 * (1 << 20)
                    time.sleep(1)
                    rss_rows[name] = {"before": base, "held": n, "after": rss(proc.pid)}
                    keys = [f.key for f in held]
                    del held
                    gone(client, keys)
        finally:
            cl.close()

    data = {"rounds": a.rounds, "mib": a.mib, "small": a.small,
            "fetch_mb_s": {"rust": fetch[rust], "python": fetch[source]},
            "small_s": {"rust": [list(x) for x in small[rust]], "python": [list(x) for x in small[source]]},
            "rss": rss_rows}
    if a.no_render:
        print(json.dumps(data))
    else:
        print(figures.record("worker", env, data, a.command))


if __name__ == "__main__":
    main()
