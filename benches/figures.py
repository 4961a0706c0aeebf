#!/usr/bin/env python3
"""BENCHMARKS.md's tables, rendered from the results files of the runs that
measured them (standard library only).

Every table of figures in BENCHMARKS.md lies in a region

    <!-- table:NAME -->
    > commit 1a2b3c4 · 2026-12-03 19:45 UTC · 2 × CPU, L3 32768K · load average ... · command: `...` · results: `docs/bench/NAME.json`

    ...the table...
    <!-- /table:NAME -->

that the script which measured it writes from the results file it keeps,
docs/bench/NAME.json (the header line: commit, date, machine, load at the
start and end of the run, the exact command). No figure in a table is typed
by hand: `check` renders every region again from its results file and
compares.

    figures.py env                 the environment at the start of a run (JSON on stdout)
    figures.py record NAME --env FILE --data FILE --command CMD
                                   keeps a run's results as docs/bench/NAME.json and
                                   renders its region (tap-overhead, tap-memory, tap-micro)
    figures.py render [NAME...]    every region (or these) again from docs/bench/
    figures.py check [FILE]        fails when a table of FILE (default BENCHMARKS.md) lies
                                   outside a region, a region's header lacks a commit or a
                                   command, or a region is not what its results file renders

scripts/bench-compare and scripts/bench-worker record their regions
themselves (through `record`); the tap scripts call this file.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DOC = os.path.join(ROOT, "BENCHMARKS.md")
RESULTS = os.path.join(ROOT, "docs", "bench")
# A run that starts with a load average of at least this share of the cores
# was taken on a loaded machine (other work running), and says so.
LOADED = 0.5
# A run during which the hypervisor took at least this share of the CPU time
# (steal, /proc/stat) ran on a busy host, and says so.
STOLEN = 0.05

OPEN = re.compile(r"^<!-- table:([a-z0-9-]+) -->$")
CLOSE = re.compile(r"^<!-- /table:([a-z0-9-]+) -->$")
HEADER = re.compile(r"^> commit [0-9a-f]{7,}\b.* · command: `[^`]+`")
SEPARATOR = re.compile(r"^\|\s*:?-{3,}")


# ---- the environment of a run -------------------------------------------------------------


def _git(*args):
    try:
        return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True,
                              timeout=30).stdout.strip()
    except OSError:
        return ""


def environment():
    """The machine and the tree at the start of a run. A tree with changes
    outside BENCHMARKS.md and docs/bench/ (what rendering itself writes) is
    marked `+ changes`."""
    cpu = "?"
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    llc = "?"
    levels = []
    for d in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*"):
        try:
            with open(os.path.join(d, "level")) as lv, open(os.path.join(d, "size")) as sz:
                levels.append((int(lv.read()), sz.read().strip()))
        except (OSError, ValueError):
            pass
    if levels:
        level, size = max(levels)
        llc = f"L{level} {size}"
    dirty = _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!BENCHMARKS.md",
                 ":!docs/bench")
    return {
        "commit": (_git("rev-parse", "--short=7", "HEAD") or "?") + (" + changes" if dirty else ""),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "started": time.time(),
        "cpu": cpu,
        "llc": llc,
        "nproc": os.cpu_count(),
        "load_start": round(os.getloadavg()[0], 2),
        "cpu_times": cpu_times(),
    }


def cpu_times():
    """(stolen, total) jiffies of all CPUs so far (/proc/stat): time the
    hypervisor gave to other guests while this one had work, and all time."""
    try:
        with open("/proc/stat") as fh:
            fields = [int(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal (guest times are inside user)
    return [fields[7] if len(fields) > 7 else 0, sum(fields[:8])]


def finish(env):
    """`env` with the load average at the end and the wall time."""
    env = dict(env)
    env.setdefault("load_end", round(os.getloadavg()[0], 2))
    start, end = env.pop("cpu_times", None), cpu_times()
    if start and end and end[1] > start[1]:
        env["steal"] = round((end[0] - start[0]) / (end[1] - start[1]), 3)
    started = env.pop("started", None)
    if started is not None:
        env["wall_s"] = round(time.time() - started)
    return env


def loaded(env):
    return env["load_start"] >= LOADED * env["nproc"]


def header(rec):
    env = rec["environment"]
    load = f"load average {env['load_start']:.2f} at the start, {env['load_end']:.2f} at the end"
    if loaded(env):
        load += " (**a loaded machine**: other work was running, figures indicative only)"
    if "steal" in env:
        load += f", {env['steal']:.0%} of CPU time stolen by the hypervisor"
        if env["steal"] >= STOLEN:
            load += " (**a busy host**: absolute figures low, ratios of the same rounds still paired)"
    return (f"> commit {env['commit']} · {env['date']} · {env['nproc']} × {env['cpu']}, {env['llc']} · "
            f"{load} · command: `{rec['command']}` · results: `docs/bench/{rec['name']}.json`")


# ---- results files ------------------------------------------------------------------------


def rounded(x, digits=4):
    """`x` with every float cut to `digits` significant digits (results files
    stay small; tables are rendered from the rounded figures, so that
    rendering again from the file gives the same table)."""
    if isinstance(x, float):
        return float(f"{x:.{digits}g}") if x == x else None
    if isinstance(x, dict):
        return {k: rounded(v, digits) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [rounded(v, digits) for v in x]
    return x


def dump_record(rec):
    """One line per top-level key, and per entry of `data`: small diffs."""
    lines = []
    for k, v in rec.items():
        if k == "data" and isinstance(v, dict) and v:
            inner = ",\n".join(f"  {json.dumps(dk)}: {json.dumps(dv, separators=(',', ':'), ensure_ascii=False)}"
                               for dk, dv in v.items())
            lines.append(f"{json.dumps(k)}: {{\n{inner}\n}}")
        else:
            lines.append(f"{json.dumps(k)}: {json.dumps(v, separators=(',', ':'), ensure_ascii=False)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def record(name, env, data, command, doc=DOC, results=RESULTS):
    """Keeps a run's results as RESULTS/NAME.json and renders region NAME of
    `doc` from that file. Returns the region's markdown."""
    rec = {"name": name, "command": command, "environment": rounded(finish(env)), "data": rounded(data)}
    os.makedirs(results, exist_ok=True)
    path = os.path.join(results, f"{name}.json")
    with open(path, "w") as fh:
        fh.write(dump_record(rec))
    with open(path) as fh:
        rec = json.load(fh)
    md = render_record(rec)
    replace_region(doc, name, md)
    print(f"wrote {os.path.relpath(path, ROOT)} and its table in {os.path.relpath(doc, ROOT)}", file=sys.stderr)
    return md


def render_record(rec):
    name = rec["name"]
    if name.startswith("compare-"):
        sys.path.insert(0, HERE)
        import compare_tables
        body = compare_tables.render_category(rec)
    elif name in RENDERERS:
        body = RENDERERS[name](rec["data"])
    elif name.startswith("swarm-fidelity-"):
        # Another setup of the fidelity run (`--fidelity-workers`,
        # `--fidelity-task-ms`).
        body = render_swarm_fidelity(rec["data"])
    else:
        raise SystemExit(f"figures: no renderer for {name}")
    return header(rec) + "\n\n" + body.strip("\n")


def replace_region(doc, name, md):
    with open(doc) as fh:
        text = fh.read()
    start, end = f"<!-- table:{name} -->", f"<!-- /table:{name} -->"
    i, j = text.find(start), text.find(end)
    if i < 0 or j < i:
        raise SystemExit(f"figures: {doc} has no region {start} … {end} for these figures")
    text = text[:i] + start + "\n" + md + "\n" + text[j:]
    with open(doc, "w") as fh:
        fh.write(text)


def regions(text):
    """[(name, first line, body lines)] and the problems of the markers."""
    out, problems, current = [], [], None
    seen = set()
    for n, line in enumerate(text.splitlines(), 1):
        if m := OPEN.match(line):
            if current:
                problems.append(f"line {n}: region {m[1]} opens inside region {current[0]}")
            if m[1] in seen:
                problems.append(f"line {n}: a second region {m[1]}")
            seen.add(m[1])
            current = (m[1], n, [])
        elif m := CLOSE.match(line):
            if not current or current[0] != m[1]:
                problems.append(f"line {n}: region {m[1]} closes but is not open")
            else:
                out.append(current)
            current = None
        elif current:
            current[2].append(line)
    if current:
        problems.append(f"line {current[1]}: region {current[0]} never closes")
    return out, problems


# ---- the check ----------------------------------------------------------------------------


def check(doc=DOC, results=RESULTS):
    """The problems of `doc`'s tables (an empty list: none)."""
    with open(doc) as fh:
        text = fh.read()
    found, problems = regions(text)
    inside = set()
    for name, first, body in found:
        inside.update(range(first, first + len(body) + 2))
        head = next((line for line in body if line.strip()), "")
        if not HEADER.match(head):
            problems.append(f"line {first}: table {name}: its header lacks a commit and a command "
                            "(a first line `> commit HASH · … · command: …`)")
            continue
        path = os.path.join(results, f"{name}.json")
        if not os.path.exists(path):
            problems.append(f"line {first}: table {name}: no results file {os.path.relpath(path, ROOT)}")
            continue
        with open(path) as fh:
            want = render_record(json.load(fh))
        if "\n".join(body).strip("\n") != want:
            problems.append(f"line {first}: table {name} is not what {os.path.relpath(path, ROOT)} renders "
                            "(edited by hand? `python3 benches/figures.py render` writes it again)")
    lines = text.splitlines()
    fenced = False
    for n, line in enumerate(lines, 1):
        if line.startswith("```"):
            fenced = not fenced
        if fenced or n in inside:
            continue
        if line.startswith("|") and n < len(lines) and SEPARATOR.match(lines[n]):
            problems.append(f"line {n}: a table outside a rendered region (no commit, no command)")
    return problems


# ---- the small tables ---------------------------------------------------------------------


def median(xs):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = len(xs) // 2
    return xs[k] if len(xs) % 2 else (xs[k - 1] + xs[k]) / 2


def verdict(ok):
    return "met" if ok else "**missed**"


def spread(xs, fmt):
    return f"{fmt % median(xs)} ({fmt % min(xs)}–{fmt % max(xs)})"


def render_tap_overhead(d):
    """`tests/dask/tap_cluster.py overhead`'s rounds: wall time of the
    dask.array workload per mode, each round a fresh cluster per mode."""
    modes = d["modes"]
    first = next(iter(modes))
    out = [f"The dask.array workload of `tests/dask/tap_cluster.py` ({d['array_mb']} MB: reductions and a P2P "
           f"rechunk) on fresh clusters, {d['rounds']} rounds, modes alternated; ratio = median wall time / "
           f"{first}'s; cpu = CPU time of the cluster's processes per run; others = CPU time the rest of the "
           "machine took during a run.", "",
           "| mode | wall time, s: median (min–max) | ratio | cpu s | cpu ratio | taps' cpu s | others s | notes |",
           "|---|---|---|---|---|---|---|---|"]
    for label, m in modes.items():
        notes = []
        if "relayed" in m:
            notes.append(f"no tap error; relayed {m['relayed'] / 1e6:,.0f} MB over the rounds, "
                         f"{100 * m['spliced'] / max(m['relayed'], 1):.1f} % spliced, "
                         f"{m['copied'] / 1e6:,.1f} MB copied")
        if label == "taps":
            notes.append(f"target ≤ 1.08× {first}: {verdict(m['ratio_to_first'] <= 1.08)}")
        note = "; ".join(notes)
        out.append(f"| {label} | {m['median_s']:.3f} ({m['min_s']:.3f}–{m['max_s']:.3f}) | "
                   f"{m['ratio_to_first']:.3f}× | {m['cpu_s']:.2f} | {m['cpu_ratio_to_first']:.3f}× | "
                   f"{m['taps_cpu_s']:.3f} | {m['others_s']:.2f} | {note} |")
    return "\n".join(out)


def render_tap_memory(d):
    """scripts/tap-memory's measures: a tap's VmRSS idle, then with N idle
    Dask connections relayed."""
    out = ["| tap | VmRSS idle, KiB | with the connections, KiB | connections | handshakes relayed | "
           "per connection, KiB | notes |", "|---|---|---|---|---|---|---|"]
    for m in d["measures"]:
        per = (m["busy_kib"] - m["idle_kib"]) / m["connections"]
        out.append(f"| {m['label']} | {m['idle_kib']:,} | {m['busy_kib']:,} | {m['connections']:,} | "
                   f"{m['handshakes']:,} | {per:.2f} | target ≤ 16 KiB per idle connection: "
                   f"{verdict(per <= 16)} |")
    return "\n".join(out)


def render_tap_micro(d):
    """benches/tap_micro.py's rounds: throughput of large messages and round
    trips of a small one, direct and through the tap."""
    gb = d["size"] * d["count"] / 1e9
    out = [f"Throughput: {d['count']} messages of {d['size'] // (1 << 20)} MiB one way; round trip: a 100-byte "
           f"message echoed, the median of {d['trips']} per round. {d['rounds']} rounds, modes interleaved. "
           "`copy` is the tap with `--no-splice`.", "",
           "| mode | one way, GB/s: median (min–max) | tap's CPU s per run | round trip, µs: median (min–max) | "
           "tap's CPU µs per round trip |", "|---|---|---|---|---|"]
    for label, m in d["modes"].items():
        rates = [gb / s for s in m["throughput_s"]]
        us = [x * 1e6 for x in m["round_trip_s"]]
        cpu_rt = median(m["round_trip_cpu_s"]) / d["trips"] * 1e6
        out.append(f"| {label} | {spread(rates, '%.2f')} | {median(m['throughput_cpu_s']):.3f} | "
                   f"{spread(us, '%.1f')} | {cpu_rt:.1f} |")
    return "\n".join(out)


def render_worker(d):
    """tests/dask/bench_worker.py's rounds: the Rust data worker against a
    Python worker in one cluster."""
    mib = 1 << 20
    fr, fp = d["fetch_mb_s"]["rust"], d["fetch_mb_s"]["python"]
    sr, sp = d["small_s"]["rust"], d["small_s"]["python"]
    total = lambda rows: [r[2] for r in rows]
    fetch = median(fr) / median(fp)
    small = median(total(sp)) / median(total(sr))
    out = [f"{d['rounds']} rounds, alternating which side goes first; median (min–max) over rounds.", "",
           "| measure | from/to the Rust data worker | from/to a Python worker | ratio (medians) | notes |",
           "|---|---|---|---|---|",
           f"| a Python worker fetching a {d['mib']} MiB numpy array, MB/s (higher is better) | "
           f"{spread(fr, '%.0f')} | {spread(fp, '%.0f')} | {fetch:.2f}× | target ≥ 1.0×: {verdict(fetch >= 1.0)} |",
           f"| {d['small']:,} small keys scattered then gathered, s (lower is better) | "
           f"{spread(total(sr), '%.3f')} | {spread(total(sp), '%.3f')} | {small:.2f}× | "
           f"target ≥ 1.0×: {verdict(small >= 1.0)} |",
           f"| of which scatter, s | {spread([r[0] for r in sr], '%.3f')} | "
           f"{spread([r[0] for r in sp], '%.3f')} | | |",
           f"| of which gather, s | {spread([r[1] for r in sr], '%.3f')} | "
           f"{spread([r[1] for r in sp], '%.3f')} | | |"]
    rust, py = d["rss"]["rust"], d["rss"]["python"]
    n = rust["held"]
    over = lambda m: (m["after"] - n) / mib
    out.append(f"| resident memory holding N = {n // mib} MiB, MiB | {held(rust, n)} | {held(py, n)} | | "
               f"target ≤ N + 32 MiB (Rust): {verdict(over(rust) <= 32)} |")
    out += ["", "Every round, in order (round i: the Rust worker first when i is even):", "",
            "| round | fetch MB/s, Rust | fetch MB/s, Python | small keys s, Rust | small keys s, Python |",
            "|---|---|---|---|---|"]
    for i, row in enumerate(zip(fr, fp, total(sr), total(sp))):
        out.append(f"| {i} | {row[0]:.0f} | {row[1]:.0f} | {row[2]:.3f} | {row[3]:.3f} |")
    return "\n".join(out)


def held(m, n):
    """VmRSS after holding `n` bytes, as N + the rest."""
    mib = 1 << 20
    return f"{m['after'] / mib:.0f} = N + {(m['after'] - n) / mib:.0f} (before: {m['before'] / mib:.0f})"


# A swarm row counts as "the scheduler saturated" (issue 33's condition for
# its CPU target) when the workers could have run this many times the tasks
# per second they were given (workers × threads ÷ task time over the rate):
# the scheduler, not the tasks' own time, set the pace.
SATURATED = 2


def swarm_cpu_s(row, who):
    """`who`'s CPU seconds in a swarm row: on a CPU to the nanosecond
    (schedstat) where the run measured it, else user + system in ticks."""
    on_cpu = row.get(f"{who}_on_cpu_s")
    return on_cpu if on_cpu is not None else row[f"{who}_cpu_s"]


def swarm_share(row):
    """The swarm's CPU over the scheduler's in a swarm row (one run)."""
    sched = swarm_cpu_s(row, "scheduler")
    return swarm_cpu_s(row, "swarm") / sched if sched else 0


def spread_of(row):
    """` (lo–hi %)`: the range of a swarm row's shares over its runs, where
    it ran several times."""
    shares = row.get("shares")
    if not shares:
        return ""
    return f" ({100 * min(shares):.1f}–{100 * max(shares):.1f} %)"


def render_swarm(d):
    """tests/dask/swarm_bench.py: a real scheduler under `framewire swarm`,
    per cluster size and workload."""
    out = [f"Workloads of {d['size']:,} tasks (the shuffle: p = √size inputs each split in p pieces, "
           f"p outputs each taking one piece of every input), tasks of {d['task_ms']:g} ms, workers of 1 thread. Latency: the swarm's decision "
           "latency over the whole run at that size; CPU: during the workload. Scheduler busy: its CPU "
           "time over the wall time. The target (the swarm's CPU ≤ 10 % of the scheduler's) is issue 33's "
           "\"while the scheduler is saturated\", judged where the workers could have run at least "
           f"{SATURATED}× the tasks per second they were given (workers ÷ task time): there the scheduler "
           "sets the pace; elsewhere the tasks' own time does. Swarm busy: its CPU time over the wall time, "
           "of the one core its single-threaded runtime can use: below 100 % it is not what sets the pace."
           + (" CPU: time on a CPU of every thread (Linux schedstat, to the nanosecond)."
              if any(r.get("swarm_on_cpu_s") is not None for s in d["scales"] for r in s["rows"]) else "")
           + (f" Each size waited {d['settle_s']:g} s once its workers had registered, before the first "
              "workload (past their first heartbeats, each worker's 1 s after it registers)."
              if d.get("settle_s") else "")
           + (f" The swarm ran with {' '.join(f'`{a}`' for a in d['swarm_args'])}."
              if d.get("swarm_args") else "")
           + (f" Each workload ran {d['repeat']} times at each size, in turn: a row is the run whose "
              "swarm / scheduler CPU is the median, with the range of all the runs (the target judged "
              "on the median)." if d.get("repeat") else ""), "",
           "| workers | workload | tasks | wall s | tasks/s | decision latency p50 / p99, ms | "
           "scheduler CPU s | scheduler busy | swarm CPU s | swarm busy | swarm / scheduler CPU | swarm RSS idle per worker, KiB |",
           "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in d["scales"]:
        lat = s["decision_latency_ms"]
        for r in s["rows"]:
            sched_cpu, swarm_cpu = swarm_cpu_s(r, "scheduler"), swarm_cpu_s(r, "swarm")
            share = swarm_share(r)
            busy = sched_cpu / r["wall_s"] if r["wall_s"] else 0
            swarm_busy = swarm_cpu / r["wall_s"] if r["wall_s"] else 0
            capacity = s["workers"] * 1000 / d["task_ms"]
            judged = (f"target ≤ 10 %: {verdict(share <= 0.10)}" if capacity >= SATURATED * r["tasks_per_s"]
                      else "workers' time sets the pace: target not judged")
            out.append(f"| {s['workers']:,} | {r['workload']} | {r['tasks']:,} | {r['wall_s']:.2f} | "
                       f"{r['tasks_per_s']:.0f} | {lat['p50']} / {lat['p99']} | {sched_cpu:.2f} | "
                       f"{100 * busy:.0f} % | {swarm_cpu:.2f} | {100 * swarm_busy:.0f} % | {100 * share:.0f} %{spread_of(r)} ({judged}) | "
                       f"{s['swarm_rss_idle_per_worker'] / 1024:.1f} |")
    return "\n".join(out)


def render_swarm_fidelity(d):
    """tests/dask/swarm_bench.py --fidelity: one tree reduction against 8
    Python workers (tasks sleep 10 ms) and against 8 simulated ones."""
    f = d["rounds"]
    wall = {k: median([r["wall_s"] for r in v]) for k, v in f.items()}
    diff = wall["swarm"] / wall["python"] - 1
    out = [f"A tree reduction of {f['python'][0]['tasks']:,} tasks of {d.get('task_ms', 10):g} ms on {d.get('workers', 8)} workers of 1 thread, "
           f"{len(f['python'])} rounds each: Python workers {spread([r['wall_s'] for r in f['python']], '%.2f')} s, "
           f"simulated {spread([r['wall_s'] for r in f['swarm']], '%.2f')} s: {100 * diff:+.1f} % "
           f"(target within ±15 %: {verdict(abs(diff) <= 0.15)}).", "",
           "The scheduler's messages by op (`in:` a worker's stream op or `rpc:` a request handled, "
           "`out:` an op it sent on any batched stream, clients' included), medians over rounds "
           "(with their range, where the rounds differ):", "",
           "| op | Python workers | simulated | difference | within ±5 % |", "|---|---:|---:|---:|---|"]
    ops = sorted({op for v in f.values() for r in v for op in r["scheduler_messages"]})

    def counts(side, op):
        xs = [r["scheduler_messages"].get(op, 0) for r in f[side]]
        lo, hi = min(xs), max(xs)
        return median(xs), f"{median(xs):g}" + (f" ({lo:g}–{hi:g})" if lo != hi else "")

    for op in ops:
        (x, xc), (y, yc) = counts("python", op), counts("swarm", op)
        d_ = f"{100 * (y / x - 1):+.1f} %" if x else "–"
        ok = verdict(x > 0 and abs(y / x - 1) <= 0.05) if x else verdict(y == 0)
        out.append(f"| `{op}` | {xc} | {yc} | {d_} | {ok} |")
    if all("turnaround" in r for v in f.values() for r in v):
        out += ["", "Where a task's time goes, as the scheduler sees it (the time a `compute-task` was queued "
                "and its `task-finished` handled, on the scheduler; the `compute` start and stop the worker "
                "reported; one clock, one machine), in ms, the median over a round's tasks (the median and "
                "range over rounds): *run*, the `compute`; *between*, on a thread, from a run's end to the "
                "start of the next one the worker already had; *report*, from a run's end to its "
                "`task-finished` handled; *dispatch*, from the `compute-task` queued to the run's start "
                "(the wire both ways, fetching dependencies, and waiting for a thread).", "",
                "| part | Python workers | simulated |", "|---|---:|---:|"]
        for part in ("run", "between", "report", "dispatch"):
            cells = [spread([r["turnaround"][part]["p50_ms"] for r in f[k]], "%.2f")
                     for k in ("python", "swarm")]
            out.append(f"| {part} | {cells[0]} | {cells[1]} |")
    return "\n".join(out)


RENDERERS = {"tap-overhead": render_tap_overhead, "tap-memory": render_tap_memory,
             "tap-micro": render_tap_micro, "worker": render_worker, "swarm": render_swarm,
             "swarm-fidelity": render_swarm_fidelity}


# ---- command line -------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("env")
    r = sub.add_parser("record")
    r.add_argument("name")
    r.add_argument("--env", required=True, help="what `env` printed at the start of the run")
    r.add_argument("--data", required=True, help="the run's results (JSON)")
    r.add_argument("--command", required=True, help="the command that was run, as typed")
    r.add_argument("--doc", default=DOC)
    r.add_argument("--results", default=RESULTS)
    g = sub.add_parser("render")
    g.add_argument("names", nargs="*")
    g.add_argument("--doc", default=DOC)
    g.add_argument("--results", default=RESULTS)
    c = sub.add_parser("check")
    c.add_argument("doc", nargs="?", default=DOC)
    c.add_argument("--results", default=RESULTS)
    a = ap.parse_args()
    if a.cmd == "env":
        print(json.dumps(environment()))
    elif a.cmd == "record":
        with open(a.env) as fh:
            env = json.load(fh)
        with open(a.data) as fh:
            data = json.load(fh)
        print(record(a.name, env, data, a.command, a.doc, a.results))
    elif a.cmd == "render":
        paths = [os.path.join(a.results, f"{n}.json") for n in a.names] or \
            sorted(glob.glob(os.path.join(a.results, "*.json")))
        for path in paths:
            with open(path) as fh:
                rec = json.load(fh)
            replace_region(a.doc, rec["name"], render_record(rec))
            print(f"rendered {rec['name']} from {os.path.relpath(path, ROOT)}", file=sys.stderr)
    elif a.cmd == "check":
        problems = check(a.doc, a.results)
        for p in problems:
            print(f"{os.path.relpath(a.doc)}: {p}", file=sys.stderr)
        if problems:
            return 1
        print(f"figures: every table of {os.path.relpath(a.doc)} is rendered from its results file", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
