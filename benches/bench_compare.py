#!/usr/bin/env python3
"""Driver of scripts/bench-compare: framewire (benches/compare.rs) and Python
Dask distributed (benches/dask_peer.py) measured side by side, interleaved.

    bench_compare.py --rust-worker EXE [--quick] [--only CATEGORY,...|all] [--rounds N]
                     [--out DIR] [--plots DIR] [--baseline-worker EXE --baseline-rev REV]
                     [--command CMD] [--no-render]
    bench_compare.py --from-results DIR/results.json [--out DIR] [--plots DIR]

Both workers stay up for the whole run and answer one measurement per request.
Every row is a group of cells (framewire variants and their Python peer); each
round runs every cell of the group once, the order reversed on odd rounds, so
the two sides see the same machine state. A figure is the median over rounds;
a ratio is computed per round (the two cells of the same round) and its median
and min-max are reported. Nothing here asserts a timing.

Only equal work is set beside Python: a Python row is paired with the framewire
row that does what Python's does (serialize + deserialize of the same value;
dumps + send + recv + loads + deserialize of the same message). Variants that
move one ready-made frame (framewire's Connection with an Envelope, Framed
codecs, a raw writev loop) are compared with each other only. The transport and
small-message rows run each end in its own process, as peers do; the old
one-process rows are kept as a labelled extra (category `local`). Category
`sizes` (throughput from 32 MiB to 512 MiB messages) runs only when named.

With --baseline-worker (scripts/bench-compare --baseline REV builds one: this
harness over the library at REV), every framewire cell of the serialize, dumps,
transport and msgs groups gets a twin measured by the baseline in the same
rounds, and a before/after table is added.

Writes table.md and results.json to --out (default target/bench-compare) and
the PNG plots to --plots (default docs/bench, tracked in the repository):
serialize_per_element.png, transport_throughput.png. Then, unless --no-render
(or --baseline-worker), each category's table goes into BENCHMARKS.md, region
`compare-CATEGORY`, rendered from docs/bench/compare-CATEGORY.json (the groups
that table shows, floats to 4 significant digits) and headed by the commit,
date, machine, load and --command (benches/figures.py).
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import figures  # noqa: E402 (benches/figures.py: BENCHMARKS.md's tables from results files)
from compare_tables import (  # noqa: E402 (benches/compare_tables.py: the tables of a run)
    CLIENT_ARRAY, CLIENT_COMPUTE, CLIENT_SMALL, GIB, KIB, MIB, MODES, PICKLE_CASES, RAW_VARIANTS, SWEEP_SIZES,
    SWEEP_VARIANTS, TRANSPORT_SIZES, build_before_after, build_table, gibs, median, ns_per_elem,
    run_line, size_label, table_groups, transport_by)


class Worker:
    def __init__(self, name, argv):
        self.name = name
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def call(self, req):
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"bench-compare: the {self.name} worker died on {req}")
        return json.loads(line)

    def close(self):
        try:
            self.proc.stdin.write('{"op": "quit"}\n')
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        self.proc.wait(timeout=60)


class Run:
    def __init__(self, workers, rounds, verbose=True):
        self.workers = workers
        self.rounds = rounds
        self.groups = {}  # group id -> {cell: [result per round]}
        self.category = None  # the category (plan) whose groups run now
        self.categories = {}  # category -> [group id]
        self.verbose = verbose

    def group(self, gid, cells, rounds=None, twins=False):
        """cells: {cell: (worker name, request)}; runs them interleaved. With `twins`
        and a baseline worker, each framewire cell gets a `before/` twin beside it
        (not a `raw` ceiling: it measures no framewire code, and a baseline from
        before the ceilings would run its framed loop under that name)."""
        rounds = rounds or self.rounds["default"]
        if twins and "baseline" in self.workers:
            paired = {}
            for cell, (worker, req) in cells.items():
                paired[cell] = (worker, req)
                if worker == "rust" and not cell.startswith("raw"):
                    paired[f"before/{cell}"] = ("baseline", req)
            cells = paired
        out = {cell: [] for cell in cells}
        t0 = time.time()
        names = list(cells)
        for r in range(rounds):
            for cell in (names if r % 2 == 0 else names[::-1]):
                worker, req = cells[cell]
                res = self.workers[worker].call(req)
                if "error" in res:
                    raise SystemExit(f"bench-compare: {gid}/{cell}: {res['error']}")
                out[cell].append(res)
        self.groups[gid] = out
        self.categories.setdefault(self.category, []).append(gid)
        if self.verbose:
            print(f"  {gid}: {rounds} rounds, {time.time() - t0:.1f} s", file=sys.stderr, flush=True)
        return out

    def reset(self):
        for w in self.workers.values():
            w.call({"op": "reset"})


# ---- the measurements ---------------------------------------------------------------------


def serde_cells(struct, mode, n, min_time, with_dask):
    req = {"op": "serde", "struct": struct, "mode": mode, "n": n, "min_time": min_time}
    cells = {"fw": ("rust", req)}
    if struct == "tuple_small_ints":
        # The same tuple built as a packed Value::IntArray (what framewire's own
        # deserialize returns for it): a different input.
        cells["fw_packed"] = ("rust", dict(req, struct="tuple_small_ints_packed"))
        if n == 1_000_000 and mode != "always":
            # Reading the boxed tuple once: the memory floor of any encoder of it.
            cells["fw_floor"] = ("rust", {"op": "floor", "n": n, "min_time": min_time})
    if n == 1_000_000 and mode == "always":
        # Allocating and writing the header, frame list and array one call produces,
        # nothing else: the fresh-memory floor of this output under the allocator.
        cells["fw_output_floor"] = ("rust", dict(req, op="output_floor"))
    if with_dask:
        cells["dask"] = ("python", req)
        cells["dask_msgpack"] = ("python", dict(req, serializers="msgpack"))
    return cells


def plan_serialize(run, quick, min_time):
    ns = [10, 1000, 100_000, 1_000_000]
    for struct in ["tuple_small_ints", "list_bytes8"]:
        for n in ns:
            for mode, _ in MODES:
                # Python takes 5-30 s per call at 1e6 when it iterates; in --quick only the
                # table's cells (N = 1e6) run Dask at N >= 1e5 where Dask iterates.
                dask_iterates = mode == "always" or (struct == "list_bytes8" and mode == "auto")
                with_dask = not (quick and dask_iterates and n == 100_000)
                run.group(f"serde/{struct}/{mode}/{n}", serde_cells(struct, mode, n, min_time, with_dask),
                          twins=n == 1_000_000)
        run.reset()


def plan_dumps(run, quick, min_time):
    cells = {}
    for size in [KIB, GIB]:
        req = {"op": "dumps", "size": size, "min_time": min_time}
        cells[f"fw/{size}"] = ("rust", req)
        cells[f"dask/{size}"] = ("python", req)
    run.group("dumps", cells, twins=True)
    # A message carrying a list of 1e5 8-byte bytes in a Serialize, iterated on both
    # sides (Dask by inference, framewire with iterate=Always): dumps + loads.
    req = {"op": "msg_collection", "struct": "list_bytes8", "n": 100_000, "min_time": min_time}
    run.group("msg_collection", {"fw": ("rust", req), "dask": ("python", req)}, twins=True)
    run.reset()


def transport_cells(size, count, wanted):
    """Every variant, two processes each: framewire sends from its worker to a fresh
    `compare peer-recv`, Python from its worker to a fresh `dask_peer.py peer-recv`."""
    cells = {}
    for cell, variant, flavor in [("task", "connection_task", "2threads"), ("task_1t", "connection_task", "1thread")] \
            + [(c, v, "2threads") for c, v, _ in RAW_VARIANTS]:
        if wanted is None or cell in wanted:
            cells[f"{cell}@{size}"] = ("rust", {"op": "peer", "variant": variant, "size": size,
                                                "count": count, "flavor": flavor})
    cells[f"dask@{size}"] = ("python", {"op": "peer", "kind": "ndarray", "size": size, "count": count})
    return cells


def plan_transport(run, quick, min_time):
    """1 KiB and 64 KiB in a group each; 64 MiB and 512 MiB in one group, so that the
    512 MiB / 64 MiB ratios are of the same rounds."""
    rounds = run.rounds["transport"]
    for size, q, full, wanted in TRANSPORT_SIZES[:2]:
        run.group(f"transport/{size}", transport_cells(size, q if quick else full, wanted), rounds=rounds, twins=True)
    cells = {}
    for size, q, full, wanted in TRANSPORT_SIZES[2:]:
        cells.update(transport_cells(size, q if quick else full, wanted))
    run.group("transport/large", cells, rounds=rounds, twins=True)
    run.reset()


def plan_msgs(run, quick, min_time):
    rounds = run.rounds["transport"]
    count = 10000 if quick else 20000
    cells = {f"fw_{f}": ("rust", {"op": "peer", "variant": "small_task", "size": 1024, "count": count,
                                  "flavor": f}) for f in ["1thread", "2threads"]}
    cells["dask"] = ("python", {"op": "peer", "kind": "small", "size": 1024, "count": count})
    run.group("small_one_way", cells, rounds=rounds, twins=True)
    count = 2000 if quick else 5000
    cells = {f"fw_{f}": ("rust", {"op": "peer_rt", "count": count, "flavor": f}) for f in ["1thread", "2threads"]}
    # The client polled by `block_on`'s own thread instead of a worker: a wake-up of
    # another thread per answer (what a client written in `#[tokio::main]`'s body gets).
    cells["fw_2threads_block_on"] = ("rust", {"op": "peer_rt", "count": count, "flavor": "2threads",
                                              "client": "block_on"})
    # The ceiling: the same bytes each way, raw, on the same runtime and set-up.
    cells["raw_2threads"] = ("rust", {"op": "peer_rt", "count": count, "flavor": "2threads", "raw": True})
    cells["dask"] = ("python", {"op": "peer_rt", "count": count})
    run.group("round_trip", cells, rounds=rounds, twins=True)


def plan_local(run, quick, min_time):
    """The one-process set-up of earlier versions, kept as an extra: both framewire ends are
    tasks of one runtime, both Python ends on one event loop."""
    rounds = run.rounds["transport"]
    size, count = 64 * MIB, 5 if quick else 12
    cells = {f"fw_{f}": ("rust", {"op": "transport", "variant": "connection_task", "size": size, "count": count,
                                  "flavor": f}) for f in ["1thread", "2threads"]}
    cells["dask"] = ("python", {"op": "transport", "size": size, "count": count})
    run.group("local/64MiB", cells, rounds=rounds)
    count = 10000 if quick else 20000
    cells = {f"fw_{f}": ("rust", {"op": "small_one_way", "count": count, "flavor": f}) for f in ["1thread", "2threads"]}
    cells["dask"] = ("python", {"op": "small_one_way", "count": count})
    run.group("local/small_one_way", cells, rounds=rounds)
    count = 2000 if quick else 5000
    cells = {f"fw_{f}": ("rust", {"op": "round_trip", "count": count, "flavor": f}) for f in ["1thread", "2threads"]}
    cells["dask"] = ("python", {"op": "round_trip", "count": count})
    run.group("local/round_trip", cells, rounds=rounds)
    run.reset()


def plan_rss(run, quick, min_time):
    size = 512 * MIB
    run.group("rss", {
        "fw_frames": ("rust", {"op": "rss", "size": size, "deserialize": False}),
        "fw_deserialized": ("rust", {"op": "rss", "size": size, "deserialize": True}),
        "dask": ("python", {"op": "rss", "size": size}),
    }, rounds=2 if quick else 3)


def start_scheduler(scheme, certs):
    """A real `dask scheduler` on 127.0.0.1 (`--protocol tls` with the test certificates)."""
    argv = [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
            "--no-dashboard"]
    if scheme == "tls":
        argv += ["--protocol", "tls", "--tls-ca-file", os.path.join(certs, "ca.pem"),
                 "--tls-cert", os.path.join(certs, "node.pem"), "--tls-key", os.path.join(certs, "node.key")]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if "Scheduler at:" in line:
            address = line.split("Scheduler at:", 1)[1].strip()
            # Keep draining its log so that it never blocks on a full pipe.
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, address
    raise SystemExit(f"bench-compare: the {scheme} scheduler did not start")


def plan_wire(run, quick, min_time):
    """Two processes per side, as deployments run: 64 MiB ndarray messages over tcp:// and
    tls://, and connect + handshakes + one identity call to a real scheduler."""
    certs = os.path.join(run.out_dir, "certs")
    subprocess.run([run.rust_exe, "make-certs", certs], check=True)
    count = 5 if quick else 12
    cells = {}
    for scheme in ["tcp", "tls"]:
        req = {"op": "wire", "scheme": scheme, "size": 64 * MIB, "count": count,
               "certs": certs if scheme == "tls" else "-"}
        cells[f"fw/{scheme}"] = ("rust", req)
        cells[f"dask/{scheme}"] = ("python", req)
        # The ceiling: the same socket and payload, raw (benches/compare.rs raw_wire_send).
        cells[f"raw/{scheme}"] = ("rust", dict(req, raw=True))
    # The old ceiling: the raw loop over tokio-rustls, rustls' own records (the tls:// path
    # before issue 32), beside the new one.
    cells["raw_old/tls"] = ("rust", {"op": "wire", "scheme": "tls", "size": 64 * MIB, "count": count,
                                     "certs": certs, "raw": True, "old_tls": True})
    run.group("wire/64MiB", cells, rounds=run.rounds["transport"])
    cells, schedulers = {}, []
    try:
        for scheme in ["tcp", "tls"]:
            proc, address = start_scheduler(scheme, certs)
            schedulers.append(proc)
            req = {"op": "connect", "address": address, "certs": certs if scheme == "tls" else "-",
                   "count": 10 if quick else 25}
            cells[f"fw/{scheme}"] = ("rust", req)
            cells[f"dask/{scheme}"] = ("python", req)
        run.group("connect", cells, rounds=run.rounds["transport"])
    finally:
        for proc in schedulers:
            proc.terminate()
            proc.wait(timeout=60)


def plan_typed(run, quick, min_time):
    cells = {}
    for path in ["loads", "typed_decode", "typed_decode_value"]:
        cells[f"fw/{path}"] = ("rust", {"op": "typed", "case": "compute-task_1", "path": path, "min_time": min_time})
    for path in ["loads", "loads_keep_pickled"]:
        cells[f"dask/{path}"] = ("python", {"op": "typed", "case": "compute-task_1", "path": path,
                                            "min_time": min_time})
    run.group("typed/compute-task", cells, twins=True)
    cells = {}
    for path in ["dumps", "typed_encode", "typed_encode_value"]:
        cells[f"fw/{path}"] = ("rust", {"op": "typed", "case": "task-finished_1", "path": path, "min_time": min_time})
    cells["dask/dumps"] = ("python", {"op": "typed", "case": "task-finished_1", "path": "dumps", "min_time": min_time})
    run.group("typed/task-finished", cells, twins=True)


def start_worker(address):
    """A real `dask worker` (one thread, no nanny) for the scheduler at `address`; returns
    once the scheduler has it."""
    argv = [sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1", "--no-nanny",
            "--no-dashboard", "--host", "127.0.0.1"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if "Registered to:" in line:
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc
    raise SystemExit("bench-compare: the dask worker did not start")


def plan_client(run, quick, min_time):
    """The Rust client (framewire::dask::Client) beside Python's distributed.Client, each in
    its own process, both connected once and kept warm, against one real cluster (a `dask
    scheduler` and one Python `dask worker`, processes of their own)."""
    sched, address = start_scheduler("tcp", None)
    worker = None
    try:
        worker = start_worker(address)
        key = run.workers["python"].call({"op": "client_setup", "address": address, "size": CLIENT_ARRAY})["key"]
        count = 3 if quick else 5
        run.group("client/gather", {
            "fw": ("rust", {"op": "client_gather", "address": address, "key": key, "count": count}),
            "fw_nopool": ("rust", {"op": "client_gather", "address": address, "key": key, "count": count,
                                   "idle": 0}),
            "dask": ("python", {"op": "client_gather", "address": address, "key": key, "count": count}),
            "dask_direct": ("python", {"op": "client_gather", "address": address, "key": key,
                                       "count": count, "direct": True}),
        })
        n, size = CLIENT_SMALL
        run.group("client/small", {
            "fw": ("rust", {"op": "client_small", "address": address, "n": n, "size": size}),
            "dask": ("python", {"op": "client_small", "address": address, "n": n, "size": size}),
        })
        # Computing: many tiny tasks in one graph, and one task's round trip.
        n = CLIENT_COMPUTE
        run.group("client/compute", {
            "fw": ("rust", {"op": "client_compute", "address": address, "n": n}),
            "dask": ("python", {"op": "client_compute", "address": address, "n": n}),
        })
        tiny = 10 if quick else 30
        run.group("client/tiny", {
            "fw": ("rust", {"op": "client_tiny", "address": address, "count": tiny}),
            "dask": ("python", {"op": "client_tiny", "address": address, "count": tiny}),
        })
    finally:
        for proc in [worker, sched]:
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=60)


def plan_pickle(run, quick, min_time):
    """framewire::pickle::loads beside Python's C pickle.loads of the same bytes, each in
    its own process, each building its language's values and dropping them per call."""
    import pickle

    out = os.path.abspath(os.path.join(run.out_dir, "pickles"))
    os.makedirs(out, exist_ok=True)
    for name, (_, make) in PICKLE_CASES.items():
        path = os.path.join(out, name + ".pkl")
        with open(path, "wb") as fh:
            fh.write(pickle.dumps(make(), protocol=5))
        req = {"op": "pickle_loads", "path": path, "min_time": max(min_time, 0.3)}
        run.group(f"pickle/{name}", {"fw": ("rust", req), "python": ("python", req)})


def plan_sizes(run, quick, min_time):
    """Throughput against message size, two processes per side, every size and variant in
    one group (so each size's ratio to 64 MiB is of the same rounds); about 1 GiB per cell
    (2 GiB without --quick), at least two messages."""
    cells = {}
    for size in SWEEP_SIZES:
        count = max(2, (1 if quick else 2) * GIB // size)
        for cell, variant, _ in SWEEP_VARIANTS:
            cells[f"{cell}@{size}"] = ("rust", {"op": "peer", "variant": variant, "size": size,
                                                "count": count, "flavor": "2threads"})
        cells[f"dask@{size}"] = ("python", {"op": "peer", "kind": "ndarray", "size": size, "count": count})
    run.group("sizes", cells, rounds=run.rounds["transport"])
    run.reset()


PLANS = {"serialize": plan_serialize, "dumps": plan_dumps, "transport": plan_transport,
         "msgs": plan_msgs, "local": plan_local, "rss": plan_rss, "typed": plan_typed, "wire": plan_wire,
         "client": plan_client, "pickle": plan_pickle, "sizes": plan_sizes}
# What runs without --only: all but `sizes` (about three minutes more with --quick).
DEFAULT_PLANS = [p for p in PLANS if p != "sizes"]


# ---- figures ------------------------------------------------------------------------------


# ---- plots --------------------------------------------------------------------------------


def plots(groups, out_dir, caption):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("bench-compare: matplotlib missing, no plots", file=sys.stderr)
        return []
    os.makedirs(out_dir, exist_ok=True)
    written = []
    save = {"dpi": 72, "pil_kwargs": {"optimize": True}}
    structs = [s for s in ["tuple_small_ints", "list_bytes8"] if any(k.startswith(f"serde/{s}/") for k in groups)]
    if structs:
        # One panel per collection and mode: framewire beside Dask (both serializer lists).
        fig, axes = plt.subplots(len(structs), 3, figsize=(12, 3.6 * len(structs)), squeeze=False)
        lines = [("fw", "-o", "tab:blue", "framewire"),
                 ("fw_packed", ":^", "tab:cyan", "framewire, tuple built packed (other input)"),
                 ("dask", "--s", "tab:red", "Dask, default serializers"),
                 ("dask_msgpack", "-.d", "tab:orange", "Dask, serializers=[\"msgpack\"]")]
        for row, struct in zip(axes, structs):
            for ax, (mode, flag) in zip(row, MODES):
                for side, style, color, label in lines:
                    pts = []
                    for key, cells in groups.items():
                        parts = key.split("/")
                        if parts[0] == "serde" and parts[1] == struct and parts[2] == mode and side in cells:
                            n = int(parts[3])
                            v = [ns_per_elem(r, n) for r in cells[side]]
                            pts.append((n, median(v), min(v), max(v)))
                    if not pts:
                        continue
                    pts.sort()
                    err = [[p[1] - p[2] for p in pts], [p[3] - p[1] for p in pts]]
                    ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=err, fmt=style, color=color,
                                capsize=2, ms=4, label=label)
                ax.set_xscale("log")
                ax.set_yscale("log")
                ax.set_xlabel("N (elements)")
                ax.set_ylabel("ns per element")
                ax.set_title(f"{struct}, {mode} (Dask iterate_collection={flag})", fontsize=9)
                ax.grid(True, which="both", alpha=0.3)
        axes[0][0].legend(fontsize=7)
        fig.suptitle("serialize + deserialize, median over rounds, bars min–max; " + caption, fontsize=8)
        fig.tight_layout()
        path = os.path.join(out_dir, "serialize_per_element.png")
        fig.savefig(path, **save)
        plt.close(fig)
        written.append(path)
    tr = transport_by(groups)
    if tr:
        fig, ax = plt.subplots(figsize=(8, 4.8))
        series = [("task", "-o", "framewire task messages (multi-thread)"),
                  ("task_1t", "-v", "framewire task messages (current-thread)"),
                  ("dask", "--s", "Python distributed.comm (task messages)")] + \
                 [(c, ":.", label) for c, _, label in RAW_VARIANTS]
        for cell, style, label in series:
            pts = sorted((size, [gibs(r) for r in res]) for (c, size), res in tr.items() if c == cell)
            if not pts:
                continue
            err = [[median(v) - min(v) for _, v in pts], [max(v) - median(v) for _, v in pts]]
            ax.errorbar([s for s, _ in pts], [median(v) for _, v in pts], yerr=err, fmt=style, capsize=2, ms=4,
                        label=label + (" [raw frames]" if style == ":." else ""))
        sizes = sorted({s for _, s in tr})
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(sizes)
        ax.set_xticklabels([size_label(s) for s in sizes])
        ax.set_xlabel("message payload")
        ax.set_ylabel("GiB/s, one way, loopback TCP, two processes")
        ax.set_title("median over rounds, bars min–max; " + caption, fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = os.path.join(out_dir, "transport_throughput.png")
        fig.savefig(path, **save)
        plt.close(fig)
        written.append(path)
    return written


def environment(python_worker_exe):
    """figures.environment() (commit, date, machine, load at the start) and
    the toolchains."""
    def sh(*argv):
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip()
        except OSError:
            return "?"

    env = figures.environment()
    env["rustc"] = sh("rustc", "--version")
    env["python"] = sh(python_worker_exe, "-c",
                       "import distributed, msgpack, numpy, sys; "
                       "print(f'distributed {distributed.__version__}, msgpack {msgpack.version}, "
                       "numpy {numpy.__version__}, python {sys.version.split()[0]}')")
    env["platform"] = platform.platform()
    return env


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rust-worker")
    ap.add_argument("--baseline-worker", help="a compare worker built over an earlier library (before/after)")
    ap.add_argument("--baseline-rev", default="baseline", help="what the baseline worker was built from")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default=",".join(DEFAULT_PLANS),
                    help="categories: " + ",".join(PLANS) + " (default: all but sizes; all: every one)")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--out", default="target/bench-compare")
    ap.add_argument("--plots", default=os.path.join(os.path.dirname(HERE), "docs", "bench"),
                    help="where the PNG plots go (default: docs/bench, tracked)")
    ap.add_argument("--command", default="benches/bench_compare.py",
                    help="the command as typed, for the tables' headers (scripts/bench-compare passes it)")
    ap.add_argument("--no-render", action="store_true",
                    help="leave BENCHMARKS.md and docs/bench/*.json alone (table.md and results.json only)")
    ap.add_argument("--from-results", metavar="JSON",
                    help="no measurement: rebuild table.md and the plots of an earlier results.json")
    ap.add_argument("--record", action="store_true",
                    help="with --from-results: also render its categories' tables into BENCHMARKS.md")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.from_results:
        with open(a.from_results) as fh:
            saved = json.load(fh)
        print(render(saved["environment"], saved["groups"], a.out, a.plots))
        if a.record:
            record(saved["environment"], saved["groups"], saved["categories"])
        return
    # Transport rows are cheaper per round and noisier: more, shorter rounds.
    rounds = {"default": a.rounds or (3 if a.quick else 7),
              "transport": a.rounds or (5 if a.quick else 9)}
    min_time = 0.05 if a.quick else 0.25
    if not a.rust_worker:
        ap.error("--rust-worker is required (scripts/bench-compare passes it)")
    only = list(PLANS) if a.only == "all" else a.only.split(",")
    env = environment(sys.executable)
    workers = {
        "rust": Worker("framewire", [a.rust_worker, "serve"]),
        "python": Worker("Python Dask", [sys.executable, os.path.join(HERE, "dask_peer.py"), "serve"]),
    }
    if a.baseline_worker:
        workers["baseline"] = Worker("framewire baseline", [a.baseline_worker, "serve"])
        env["baseline"] = a.baseline_rev
    run = Run(workers, rounds)
    run.rust_exe, run.out_dir = a.rust_worker, a.out
    try:
        for cat in only:
            print(f"bench-compare: {cat}", file=sys.stderr, flush=True)
            run.category = cat
            PLANS[cat](run, a.quick, min_time)
    finally:
        for w in workers.values():
            w.close()
    env = figures.finish(env)
    env["mode"] = "quick" if a.quick else "full"
    env["rounds"] = rounds
    env["argv"] = sys.argv[1:]
    env["command"] = a.command
    with open(os.path.join(a.out, "results.json"), "w") as fh:
        json.dump({"environment": env, "groups": run.groups, "categories": run.categories}, fh, indent=1)
    print(f"wrote {os.path.join(a.out, 'results.json')}", file=sys.stderr)
    print(render(env, run.groups, a.out, a.plots))
    if not a.no_render and not a.baseline_worker:
        record(env, run.groups, run.categories)
    print(f"bench-compare: {env['wall_s']:.0f} s", file=sys.stderr)


def record(env, groups, categories):
    """One table per category in BENCHMARKS.md, each from its own results
    file in docs/bench/ (benches/figures.py)."""
    run_info = {k: env[k] for k in ("mode", "rounds", "rustc", "python")}
    for cat, gids in categories.items():
        kept = {gid: groups[gid] for gid in table_groups(cat, gids)}
        figures.record(f"compare-{cat}", {k: v for k, v in env.items() if k != "argv"},
                       {"run": run_info, "groups": kept}, env["command"])


def render(env, groups, out_dir, plot_dir):
    """Writes table.md and the plots; returns the table's markdown."""
    header = (f"<!-- bench-compare: {env['date']}, git {env['commit']}, {env['nproc']} × {env['cpu']}, "
              f"{env['llc']}, load average {env['load_start']:.1f} → {env['load_end']:.1f}, {run_line(env)}; "
              f"wall {env['wall_s']:.0f} s -->")
    md = header + "\n\n" + build_table(groups).markdown() + "\n"
    if env.get("baseline"):
        md += build_before_after(groups, env["baseline"]).markdown() + "\n"
    with open(os.path.join(out_dir, "table.md"), "w") as fh:
        fh.write(md)
    caption = (f"{env['date']}, git {env['commit']}, {'--quick' if env['mode'] == 'quick' else 'full run'}, "
               f"load {env['load_start']:.1f} → {env['load_end']:.1f}")
    for p in plots(groups, plot_dir, caption) + [os.path.join(out_dir, "table.md")]:
        print(f"wrote {p}", file=sys.stderr)
    return md


if __name__ == "__main__":
    main()
