#!/usr/bin/env python3
"""Driver of scripts/bench-compare: framewire (benches/compare.rs) and Python
Dask distributed (benches/dask_peer.py) measured side by side, interleaved.

    bench_compare.py --rust-worker EXE [--quick] [--only CATEGORY,...] [--rounds N] [--out DIR]
    bench_compare.py --from-results DIR/results.json [--out DIR]   (table and plots again)

Both workers stay up for the whole run and answer one measurement per request.
Every row is a group of cells (framewire variants and their Python peer); each
round runs every cell of the group once, the order reversed on odd rounds, so
the two sides see the same machine state. A figure is the median over rounds;
a ratio is computed per round (framewire cell and peer cell of the same round)
and its median and min-max are reported. Nothing here asserts a timing.

Writes to DIR (default target/bench-compare): table.md, results.json (every
round), serialize_per_element.png, transport_throughput.png.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
MODES = [("never", "False"), ("auto", "None"), ("always", "True")]
VARIANTS = [  # (cell, framewire variant, runtime flavor, label)
    ("connection", "connection", "2threads", "framewire Connection, Envelope[payload], recycled buffers"),
    ("connection_fresh", "connection_fresh", "2threads", "framewire Connection, fresh buffer per message"),
    ("connection_task", "connection_task", "2threads", "framewire Connection, task message (dumps/loads+deserialize)"),
    ("connection_task_1t", "connection_task", "1thread", "framewire Connection, task message, 1-thread runtime"),
    ("framecodec", "framecodec", "2threads", "Framed<_, FrameCodec>"),
    ("length_delimited", "length_delimited", "2threads", "Framed<_, LengthDelimitedCodec>"),
    ("raw_writev", "raw_writev", "2threads", "raw writev + read_exact into a reused buffer"),
]


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


def median(xs):
    return statistics.median(xs) if xs else float("nan")


class Run:
    def __init__(self, workers, rounds, verbose=True):
        self.workers = workers
        self.rounds = rounds
        self.groups = {}  # group id -> {cell: [result per round]}
        self.verbose = verbose

    def group(self, gid, cells, rounds=None):
        """cells: {cell: (worker name, request)}; runs them interleaved."""
        rounds = rounds or self.rounds["default"]
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
        if self.verbose:
            print(f"  {gid}: {rounds} rounds, {time.time() - t0:.1f} s", file=sys.stderr, flush=True)
        return out

    def reset(self):
        for w in self.workers.values():
            w.call({"op": "reset"})


# ---- the measurements ---------------------------------------------------------------------


def serde_cells(struct, mode, n, min_time):
    req = {"op": "serde", "struct": struct, "mode": mode, "n": n, "min_time": min_time}
    cells = {"fw": ("rust", req), "dask": ("python", req)}
    if struct == "tuple_small_ints":
        # The same tuple built as a packed Value::IntArray (what framewire's own
        # deserialize returns for it) instead of a Value::Int per element.
        cells["fw_packed"] = ("rust", dict(req, struct="tuple_small_ints_packed"))
    return cells


def plan_serialize(run, quick, min_time):
    ns = [10, 1000, 100_000, 1_000_000]
    for struct in ["tuple_small_ints", "list_bytes8"]:
        for n in ns:
            for mode, _ in MODES:
                # Python takes 5-30 s per call at 1e6 when it iterates; in --quick only the
                # table's cells run at N >= 1e5 where Dask iterates.
                dask_iterates = mode == "always" or (struct == "list_bytes8" and mode == "auto")
                table_cell = n == 1_000_000 and (struct == "tuple_small_ints" or mode == "auto")
                if quick and dask_iterates and n >= 100_000 and not table_cell:
                    continue
                run.group(f"serde/{struct}/{mode}/{n}", serde_cells(struct, mode, n, min_time))
        run.reset()


def plan_dumps(run, quick, min_time):
    cells = {}
    for size in [KIB, GIB]:
        req = {"op": "dumps", "size": size, "min_time": min_time}
        cells[f"fw/{size}"] = ("rust", req)
        cells[f"dask/{size}"] = ("python", req)
    run.group("dumps", cells)
    run.reset()


TRANSPORT_COUNTS = {KIB: (5000, 20000), 64 * KIB: (1000, 4000), 64 * MIB: (5, 12), 512 * MIB: (None, 3)}


def plan_transport(run, quick, min_time):
    for size, (q, full) in TRANSPORT_COUNTS.items():
        count = q if quick else full
        if count is None:
            continue
        cells = {}
        for cell, variant, flavor, _ in VARIANTS:
            cells[cell] = ("rust", {"op": "transport", "variant": variant, "size": size,
                                    "count": count, "flavor": flavor})
        cells["dask"] = ("python", {"op": "transport", "size": size, "count": count})
        run.group(f"transport/{size}", cells, rounds=run.rounds["transport"] if size < 512 * MIB else 3)
    run.reset()


def plan_msgs(run, quick, min_time):
    count = 10000 if quick else 20000
    cells = {f"fw_{f}": ("rust", {"op": "small_one_way", "count": count, "flavor": f})
             for f in ["1thread", "2threads"]}
    cells["dask"] = ("python", {"op": "small_one_way", "count": count})
    run.group("small_one_way", cells, rounds=run.rounds["transport"])
    count = 2000 if quick else 5000
    cells = {f"fw_{f}": ("rust", {"op": "round_trip", "count": count, "flavor": f})
             for f in ["1thread", "2threads"]}
    cells["dask"] = ("python", {"op": "round_trip", "count": count})
    run.group("round_trip", cells, rounds=run.rounds["transport"])


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
    cells["dask/loads"] = ("python", {"op": "typed", "case": "compute-task_1", "path": "loads", "min_time": min_time})
    run.group("typed/compute-task", cells)
    cells = {}
    for path in ["dumps", "typed_encode", "typed_encode_value"]:
        cells[f"fw/{path}"] = ("rust", {"op": "typed", "case": "task-finished_1", "path": path, "min_time": min_time})
    cells["dask/dumps"] = ("python", {"op": "typed", "case": "task-finished_1", "path": "dumps", "min_time": min_time})
    run.group("typed/task-finished", cells)


PLANS = {"serialize": plan_serialize, "dumps": plan_dumps, "transport": plan_transport,
         "msgs": plan_msgs, "rss": plan_rss, "typed": plan_typed, "wire": plan_wire}


# ---- figures ------------------------------------------------------------------------------


def ns_per_elem(res, n):
    return res["per_call_s"] / n * 1e9


def gibs(res):
    return res["bytes"] / res["secs"] / GIB


def rate(res):
    return res["count"] / res["secs"]


def rss_overhead_mib(res):
    size = res.get("size", res["payload"])
    return (res["hwm_after"] - res["rss_before"] - size) / MIB


def fmt_num(x, unit):
    if x != x:
        return "-"
    if unit == "ns/elem":
        return f"{x:,.0f} ns/elem" if x >= 100 else f"{x:.1f} ns/elem"
    if unit == "us":
        return f"{x:,.1f} µs" if x < 1000 else f"{x / 1000:,.1f} ms"
    if unit == "GiB/s":
        return f"{x:.2f} GiB/s"
    if unit == "msgs/s":
        return f"{x:,.0f}/s"
    if unit == "MiB":
        return f"{x:+,.0f} MiB"
    if unit == "x":
        return f"{x:.2f}×"
    return f"{x:g} {unit}"


def spread(xs, unit):
    if not xs:
        return "-"
    return f"{fmt_num(min(xs), unit)} – {fmt_num(max(xs), unit)}"


class Table:
    def __init__(self):
        self.rows = []

    def pair(self, what, fw, peer, unit, higher_better, note=""):
        """fw, peer: per-round figures (same rounds, same order)."""
        ratios = [(f / p if higher_better else p / f) for f, p in zip(fw, peer) if f and p]
        self.rows.append([
            what,
            f"{fmt_num(median(fw), unit)}",
            f"{fmt_num(median(peer), unit)}",
            fmt_num(median(ratios), "x") if ratios else "-",
            f"fw {spread(fw, unit)}; peer {spread(peer, unit)}; ratio {spread(ratios, 'x')}",
            note,
        ])

    def single(self, what, fw, peer, fw_unit, note="", spread_text=""):
        self.rows.append([what, fw, peer, "-", spread_text, note])

    def markdown(self):
        out = ["| row | framewire | peer | ratio (>1: framewire ahead) | spread (min – max over rounds) | notes |",
               "|---|---|---|---|---|---|"]
        for r in self.rows:
            out.append("| " + " | ".join(r) + " |")
        return "\n".join(out)


def build_table(groups):
    t = Table()
    g = groups
    for mode, flag in MODES:
        key = f"serde/tuple_small_ints/{mode}/1000000"
        if key in g:
            fw = [ns_per_elem(r, 1e6) for r in g[key]["fw"]]
            dk = [ns_per_elem(r, 1e6) for r in g[key]["dask"]]
            frames = f"frames: fw {g[key]['fw'][0]['frames']:,}, Dask {g[key]['dask'][0]['frames']:,}"
            t.pair(f"serialize+deserialize, tuple of 1e6 small ints, {mode} (Dask iterate_collection={flag}) vs Dask",
                   fw, dk, "ns/elem", False, frames)
            if "fw_packed" in g[key]:
                fp = [ns_per_elem(r, 1e6) for r in g[key]["fw_packed"]]
                t.pair(f"the same, input built packed (`Value::IntArray`), {mode} vs Dask",
                       fp, dk, "ns/elem", False, f"frames: fw {g[key]['fw_packed'][0]['frames']:,}")
    key = "serde/list_bytes8/auto/1000000"
    if key in g:
        fw = [ns_per_elem(r, 1e6) for r in g[key]["fw"]]
        dk = [ns_per_elem(r, 1e6) for r in g[key]["dask"]]
        frames = f"frames: fw {g[key]['fw'][0]['frames']:,}, Dask {g[key]['dask'][0]['frames']:,}"
        t.pair("serialize+deserialize, list of 1e6 8-byte bytes, auto (Dask iterate_collection=None) vs Dask",
               fw, dk, "ns/elem", False, frames)
    if "dumps" in g:
        d = g["dumps"]
        per = {k: [r["per_call_s"] * 1e6 for r in v] for k, v in d.items()}
        for size, name in [(KIB, "1 KiB"), (GIB, "1 GiB")]:
            frames = f"frames: fw {d[f'fw/{size}'][0]['frames']}, Dask {d[f'dask/{size}'][0]['frames']}"
            t.pair(f"dumps of a task message with a {name} Serialize'd payload vs Dask",
                   per[f"fw/{size}"], per[f"dask/{size}"], "us", False, frames)
        fr = [b / a for a, b in zip(per[f"fw/{KIB}"], per[f"fw/{GIB}"])]
        dr = [b / a for a, b in zip(per[f"dask/{KIB}"], per[f"dask/{GIB}"])]
        verdict = "met" if median(fr) <= 2 else "NOT met"
        t.single("dumps time, 1 GiB payload / 1 KiB payload (framewire target ≤ 2×)",
                 fmt_num(median(fr), "x"), f"Dask {fmt_num(median(dr), 'x')}", "x",
                 f"target ≤ 2×: {verdict}", f"fw {spread(fr, 'x')}; Dask {spread(dr, 'x')}")
    key = f"transport/{64 * MIB}"
    if key in g:
        tr = g[key]
        peer = [gibs(r) for r in tr["dask"]]
        for cell, _, flavor, label in VARIANTS:
            t.pair(f"64 MiB one way: {label} ({flavor}) vs Python comm (one process)",
                   [gibs(r) for r in tr[cell]], peer, "GiB/s", True)
        t.pair("64 MiB one way: framewire Connection (recycled) vs raw writev loop (reused buffer)",
               [gibs(r) for r in tr["connection"]], [gibs(r) for r in tr["raw_writev"]], "GiB/s", True,
               "peer = the raw loop")
        t.pair("64 MiB one way: framewire Connection (recycled) vs Framed<_, LengthDelimitedCodec>",
               [gibs(r) for r in tr["connection"]], [gibs(r) for r in tr["length_delimited"]], "GiB/s", True,
               "peer = LengthDelimitedCodec")
    key = f"transport/{512 * MIB}"
    if key in g:
        tr = g[key]
        peer = [gibs(r) for r in tr["dask"]]
        for cell, _, flavor, label in VARIANTS:
            if cell in ("connection", "connection_task", "framecodec", "raw_writev"):
                t.pair(f"512 MiB one way: {label} ({flavor}) vs Python comm (one process)",
                       [gibs(r) for r in tr[cell]], peer, "GiB/s", True, "full run only")
    for gid, what in [("small_one_way", "1 KiB task messages one way (dumps+send, recv+loads+deserialize)"),
                      ("round_trip", "request/response round trips (ping/pong)")]:
        if gid in g:
            peer = [rate(r) for r in g[gid]["dask"]]
            for f in ["1thread", "2threads"]:
                t.pair(f"{what}: framewire Connection ({f}) vs Python comm (one process)",
                       [rate(r) for r in g[gid][f"fw_{f}"]], peer, "msgs/s", True)
    for gid, dyn, typed, via_value, py, what in [
            ("typed/compute-task", "fw/loads", "fw/typed_decode", "fw/typed_decode_value", "dask/loads",
             "captured compute-task batch: decode"),
            ("typed/task-finished", "fw/dumps", "fw/typed_encode", "fw/typed_encode_value", "dask/dumps",
             "captured task-finished batch: encode")]:
        if gid in g:
            us = {k: [r["per_call_s"] * 1e6 for r in v] for k, v in g[gid].items()}
            typed_name = "from_frames into Vec<SchedulerToWorker>" if "decode" in what \
                else "to_frames of Vec<WorkerToScheduler>"
            value_name = "loads + from_value" if "decode" in what else "to_value + dumps"
            dyn_name = "loads into a Value" if "decode" in what else "dumps of the equal Value"
            py_name = "protocol.loads(deserialize=True), which also unpickles the run_spec" if "decode" in what \
                else "protocol.dumps"
            t.pair(f"{what}: typed ({typed_name}) vs the dynamic path ({dyn_name}); target ≤ 1.5× its time",
                   us[typed], us[dyn], "us", False, "peer = framewire's dynamic path")
            t.pair(f"{what}: typed vs Python {py_name}; target ≥ 10×",
                   us[typed], us[py], "us", False)
            t.pair(f"{what}: typed through a Value ({value_name}) vs the dynamic path ({dyn_name})",
                   us[via_value], us[dyn], "us", False, "peer = framewire's dynamic path")
    if "wire/64MiB" in g:
        w = g["wire/64MiB"]
        gb = {k: [gibs(r) for r in v] for k, v in w.items()}
        suite = w["fw/tls"][0].get("cipher")
        py_suite = w["dask/tls"][0].get("cipher")
        t.pair("64 MiB ndarray messages one way over tls://, two processes each: framewire vs Python comm; "
               "target ≥ 1.0×", gb["fw/tls"], gb["dask/tls"], "GiB/s", True,
               f"cipher: framewire {suite}, Python {py_suite}")
        t.pair("the same: framewire over tls:// vs framewire over tcp://; target ≥ 0.7×",
               gb["fw/tls"], gb["fw/tcp"], "GiB/s", True, "peer = framewire tcp://")
        t.pair("64 MiB ndarray messages one way over tcp://, two processes each: framewire vs Python comm",
               gb["fw/tcp"], gb["dask/tcp"], "GiB/s", True)
        t.pair("the same: Python over tls:// vs Python over tcp://",
               gb["dask/tls"], gb["dask/tcp"], "GiB/s", True, "both Python")
    if "connect" in g:
        c = g["connect"]
        ms = {k: [median(r["times"]) * 1e6 for r in v] for k, v in c.items()}
        for scheme in ["tls", "tcp"]:
            t.pair(f"connect + {'TLS + ' if scheme == 'tls' else ''}Dask handshake + one identity round trip to "
                   f"a real `dask scheduler` over {scheme}://: framewire vs Python"
                   + ("; target ≤ Python's time" if scheme == "tls" else ""),
                   ms[f"fw/{scheme}"], ms[f"dask/{scheme}"], "us", False,
                   f"median of {len(c[f'fw/{scheme}'][0]['times'])} calls per round")
    if "rss" in g:
        r = g["rss"]
        dk = [rss_overhead_mib(x) for x in r["dask"]]
        for cell, label in [("fw_frames", "frames kept"), ("fw_deserialized", "loads + deserialize_blocks, value kept")]:
            fw = [rss_overhead_mib(x) for x in r[cell]]
            verdict = "met" if median(fw) <= 64 else "NOT met"
            t.single(f"peak RSS receiving one 512 MiB ndarray (8 × 64 MiB shards): framewire {label}, vs Dask "
                     "(deserialize=True); figure = VmHWM − VmRSS before − payload",
                     fmt_num(median(fw), "MiB"), f"Dask {fmt_num(median(dk), 'MiB')}", "MiB",
                     f"target ≤ payload + 64 MiB: {verdict}",
                     f"fw {spread(fw, 'MiB')}; Dask {spread(dk, 'MiB')}")
    return t


# ---- plots --------------------------------------------------------------------------------


def plots(groups, out_dir):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("bench-compare: matplotlib missing, no plots", file=sys.stderr)
        return []
    written = []
    colors = {"never": "tab:blue", "auto": "tab:green", "always": "tab:red"}
    structs = [s for s in ["tuple_small_ints", "list_bytes8"] if any(k.startswith(f"serde/{s}/") for k in groups)]
    if structs:
        fig, axes = plt.subplots(1, len(structs), figsize=(5.5 * len(structs), 4), squeeze=False)
        for ax, struct in zip(axes[0], structs):
            for mode, flag in MODES:
                for side, style, label in [("fw", "-o", "framewire"), ("dask", "--s", "Dask")]:
                    pts = []
                    for key, cells in groups.items():
                        parts = key.split("/")
                        if parts[0] == "serde" and parts[1] == struct and parts[2] == mode:
                            n = int(parts[3])
                            v = [ns_per_elem(r, n) for r in cells[side]]
                            pts.append((n, median(v), min(v), max(v)))
                    if not pts:
                        continue
                    pts.sort()
                    xs = [p[0] for p in pts]
                    ys = [p[1] for p in pts]
                    err = [[p[1] - p[2] for p in pts], [p[3] - p[1] for p in pts]]
                    ax.errorbar(xs, ys, yerr=err, fmt=style, color=colors[mode], capsize=2, ms=4,
                                label=f"{label} {mode} ({'iterate_collection=' + flag if side == 'dask' else mode})")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("N (elements)")
            ax.set_ylabel("serialize+deserialize, ns per element")
            ax.set_title(struct)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=6)
        fig.tight_layout()
        path = os.path.join(out_dir, "serialize_per_element.png")
        fig.savefig(path, dpi=90)
        plt.close(fig)
        written.append(path)
    sizes = sorted(int(k.split("/")[1]) for k in groups if k.startswith("transport/"))
    if sizes:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for cell, _, flavor, label in VARIANTS + [("dask", None, "1 process", "Python distributed.comm")]:
            pts = []
            for size in sizes:
                v = [gibs(r) for r in groups[f"transport/{size}"][cell]]
                pts.append((size, median(v), min(v), max(v)))
            err = [[p[1] - p[2] for p in pts], [p[3] - p[1] for p in pts]]
            ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=err, fmt="--s" if cell == "dask" else "-o",
                        capsize=2, ms=4, label=f"{label} ({flavor})")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(sizes)
        ax.set_xticklabels([f"{s // MIB} MiB" if s >= MIB else f"{s // KIB} KiB" for s in sizes])
        ax.set_xlabel("message payload")
        ax.set_ylabel("GiB/s, one way, loopback TCP")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
        fig.tight_layout()
        path = os.path.join(out_dir, "transport_throughput.png")
        fig.savefig(path, dpi=90)
        plt.close(fig)
        written.append(path)
    return written


def environment(python_worker_exe):
    def sh(*argv):
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip()
        except OSError:
            return "?"

    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    versions = sh(python_worker_exe, "-c",
                  "import distributed, msgpack, numpy, sys; "
                  "print(f'distributed {distributed.__version__}, msgpack {msgpack.version}, "
                  "numpy {numpy.__version__}, python {sys.version.split()[0]}')")
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "cpu": cpu, "nproc": os.cpu_count(), "loadavg": os.getloadavg(),
        "git": sh("git", "-C", HERE, "rev-parse", "--short", "HEAD"),
        "rustc": sh("rustc", "--version"), "python": versions, "platform": platform.platform(),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rust-worker")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default=",".join(PLANS), help="categories: " + ",".join(PLANS))
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--out", default="target/bench-compare")
    ap.add_argument("--from-results", metavar="JSON",
                    help="no measurement: rebuild the table and plots of an earlier results.json")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.from_results:
        with open(a.from_results) as fh:
            saved = json.load(fh)
        print(render(saved["environment"], saved["groups"], a.out))
        return
    # Transport rows are cheaper per round and noisier: more, shorter rounds.
    rounds = {"default": a.rounds or (3 if a.quick else 7),
              "transport": a.rounds or (5 if a.quick else 9)}
    min_time = 0.05 if a.quick else 0.25
    if not a.rust_worker:
        ap.error("--rust-worker is required (scripts/bench-compare passes it)")
    t0 = time.time()
    env = environment(sys.executable)
    workers = {
        "rust": Worker("framewire", [a.rust_worker, "serve"]),
        "python": Worker("Python Dask", [sys.executable, os.path.join(HERE, "dask_peer.py"), "serve"]),
    }
    run = Run(workers, rounds)
    run.rust_exe, run.out_dir = a.rust_worker, a.out
    try:
        for cat in a.only.split(","):
            print(f"bench-compare: {cat}", file=sys.stderr, flush=True)
            PLANS[cat](run, a.quick, min_time)
    finally:
        for w in workers.values():
            w.close()
    wall = time.time() - t0
    env["loadavg_end"] = os.getloadavg()
    env["wall_s"] = wall
    env["mode"] = "quick" if a.quick else "full"
    env["rounds"] = rounds
    with open(os.path.join(a.out, "results.json"), "w") as fh:
        json.dump({"environment": env, "groups": run.groups}, fh, indent=1)
    print(render(env, run.groups, a.out))
    print(f"wrote {os.path.join(a.out, 'results.json')}", file=sys.stderr)
    print(f"bench-compare: {wall:.0f} s", file=sys.stderr)


def render(env, groups, out_dir):
    """Writes table.md and the plots; returns the table's markdown."""
    quick = env["mode"] == "quick"
    rounds = env["rounds"]
    header = (f"<!-- bench-compare {'--quick' if quick else '(full)'}: {env['date']}, git {env['git']}, "
              f"{env['nproc']} × {env['cpu']}, load average {env['loadavg'][0]:.1f} → {env['loadavg_end'][0]:.1f}, "
              f"rounds: {rounds['default']} (serialize, dumps), {rounds['transport']} (transport, messages), "
              f"{2 if quick else 3} (RSS); wall {env['wall_s']:.0f} s; {env['rustc']}; {env['python']} -->")
    md = header + "\n\n" + build_table(groups).markdown() + "\n"
    with open(os.path.join(out_dir, "table.md"), "w") as fh:
        fh.write(md)
    for p in plots(groups, out_dir) + [os.path.join(out_dir, "table.md")]:
        print(f"wrote {p}", file=sys.stderr)
    return md


if __name__ == "__main__":
    main()
