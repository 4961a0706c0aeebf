"""The scheduler benchmark of `scripts/swarm-bench`: a real `dask scheduler`,
`framewire swarm` (N simulated workers) and a Python client submitting named
workloads; per cluster size, the wall time of each workload, the tasks the
swarm finished per second, the scheduler's decision latency (as the swarm
sees it), and the CPU of the scheduler and of the swarm. `--fidelity`
instead runs one workload against 8 real Python workers (tasks sleep
10 ms; `--fidelity-workers`, `--fidelity-task-ms`) and against as many
simulated workers (tasks of the same time), counting the scheduler's
messages by op (handlers and batched sends wrapped on the scheduler) and
where each task's time went (`turnaround`).

Writes JSON (docs/bench/swarm.json), renders a table into BENCHMARKS.md
(between the swarm markers) and a PNG plot (docs/bench/swarm.png).
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import psutil

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "benches"))
import figures  # noqa: E402 (benches/figures.py: the tables, rendered into BENCHMARKS.md)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def start_scheduler(tmp, port=0):
    log = open(os.path.join(tmp, "scheduler.log"), "w+")
    p = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
         "--port", str(port), "--no-dashboard"],
        stdout=log, stderr=subprocess.STDOUT, cwd=tmp)
    deadline = time.time() + 90
    while time.time() < deadline:
        log.seek(0)
        m = re.search(r"Scheduler at:\s+(tcp://\S+)", log.read())
        if m:
            return p, m.group(1)
        if p.poll() is not None:
            raise SystemExit("the scheduler exited early")
        time.sleep(0.1)
    raise SystemExit("no scheduler after 90 s")


def start_swarm(binary, addr, n, task_ms, tmp, nthreads=1, extra=()):
    out = os.path.join(tmp, f"swarm-{n}.json")
    log = open(os.path.join(tmp, f"swarm-{n}.log"), "w+")
    p = subprocess.Popen(
        [binary, "swarm", addr, "--workers", str(n), "--nthreads", str(nthreads),
         "--task-ms", str(task_ms), "--nbytes", "100", "--output", out, *extra],
        stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 600
    while time.time() < deadline:
        log.seek(0)
        if f"swarm: {n} workers registered" in log.read():
            return p, out, log
        if p.poll() is not None:
            log.seek(0)
            raise SystemExit("the swarm exited early:\n" + log.read())
        time.sleep(0.2)
    raise SystemExit(f"{n} workers did not register in 600 s")


def start_python_workers(addr, n, tmp):
    procs = []
    for i in range(n):
        log = open(os.path.join(tmp, f"worker-{i}.log"), "w")
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_worker", addr, "--nthreads", "1",
             "--no-nanny", "--name", f"py-{i}", "--no-dashboard"],
            stdout=log, stderr=subprocess.STDOUT, cwd=tmp))
    return procs


# The workloads. Each function runs in the client and returns how many
# tasks it submitted.

# How long a task sleeps on a Python worker (the fidelity run's
# `--fidelity-task-ms`; cloudpickle sends the function with its value).
SLEEP_S = 0.01


def sleepy(x, *deps):
    import time as t
    t.sleep(SLEEP_S)
    return x


def run_graph(c, dsk, keys):
    """Submits a whole graph at once (one `update-graph`) and waits for
    `keys` in the cluster (nothing gathered)."""
    from distributed import wait
    fs = c.get(dsk, keys, sync=False)
    wait(fs)
    del fs
    return len(dsk)


def independent(c, size):
    dsk = {("leaf", i): (sleepy, i) for i in range(size)}
    return run_graph(c, dsk, list(dsk))


def tree(c, size):
    dsk = {("t", 0, i): (sleepy, i) for i in range(size)}
    level, width = 0, size
    while width > 1:
        nxt = (width + 1) // 2
        for i in range(nxt):
            deps = [("t", level, k) for k in (2 * i, 2 * i + 1) if k < width]
            dsk[("t", level + 1, i)] = (sleepy, i, *deps)
        level, width = level + 1, nxt
    return run_graph(c, dsk, [("t", level, 0)])


def shuffle(c, size):
    """All-to-all: p inputs, each split into p pieces, p outputs each
    taking one piece of every input (p + p² + p tasks, p² transfers)."""
    p = max(2, int(size ** 0.5))
    dsk = {("in", i): (sleepy, i) for i in range(p)}
    for i in range(p):
        for j in range(p):
            dsk[("split", i, j)] = (sleepy, j, ("in", i))
    for j in range(p):
        dsk[("out", j)] = (sleepy, j, *[("split", i, j) for i in range(p)])
    return run_graph(c, dsk, [("out", j) for j in range(p)])


WORKLOADS = {"independent": independent, "tree": tree, "shuffle": shuffle}


def counting(dask_scheduler, turnaround=False):
    """On the scheduler: count messages by op, both ways (the stream
    handlers, the RPC handlers, and every batched send). With `turnaround`,
    also note when each `compute-task` was queued and, as its
    `task-finished` is handled, that time, the run's `compute` start and
    stop as the worker reported them, and the time now (one clock: every
    process is on this machine)."""
    import collections
    import functools
    import inspect
    from distributed import batched
    from distributed.metrics import time as now
    counts = collections.Counter()
    dask_scheduler._swarm_bench_counts = counts
    sent, seen = {}, []
    dask_scheduler._swarm_bench_seen = seen
    batched._swarm_bench_sent = sent if turnaround else None

    def finished(k):
        queued = sent.pop((k.get("key"), k.get("run_id")), None)
        ran = [s for s in k.get("startstops") or () if s.get("action") == "compute"]
        if queued is not None and ran:
            seen.append((queued, ran[-1]["start"], ran[-1]["stop"], now(),
                         k.get("worker"), k.get("thread")))
    for name, table in (("in", dask_scheduler.stream_handlers), ("rpc", dask_scheduler.handlers)):
        for op, h in list(table.items()):
            if name == "rpc" and op == "run_function":
                continue  # the benchmark's own calls (counting, polling), not the workload's
            def wrap(h=h, key=f"{name}:{op}"):
                # The scheduler inspects a handler: its arguments (`comm`)
                # and whether it is a coroutine function.
                if inspect.iscoroutinefunction(h):
                    @functools.wraps(h)
                    async def f(*a, **k):
                        counts[key] += 1
                        return await h(*a, **k)
                else:
                    @functools.wraps(h)
                    def f(*a, **k):
                        counts[key] += 1
                        if turnaround and key == "in:task-finished":
                            finished(k)
                        return h(*a, **k)
                return f
            table[op] = wrap()
    if not getattr(batched.BatchedSend, "_swarm_bench", False):
        send = batched.BatchedSend.send

        def counted(self, *msgs):
            for m in msgs:
                op = m.get("op") if isinstance(m, dict) else None
                counts[f"out:{op}"] += 1
                if op == "compute-task" and batched._swarm_bench_sent is not None:
                    batched._swarm_bench_sent[(m.get("key"), m.get("run_id"))] = now()
            return send(self, *msgs)
        batched.BatchedSend.send = counted
        batched.BatchedSend._swarm_bench = True


def read_counts(dask_scheduler):
    c = dict(dask_scheduler._swarm_bench_counts)
    dask_scheduler._swarm_bench_counts.clear()
    return c


def read_seen(dask_scheduler):
    seen = list(dask_scheduler._swarm_bench_seen)
    dask_scheduler._swarm_bench_seen.clear()
    return seen


def turnaround(seen):
    """Where the tasks' time went, as the scheduler saw it, in ms (median
    and mean over tasks): `dispatch`, from the `compute-task` queued on the
    scheduler to the run's start on the worker (the scheduler's batched
    send, the wire, the worker's event loop and thread pool, fetching the
    task's dependencies, and waiting for a thread); `run`, the run itself
    (the worker's `compute` start to stop); `between`, on a thread, from a
    run's end to the start of the next, where the next had been sent to
    the worker before (the worker's own time between two tasks); `report`,
    from the run's end to its `task-finished` handled on the scheduler
    (the worker's event loop and batched send, the wire, the scheduler's
    read)."""
    by_thread = {}
    for q, s, e, _, w, t in seen:
        by_thread.setdefault((w, t), []).append((s, e, q))
    between = []
    for runs in by_thread.values():
        runs.sort()
        between += [s - e0 for (_, e0, _), (s, _, q) in zip(runs, runs[1:]) if q < e0]
    parts = {"dispatch": [s - q for q, s, *_ in seen], "run": [e - s for _, s, e, *_ in seen],
             "between": between, "report": [h - e for _, _, e, h, *_ in seen]}
    return {"tasks": len(seen), **{k: {"p50_ms": 1000 * figures.median(v),
                                       "mean_ms": 1000 * sum(v) / len(v)}
                                   for k, v in parts.items() if v}}


def stop(p, timeout=60):
    """Terminates `p`, killing it if it is not gone in `timeout` (a
    scheduler removing 5 000 workers takes a while)."""
    p.terminate()
    try:
        p.wait(timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def cpu(p):
    """(user, system) CPU seconds of `p` so far; zeros without a process."""
    if p is None:
        return (0.0, 0.0)
    t = psutil.Process(p.pid).cpu_times()
    return (t.user, t.system)


def on_cpu(p):
    """Seconds `p`'s threads (those alive now) spent on a CPU, to the
    nanosecond (Linux's schedstat; `cpu` counts in ticks of 10 ms, coarse
    for a workload of a second); None where unknown."""
    if p is None:
        return 0.0
    total = 0
    try:
        for t in os.listdir(f"/proc/{p.pid}/task"):
            with open(f"/proc/{p.pid}/task/{t}/schedstat") as f:
                total += int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return total / 1e9


def scheduler_tasks(dask_scheduler):
    return len(dask_scheduler.tasks)


def wait_forgotten(c, timeout=60):
    """Until the scheduler has forgotten every task (released as the
    client let go of them), or `timeout` seconds."""
    deadline = time.time() + timeout
    while c.run_on_scheduler(scheduler_tasks) and time.time() < deadline:
        time.sleep(0.05)


def measure(c, sched, swarm, workload, size, with_turnaround=False):
    # A run after another starts once the scheduler has forgotten the
    # last one's tasks: with the same keys, some would otherwise still be
    # in memory and not run.
    wait_forgotten(c)
    c.run_on_scheduler(read_counts)
    c.run_on_scheduler(read_seen)
    s0, w0 = cpu(sched), cpu(swarm)
    n0, m0 = on_cpu(sched), on_cpu(swarm)
    t0 = time.perf_counter()
    tasks = WORKLOADS[workload](c, size)
    wall = time.perf_counter() - t0
    s1, w1 = cpu(sched), cpu(swarm)
    n1, m1 = on_cpu(sched), on_cpu(swarm)
    # The run's messages counted to its end: the client's release of its
    # keys, the scheduler's `free-keys` and the workers' answers (read at
    # once, the release was in flight or not, by timing).
    wait_forgotten(c)
    counts = c.run_on_scheduler(read_counts)
    seen = c.run_on_scheduler(read_seen)
    su, ss = s1[0] - s0[0], s1[1] - s0[1]
    wu, ws = w1[0] - w0[0], w1[1] - w0[1]
    return {"workload": workload, "tasks": tasks, "wall_s": wall,
            "tasks_per_s": tasks / wall, "scheduler_cpu_s": su + ss,
            "swarm_cpu_s": wu + ws,
            "scheduler_user_s": su, "scheduler_system_s": ss,
            "swarm_user_s": wu, "swarm_system_s": ws,
            "scheduler_on_cpu_s": None if None in (n0, n1) else n1 - n0,
            "swarm_on_cpu_s": None if None in (m0, m1) else m1 - m0,
            "scheduler_messages": counts,
            **({"turnaround": turnaround(seen)} if with_turnaround else {})}


def median_round(runs):
    """The run whose swarm / scheduler CPU is the median of `runs` (the
    lower middle one of an even count), with every run's share kept
    (`shares`) when there were several."""
    ordered = sorted(runs, key=figures.swarm_share)
    row = dict(ordered[(len(ordered) - 1) // 2])
    if len(runs) > 1:
        row["shares"] = [figures.swarm_share(r) for r in runs]
    return row


def start_perf(directory, procs, n, events=None):
    """`perf record` of each of `procs` (name: (process, how its call
    graphs are taken)) over the measured runs of a cluster size, not its
    start nor its settling: DIRECTORY/NAME-N.data, for `perf report -i`.
    With `events`, `perf stat` counts those events instead, into
    DIRECTORY/NAME-N.txt."""
    os.makedirs(directory, exist_ok=True)
    recorders = []
    for name, (p, graph) in procs.items():
        if events:
            path = os.path.join(directory, f"{name}-{n}.txt")
            cmd = ["perf", "stat", "-e", events, "-p", str(p.pid), "-o", path]
        else:
            path = os.path.join(directory, f"{name}-{n}.data")
            cmd = ["perf", "record", "-F", "2999", "--call-graph", graph,
                   "-p", str(p.pid), "-o", path]
        recorders.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL))
        print(f"swarm-bench: {'counting' if events else 'recording'} the {name}'s CPU "
              f"into {path}", file=sys.stderr)
    time.sleep(1)  # attached
    for r in recorders:
        if r.poll() is not None:
            raise SystemExit(f"swarm-bench: `perf record` exited with {r.returncode}")
    return recorders


def scale_run(args, n, tmp):
    from distributed import Client
    sched, addr = start_scheduler(tmp)
    swarm, out, log = start_swarm(args.binary, addr, n, args.task_ms, tmp,
                                  extra=args.swarm_arg)
    rss_idle = psutil.Process(swarm.pid).memory_info().rss
    rows = []
    try:
        with Client(addr, timeout=60) as c:
            c.run_on_scheduler(counting)
            # Past the first heartbeats (each worker's after 1 s, then at
            # the scheduler's interval), which otherwise fall in the first
            # workload.
            time.sleep(args.settle)
            runs = {w: [] for w in args.workloads}
            # The swarm's own frames unwound with DWARF (built without
            # frame pointers); the scheduler's kernel frames are what say
            # where its CPU goes (Python's own frames say little to perf).
            perf = start_perf(args.perf, {"swarm": (swarm, "dwarf,16384"),
                                          "scheduler": (sched, "fp")}, n,
                              args.perf_events) if args.perf else []
            # The workloads in turn, `--repeat` rounds of them.
            try:
                for _ in range(args.repeat):
                    for w in args.workloads:
                        r = measure(c, sched, swarm, w, args.size)
                        r["workers"] = n
                        runs[w].append(r)
                        print(json.dumps({k: v for k, v in r.items()
                                          if k != "scheduler_messages"}), file=sys.stderr)
            finally:
                for p in perf:
                    p.send_signal(signal.SIGINT)
                for p in perf:
                    p.wait(600)
            for w in args.workloads:
                rows.append(median_round(runs[w]))
    finally:
        swarm.send_signal(signal.SIGINT)
        swarm.wait(120)
        stop(sched)
    res = json.load(open(out))
    return {"workers": n, "rows": rows, "swarm_rss_idle": rss_idle,
            "swarm_rss_idle_per_worker": rss_idle / n,
            "decision_latency_ms": res["decision_latency_ms"],
            "swarm_tasks_per_second_peak": res["tasks_per_second_peak"],
            "timeline": res["timeline"]}


def fidelity(args, tmp):
    from distributed import Client
    out = {}
    for kind in ("python", "swarm"):
        sched, addr = start_scheduler(tmp)
        procs, swarm = [], None
        try:
            if kind == "python":
                procs = start_python_workers(addr, args.fidelity_workers, tmp)
            else:
                swarm, _, _ = start_swarm(args.binary, addr, args.fidelity_workers, args.fidelity_task_ms, tmp,
                                          extra=args.swarm_arg)
            with Client(addr, timeout=60) as c:
                c.wait_for_workers(args.fidelity_workers, timeout=120)
                c.run_on_scheduler(counting, turnaround=True)
                runs = [measure(c, sched, swarm, "tree", args.fidelity_size, with_turnaround=True)
                        for _ in range(args.rounds)]
            out[kind] = runs
        finally:
            if swarm:
                swarm.send_signal(signal.SIGINT)
                swarm.wait(60)
            for p in procs:
                stop(p)
            stop(sched)
    return out


def plot(data, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    scales = data.get("scales") or []
    if not scales:
        return
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for w in data["workloads"]:
        xs = [s["workers"] for s in scales]
        a.plot(xs, [next(r["tasks_per_s"] for r in s["rows"] if r["workload"] == w) for s in scales],
               marker="o", label=w)
    a.set_xscale("log")
    a.set_xlabel("simulated workers")
    a.set_ylabel("tasks / s")
    a.legend()
    xs = [s["workers"] for s in scales]
    for p in ("p50", "p99"):
        b.plot(xs, [s["decision_latency_ms"][p] or 0 for s in scales], marker="o", label=p)
    b.set_xscale("log")
    b.set_xlabel("simulated workers")
    b.set_ylabel("decision latency, ms")
    b.legend()
    fig.suptitle("A real dask scheduler under framewire swarm")
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--workers", default="10,100,1000")
    ap.add_argument("--size", type=int, default=2000)
    ap.add_argument("--task-ms", type=float, default=10)
    ap.add_argument("--workloads", default="independent,tree,shuffle")
    ap.add_argument("--fidelity", action="store_true")
    ap.add_argument("--fidelity-size", type=int, default=2048)
    ap.add_argument("--fidelity-workers", type=int, default=8,
                    help="workers of the fidelity run (Python ones, then simulated ones)")
    ap.add_argument("--fidelity-task-ms", type=float, default=10,
                    help="how long a task of the fidelity run takes (sleeps, on a Python worker)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of the fidelity run")
    ap.add_argument("--repeat", type=int, default=1, metavar="N",
                    help="run each workload N times per cluster size; the table shows the run "
                    "whose swarm / scheduler CPU is the median, and the range of all N")
    ap.add_argument("--no-scales", action="store_true")
    ap.add_argument("--command", default="scripts/swarm-bench")
    ap.add_argument("--no-render", action="store_true")
    ap.add_argument("--settle", type=float, default=0, metavar="SECONDS",
                    help="wait this long once the workers are registered, before the first workload")
    ap.add_argument("--perf", metavar="DIR",
                    help="record the swarm's and the scheduler's CPU with `perf record` "
                    "(call graphs included) over each cluster size's measured runs, into "
                    "DIR/swarm-N.data and DIR/scheduler-N.data")
    ap.add_argument("--perf-events", metavar="EVENTS",
                    help="with --perf: count these events with `perf stat` instead of recording "
                    "(into DIR/swarm-N.txt and DIR/scheduler-N.txt), e.g. "
                    "'syscalls:sys_enter_writev,syscalls:sys_enter_recvfrom,context-switches'")
    ap.add_argument("--swarm-arg", action="append", default=[], metavar="ARG",
                    help="passed on to `framewire swarm` (repeatable), e.g. "
                    "--swarm-arg=--memory-transfers")
    args = ap.parse_args()
    args.workloads = args.workloads.split(",")
    global SLEEP_S
    SLEEP_S = args.fidelity_task_ms / 1000
    if args.perf_events and not args.perf:
        ap.error("--perf-events needs --perf DIR")
    if args.perf and not args.no_render:
        ap.error("--perf slows the processes it records: use it with --no-render")
    env = figures.environment()
    scales = {"task_ms": args.task_ms, "workloads": args.workloads, "size": args.size}
    if args.swarm_arg:
        scales["swarm_args"] = args.swarm_arg
    if args.settle:
        scales["settle_s"] = args.settle
    if args.repeat > 1:
        scales["repeat"] = args.repeat
    with tempfile.TemporaryDirectory() as tmp:
        if not args.no_scales:
            scales["scales"] = [scale_run(args, int(n), tmp) for n in args.workers.split(",")]
        fid = fidelity(args, tmp) if args.fidelity else None
    if args.no_render:
        print(json.dumps({"scales": scales, "fidelity": fid}, indent=1))
        return
    if not args.no_scales:
        # The figures are kept before the plot is drawn: a plot that fails
        # loses no run.
        for s in scales["scales"]:
            s.pop("timeline", None)
        print(figures.record("swarm", env, scales, args.command))
        plot(scales, os.path.join(ROOT, "docs/bench/swarm.png"))
    if fid:
        # The 8 workers a side and 10 ms tasks, or a table of its
        # own (whose region BENCHMARKS.md must have).
        name = "swarm-fidelity"
        if args.fidelity_workers != 8:
            name += f"-{args.fidelity_workers}"
        if args.fidelity_task_ms != 10:
            name += f"-{args.fidelity_task_ms:g}ms"
        data = {"size": args.fidelity_size, "task_ms": args.fidelity_task_ms,
                "workers": args.fidelity_workers, "rounds": fid}
        print(figures.record(name, env, data, args.command))


if __name__ == "__main__":
    main()
