"""The tables of `scripts/bench-compare`: what each category's rows are and how
they read (ratios per round, spreads, targets judged), built from a run's
groups of results. benches/bench_compare.py runs the cells and keeps the
results; benches/figures.py renders a category's region of BENCHMARKS.md from
its results file with `render_category`. Standard library only.
"""

import statistics

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


MODES = [("never", "False"), ("auto", "None"), ("always", "True")]


# Transport variants: (cell, framewire variant, label). All run two processes.
TASK = ("task", "connection_task", "framewire Connection, task message (dumps + send, recv + loads + "
        "deserialize_blocks)")


RAW_VARIANTS = [
    ("connection", "connection", "framewire Connection, Envelope[payload], recycled buffers"),
    ("connection_fresh", "connection_fresh", "framewire Connection, fresh buffer per message"),
    ("framecodec", "framecodec", "Framed<_, FrameCodec>"),
    ("length_delimited", "length_delimited", "Framed<_, LengthDelimitedCodec>"),
    ("raw_writev", "raw_writev", "raw writev + read_exact into a reused buffer"),
]


# (size, quick count, full count, variants at that size)
TRANSPORT_SIZES = [
    (KIB, 5000, 20000, None),
    (64 * KIB, 1000, 4000, None),
    (64 * MIB, 5, 12, None),
    (512 * MIB, 2, 3, {"task", "connection", "raw_writev"}),
]


PYTHON_OFFLOAD = ("Python: dumps/loads of a message over 10 MiB run on Dask's one offload thread "
                  "(distributed.comm.offload); socket IO on the event loop")


def median(xs):
    return statistics.median(xs) if xs else float("nan")


CLIENT_ARRAY = 256 * MIB


CLIENT_SMALL = (10_000, 100)  # keys, bytes each
CLIENT_COMPUTE = 10_000  # operator.add tasks in one graph


# What `--only pickle` reads: the pickles Python writes for plain values (protocol 5,
# as Dask's pickle family sends them; benches/pickle_loads.py has the same cases).
PICKLE_CASES = {
    "list_int_1e6": ("a list of 10^6 ints", lambda: list(range(10**6))),
    "dict_str_float_1e5": ("a dict of 10^5 str → float", lambda: {f"key-{i}": i * 0.5 for i in range(10**5)}),
}


# The `sizes` category (opt-in): sizes either side of the point where a message
# and the receiver's buffer stop fitting in the CPU's last-level cache (with
# 260 MiB of L3, a 64 MiB message and its receive buffer both fit and a 256 MiB
# one does not; with 32 MiB, none of these sizes fits).
SWEEP_SIZES = [32 * MIB, 64 * MIB, 128 * MIB, 256 * MIB, 512 * MIB]


SWEEP_VARIANTS = [("task", "connection_task", "framewire task messages"),
                  ("connection", "connection", "framewire Connection, Envelope[payload]"),
                  ("raw_writev", "raw_writev", "raw writev + read_exact into a reused buffer")]


def ns_per_elem(res, n):
    return res["per_call_s"] / n * 1e9


def cpu_ns_per_elem(res, n):
    return res.get("cpu_per_call_s", float("nan")) / n * 1e9


def gibs(res):
    return res["bytes"] / res["secs"] / GIB


def rate(res):
    return res["count"] / res["secs"]


def rss_overhead_mib(res):
    size = res.get("size", res["payload"])
    return (res["hwm_after"] - res["rss_before"] - size) / MIB


def size_label(size):
    return f"{size // GIB} GiB" if size >= GIB else f"{size // MIB} MiB" if size >= MIB else f"{size // KIB} KiB"


def fmt_num(x, unit):
    if x != x:
        return "-"
    if unit == "ns/elem":
        return f"{x:,.0f} ns/elem" if x >= 100 else f"{x:.1f} ns/elem"
    if unit == "us":
        if x < 1:
            return f"{x * 1000:,.0f} ns"  # a tenth of a µs would hide the figure
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


def ratios(fw, peer, higher_better):
    return [(f / p if higher_better else p / f) for f, p in zip(fw, peer) if f and p]


class Table:
    """Sections of rows; each row: what, framewire, peer, ratio, spread, notes."""

    def __init__(self):
        self.sections = []

    def section(self, title, text=""):
        self.sections.append((title, text, []))

    @property
    def rows(self):
        return self.sections[-1][2]

    def pair(self, what, fw, peer, unit, higher_better, note=""):
        """fw, peer: per-round figures (same rounds, same order)."""
        rs = ratios(fw, peer, higher_better)
        self.rows.append([
            what,
            f"{fmt_num(median(fw), unit)}",
            f"{fmt_num(median(peer), unit)}",
            fmt_num(median(rs), "x") if rs else "-",
            f"fw {spread(fw, unit)}; peer {spread(peer, unit)}; ratio {spread(rs, 'x')}",
            note,
        ])
        return median(rs)

    def single(self, what, fw, peer, note="", spread_text=""):
        self.rows.append([what, fw, peer, "-", spread_text, note])

    def judged(self, text):
        """Adds a target's verdict to the last row's notes."""
        row = self.rows[-1]
        row[5] = f"{row[5]}; {text}" if row[5] else text

    def relative(self, what, fw, peer, rel, unit, note):
        """A row judged by `rel`, a per-round ratio of figures of the same
        rounds (fw, peer: per-round figures)."""
        self.rows.append([what, fmt_num(median(fw), unit), fmt_num(median(peer), unit), fmt_num(median(rel), "x"),
                          f"fw {spread(fw, unit)}; peer {spread(peer, unit)}; ratio {spread(rel, 'x')}", note])

    def markdown(self):
        out = []
        for title, text, rows in self.sections:
            if not rows:
                continue
            out.append(f"#### {title}\n")
            if text:
                out.append(text + "\n")
            out.append("| row | framewire | peer | ratio (>1: framewire ahead) | spread (min – max over rounds) | notes |")
            out.append("|---|---|---|---|---|---|")
            for r in rows:
                out.append("| " + " | ".join(r) + " |")
            out.append("")
        return "\n".join(out)


def ceiling_note(rs, note="peer = the raw loop, the ceiling of this set-up"):
    """The note of a row set against a ceiling (rs: framewire / ceiling per round,
    higher = faster): a ceiling that framewire beats is called what it is in that run."""
    if rs and min(rs) > 1:
        return "not a ceiling in this run: framewire above the raw loop in every round"
    if rs and median(rs) > 1:
        return ("not a ceiling in this run: framewire above the raw loop at the median, its rounds on "
                "both sides (noise between rounds, not a limit)")
    return note


def verdict(value, target, higher_better):
    """Whether `value` meets `target` (a median of the same run's rounds)."""
    ok = value >= target if higher_better else value <= target
    return "met" if ok else "**missed**"


def serde_key(struct, mode, n=1_000_000):
    return f"serde/{struct}/{mode}/{n}"


def transport_by(groups, prefix=""):
    """{(cell, size): [results]} over the transport groups (`prefix` "before/" for the
    baseline's twins)."""
    out = {}
    for gid, cells in groups.items():
        if not gid.startswith("transport/"):
            continue
        for name, results in cells.items():
            if not name.startswith(prefix) or "@" not in name:
                continue
            cell, size = name[len(prefix):].split("@")
            if "/" in cell:
                continue
            out[(cell, int(size))] = results
    return out


def build_table(groups):
    t = Table()
    g = groups
    t.section("Serialize + deserialize, per element (equal work: `serialize(x, mode)` then `deserialize` "
              "of its result (framewire: `deserialize_owned`, the block by value), the same value on both sides)",
              "Dask is measured with its default serializers (`(\"dask\", \"pickle\")`: a tuple of ints is "
              "pickled) and with `serializers=[\"msgpack\"]` (framewire writes msgpack); each row says which. "
              "`packed` rows serialize the tuple built as a `Value::IntArray` (what framewire's own "
              "`deserialize` returns for it): a different input. CPU = the measuring thread's CPU time.")
    names = {"tuple_small_ints": "tuple of 1e6 small ints", "list_bytes8": "list of 1e6 8-byte bytes"}
    unequal = []  # rows whose two sides write different frames: a section of their own
    for struct in ["tuple_small_ints", "list_bytes8"]:
        for mode, flag in MODES:
            key = serde_key(struct, mode)
            if key not in g:
                continue
            c = g[key]
            fw = [ns_per_elem(r, 1e6) for r in c["fw"]]
            cpu = [cpu_ns_per_elem(r, 1e6) for r in c["fw"]]
            frames = c["fw"][0]["frames"]
            note = f"frames: fw {frames:,}; fw CPU {fmt_num(median(cpu), 'ns/elem')}"
            if "fw_floor" in c:
                # Issue 26: the boxed rows within 1.5× of reading the boxed tuple once.
                floor = [ns_per_elem(r, 1e6) for r in c["fw_floor"]]
                rel = [a / b for a, b in zip(fw, floor)]
                note += (f"; reading the boxed tuple once (its memory floor): {fmt_num(median(floor), 'ns/elem')}, "
                         f"framewire / floor {fmt_num(median(rel), 'x')} (rounds {spread(rel, 'x')}): "
                         f"target ≤ 1.5×: {verdict(median(rel), 1.5, False)}")
            if "fw_output_floor" in c:
                of = c["fw_output_floor"]
                floor = [ns_per_elem(r, 1e6) for r in of]
                above = [a - b for a, b in zip(fw, floor)]
                parts = (" and frame list (which becomes the array: one frame an item, handed over by value)"
                         if of[0].get("items_are_frames") else ", frame list and array")
                note += (f"; allocating and writing this output's header ({of[0]['header_bytes'] / 1e6:.0f} MB)"
                         f"{parts} alone (its fresh-memory floor): {fmt_num(median(floor), 'ns/elem')}, "
                         f"framewire above it {fmt_num(median(above), 'ns/elem')} (round by round: "
                         f"{spread(above, 'ns/elem')})")
                if struct == "list_bytes8":
                    # Issue 26: framewire's own work above its output's floor.
                    note += f": target ≤ 40 ns/elem: {verdict(median(above), 40, False)}"
            for peer, label in [("dask", "Dask default serializers"), ("dask_msgpack", "Dask serializers=[\"msgpack\"]")]:
                if peer not in c:
                    continue
                dk = [ns_per_elem(r, 1e6) for r in c[peer]]
                dask_frames = c[peer][0]["frames"]
                what = f"{names[struct]}, {mode} (Dask iterate_collection={flag}): framewire vs {label}"
                row_note = note + (f"; Dask frames {dask_frames:,}, CPU "
                                   f"{fmt_num(median([cpu_ns_per_elem(r, 1e6) for r in c[peer]]), 'ns/elem')}")
                if dask_frames != frames:
                    unequal.append((what + f": framewire writes {frames:,} frame{'s' * (frames != 1)}, "
                                    f"Dask {dask_frames:,}", fw, dk, row_note))
                else:
                    t.pair(what, fw, dk, "ns/elem", False, row_note)
                note = f"frames: fw {frames:,}"
            if "dask" not in c:
                t.single(f"{names[struct]}, {mode}: framewire alone (Dask not run at this N)",
                         fmt_num(median(fw), "ns/elem"), "-", note, f"fw {spread(fw, 'ns/elem')}")
            if "fw_packed" in c and "dask" in c:
                fp = [ns_per_elem(r, 1e6) for r in c["fw_packed"]]
                dk = [ns_per_elem(r, 1e6) for r in c["dask"]]
                t.pair(f"the same tuple built packed (`Value::IntArray`, a different input), {mode}: "
                       "framewire vs Dask default serializers", fp, dk, "ns/elem", False,
                       f"frames: fw {c['fw_packed'][0]['frames']:,}")
    if unequal:
        t.section("Serialize + deserialize where the two sides write different frames (not equal work)",
                  "Under `auto` Dask iterates a list of `bytes` (it infers iteration from the first element: "
                  "every element its own frame), while framewire's `Auto` iterates only when an element needs "
                  "frames of its own, which 8-byte `bytes` do not: the two sides do different work here, and "
                  "a row is no comparison of the two implementations. Which serializers Dask used is in each "
                  "row; `serializers=[\"msgpack\"]` is the encoding framewire writes, element by element.")
        for what, fw, dk, note in unequal:
            t.pair(what, fw, dk, "ns/elem", False, note)
    if "dumps" in g:
        t.section("`dumps` of a task message (equal work: the same map, payload in a `Serialize`)",
                  "Dask with `context={\"compression\": None}`, as a comm calls it by default.")
        d = g["dumps"]
        per = {k: [r["per_call_s"] * 1e6 for r in v] for k, v in d.items()}
        for size, name in [(KIB, "1 KiB"), (GIB, "1 GiB")]:
            frames = f"frames: fw {d[f'fw/{size}'][0]['frames']}, Dask {d[f'dask/{size}'][0]['frames']}"
            t.pair(f"dumps, {name} payload: framewire vs Dask", per[f"fw/{size}"], per[f"dask/{size}"], "us",
                   False, frames)
        fr = [b / a for a, b in zip(per[f"fw/{KIB}"], per[f"fw/{GIB}"])]
        dr = [b / a for a, b in zip(per[f"dask/{KIB}"], per[f"dask/{GIB}"])]
        t.single("dumps time, 1 GiB payload / 1 KiB payload (framewire target ≤ 2×)",
                 fmt_num(median(fr), "x"), f"Dask {fmt_num(median(dr), 'x')}",
                 f"target ≤ 2×: {verdict(median(fr), 2, False)}", f"fw {spread(fr, 'x')}; Dask {spread(dr, 'x')}")
    if "msg_collection" in g:
        c = g["msg_collection"]
        fw = [r["per_call_s"] * 1e6 for r in c["fw"]]
        dk = [r["per_call_s"] * 1e6 for r in c["dask"]]
        t.pair("dumps + loads (deserialized) of a message carrying a list of 1e5 8-byte bytes in a "
               "Serialize, iterated (Dask by inference, framewire `Always`): framewire vs Dask", fw, dk, "us",
               False, f"frames: fw {c['fw'][0]['frames']:,}, Dask {c['dask'][0]['frames']:,}")
    tr = transport_by(g)
    if tr:
        t.section("Transport, equal work, two processes per side (framewire's sender in its worker, its "
                  "receiver a fresh process; Python's the same)",
                  "One direction, loopback TCP, `count` messages after one warm-up, timed until the receiver "
                  "has answered the last. framewire: `dumps` of `{\"op\": \"send\", \"data\": ndarray}` + "
                  "`send`; `recv` + `loads` + `deserialize_blocks`; Python: `comm.write` / `comm.read` "
                  f"(`deserialize=True`) of the same message. {PYTHON_OFFLOAD}.")
        for size, _, _, _ in TRANSPORT_SIZES:
            if ("dask", size) not in tr:
                continue
            peer = [gibs(r) for r in tr[("dask", size)]]
            for cell, flavor in [("task", "multi-thread runtime"), ("task_1t", "current-thread runtime")]:
                if (cell, size) in tr:
                    t.pair(f"{size_label(size)} task messages: framewire ({flavor}) vs Python comm",
                           [gibs(r) for r in tr[(cell, size)]], peer, "GiB/s", True)
        if ("task", 64 * MIB) in tr and ("raw_writev", 64 * MIB) in tr:
            raw = [gibs(r) for r in tr[("raw_writev", 64 * MIB)]]
            task = [gibs(r) for r in tr[("task", 64 * MIB)]]
            py = [gibs(r) for r in tr[("dask", 64 * MIB)]]
            rs = ratios(task, raw, True)
            t.pair("64 MiB: framewire task messages vs the ceiling, a raw two-process writev + read_exact "
                   "loop into a reused buffer (target ≥ 0.9×)", task, raw, "GiB/s", True,
                   f"{ceiling_note(rs, 'peer = the raw loop')}; target ≥ 0.9×: {verdict(median(rs), 0.9, True)}; "
                   f"Python comm / raw loop: {fmt_num(median(ratios(py, raw, True)), 'x')}")
        by_size = {}
        for cell, label in [("task", "framewire task messages"), ("connection", "framewire Connection, "
                            "Envelope[payload]"), ("raw_writev", "raw writev loop"), ("dask", "Python comm")]:
            if (cell, 512 * MIB) in tr and (cell, 64 * MIB) in tr:
                big = [gibs(r) for r in tr[(cell, 512 * MIB)]]
                small = [gibs(r) for r in tr[(cell, 64 * MIB)]]
                by_size[cell] = [b / s for b, s in zip(big, small)]
                t.pair(f"512 MiB vs 64 MiB throughput, same rounds: {label}", big, small, "GiB/s", True,
                       "peer = its own 64 MiB figure")
        if "task" in by_size and "raw_writev" in by_size:
            # Issue 26: the 512/64 ratio judged against the ceiling's own, round by round.
            task, raw = by_size["task"], by_size["raw_writev"]
            rel = [a / b for a, b in zip(task, raw)]
            t.relative("512 MiB / 64 MiB throughput: framewire task messages' ratio vs the raw writev loop's "
                       "ratio, same rounds (target ≥ 0.9× the raw loop's)", task, raw, rel, "x",
                       f"fw = the task messages' 512/64 ratio, peer = the raw loop's; target ≥ 0.9×: "
                       f"{verdict(median(rel), 0.9, True)}")
        t.section("Raw frames, two processes (one ready-made frame per message: no frame 0, no dumps/loads; "
                  "compared with each other, never with Python)")
        for size in [64 * MIB, 512 * MIB, KIB]:
            if ("connection", size) not in tr:
                continue
            conn = [gibs(r) for r in tr[("connection", size)]]
            for cell, _, label in RAW_VARIANTS[1:]:
                if (cell, size) in tr:
                    t.pair(f"{size_label(size)}: framewire Connection (recycled) vs {label}", conn,
                           [gibs(r) for r in tr[(cell, size)]], "GiB/s", True, f"peer = {label}")
    if "small_one_way" in g or "round_trip" in g:
        t.section("Small messages, two processes per side",
                  "1 KiB task messages: `py_small_msgs.py`'s message, `dumps` + `send` per message, `recv` + "
                  "`loads` + `deserialize_blocks` per message. Round trips: `\"ping\"` / `\"pong\"`, each "
                  "encoded and decoded. framewire's loops are tasks spawned on the runtime; Python: no offload "
                  "(every message is under 10 MiB), everything on each process's event loop.")
    for gid, what in [("small_one_way", "1 KiB task messages one way"),
                      ("round_trip", "request/response round trips")]:
        if gid in g:
            peer = [rate(r) for r in g[gid]["dask"]]
            for f, label in [("1thread", "current-thread runtime"), ("2threads", "multi-thread runtime"),
                             ("2threads_block_on", "multi-thread runtime, client awaited in `block_on`")]:
                if f"fw_{f}" not in g[gid]:
                    continue
                fw = [rate(r) for r in g[gid][f"fw_{f}"]]
                note = ""
                if gid == "round_trip" and f == "2threads":
                    note = f"target ≥ 3×: {verdict(median(ratios(fw, peer, True)), 3, True)}"
                t.pair(f"{what}: framewire ({label}) vs Python comm", fw, peer, "msgs/s", True, note)
            if gid == "round_trip" and "raw_2threads" in g[gid]:
                raw = [rate(r) for r in g[gid]["raw_2threads"]]
                fw = [rate(r) for r in g[gid]["fw_2threads"]]
                t.pair("the same: framewire (multi-thread runtime) vs the raw loop (the same bytes each way, "
                       "written whole and read whole with `read_exact`, nothing parsed or built)",
                       fw, raw, "msgs/s", True,
                       ceiling_note(ratios(fw, raw, True), "peer = the raw loop, the ceiling of this set-up "
                                    "(runtime, syscalls, loopback)"))
                ceiling = median(ratios(raw, peer, True))
                t.pair("the raw loop vs Python comm: the most any framing could reach over Python here",
                       raw, peer, "msgs/s", True,
                       "the ≥ 3× target is above this ceiling" if ceiling < 3 else "the ≥ 3× target is below it")
    if any(k.startswith("local/") for k in g):
        t.section("Extra: one process (both framewire ends tasks of one runtime; both Python ends on one "
                  "event loop, the set-up of earlier versions)")
        for gid, what, unit, fig in [("local/64MiB", "64 MiB task messages", "GiB/s", gibs),
                                     ("local/small_one_way", "1 KiB task messages one way", "msgs/s", rate),
                                     ("local/round_trip", "round trips", "msgs/s", rate)]:
            if gid in g:
                peer = [fig(r) for r in g[gid]["dask"]]
                for f, label in [("1thread", "current-thread"), ("2threads", "multi-thread")]:
                    t.pair(f"{what}, one process: framewire ({label} runtime) vs Python comm (one event loop)",
                           [fig(r) for r in g[gid][f"fw_{f}"]], peer, unit, True)
    if any(k.startswith("typed/") for k in g):
        t.section("Typed messages (captured 2026.8.0 messages, tests/captures/conversation)")
    for gid, dyn, typed, via_value, what in [
            ("typed/compute-task", "fw/loads", "fw/typed_decode", "fw/typed_decode_value",
             "captured compute-task batch: decode"),
            ("typed/task-finished", "fw/dumps", "fw/typed_encode", "fw/typed_encode_value",
             "captured task-finished batch: encode")]:
        if gid not in g:
            continue
        us = {k: [r["per_call_s"] * 1e6 for r in v] for k, v in g[gid].items()}
        decode = "decode" in what
        typed_name = "from_frames into Vec<SchedulerToWorker>" if decode else "to_frames of Vec<WorkerToScheduler>"
        value_name = "loads + from_value" if decode else "to_value + dumps"
        dyn_name = "loads into a Value" if decode else "dumps of the equal Value"
        # Its time ≤ 1.5× the dynamic path's: the per-round speed ratio ≥ 1/1.5.
        r = t.pair(f"{what}: typed ({typed_name}) vs the dynamic path ({dyn_name}); target ≤ 1.5× its time",
                   us[typed], us[dyn], "us", False, "peer = framewire's dynamic path")
        t.judged(f"target ≤ 1.5× its time: {verdict(r, 1 / 1.5, True)}")
        if decode:
            if "dask/loads_keep_pickled" in us:
                r = t.pair(f"{what}: typed vs Python protocol.loads(deserialize=False) with the run_spec kept as "
                           "a block (equal work: neither unpickles it); target ≥ 10×",
                           us[typed], us["dask/loads_keep_pickled"], "us", False,
                           "Python: Dask's loads, its step that unpickles a `__Pickled__` block (2026.8.0 does it "
                           "even with deserialize=False) keeping the pickled bytes instead")
                t.judged(f"target ≥ 10×: {verdict(r, 10, True)}")
            t.pair(f"{what}: typed vs Python protocol.loads(deserialize=True), which also unpickles the run_spec "
                   "(more work on Python's side; no target)", us[typed], us["dask/loads"], "us", False)
        else:
            r = t.pair(f"{what}: typed vs Python protocol.dumps; target ≥ 10×", us[typed], us["dask/dumps"], "us",
                       False)
            t.judged(f"target ≥ 10×: {verdict(r, 10, True)}")
        t.pair(f"{what}: typed through a Value ({value_name}) vs the dynamic path ({dyn_name})",
               us[via_value], us[dyn], "us", False, "peer = framewire's dynamic path")
    if "wire/64MiB" in g or "connect" in g:
        t.section("Wire: tcp:// and tls://, two processes per side; connecting to a real `dask scheduler`")
    if "wire/64MiB" in g:
        w = g["wire/64MiB"]
        gb = {k: [gibs(r) for r in v] for k, v in w.items()}
        suite = w["fw/tls"][0].get("cipher")
        py_suite = w["dask/tls"][0].get("cipher")
        r = t.pair("64 MiB ndarray messages one way over tls://, two processes each: framewire vs Python comm; "
                   "target ≥ 1.0×", gb["fw/tls"], gb["dask/tls"], "GiB/s", True,
                   f"cipher: framewire {suite}, Python {py_suite}")
        t.judged(f"target ≥ 1.0×: {verdict(r, 1.0, True)}")
        r = t.pair("the same: framewire over tls:// vs framewire over tcp://; target ≥ 0.7×",
                   gb["fw/tls"], gb["fw/tcp"], "GiB/s", True, "peer = framewire tcp://")
        t.judged(f"target ≥ 0.7×: {verdict(r, 0.7, True)}")
        t.pair("64 MiB ndarray messages one way over tcp://, two processes each: framewire vs Python comm",
               gb["fw/tcp"], gb["dask/tcp"], "GiB/s", True)
        t.pair("the same: Python over tls:// vs Python over tcp://",
               gb["dask/tls"], gb["dask/tcp"], "GiB/s", True, "both Python")
        if "raw/tls" in gb:
            for scheme in ["tcp", "tls"]:
                t.pair(f"64 MiB over {scheme}://: framewire's messages vs the raw loop (the same socket and payload, "
                       "`write_all` after an 8-byte length, `read_exact` into one reused buffer; no handshake, "
                       "nothing framed or decoded)", gb[f"fw/{scheme}"], gb[f"raw/{scheme}"], "GiB/s", True,
                       ceiling_note(ratios(gb[f"fw/{scheme}"], gb[f"raw/{scheme}"], True)))
            ceiling = median(ratios(gb["raw/tls"], gb["raw/tcp"], True))
            t.pair("the raw loop over tls:// vs the raw loop over tcp://: the ceiling of the tls/tcp ratio above",
                   gb["raw/tls"], gb["raw/tcp"], "GiB/s", True,
                   "the ≥ 0.7× target is " + ("above" if ceiling < 0.7 else "below") + " this ceiling")
        if "raw_old/tls" in gb:
            r = t.pair("64 MiB over tls://: framewire's messages vs the old ceiling, the raw loop over tokio-rustls "
                       "(rustls' own records: the tls:// path before issue 32); target ≥ 1.6×",
                       gb["fw/tls"], gb["raw_old/tls"], "GiB/s", True, "peer = the old raw loop")
            t.judged(f"target ≥ 1.6×: {verdict(r, 1.6, True)}")
            t.pair("the raw loop over tls:// (our records) vs the old one (tokio-rustls)",
                   gb["raw/tls"], gb["raw_old/tls"], "GiB/s", True, "peer = the old raw loop")
            if "raw/tcp" in gb:
                # What the 1.6× target asks of TLS, in units of plain TCP: 1.6 × this ratio.
                old = median(ratios(gb["raw_old/tls"], gb["raw/tcp"], True))
                t.pair("the old raw loop over tls:// (tokio-rustls) vs the raw loop over tcp://",
                       gb["raw_old/tls"], gb["raw/tcp"], "GiB/s", True,
                       f"1.6× the old loop is {1.6 * old:.2f}× the raw tcp:// loop in these rounds"
                       + (" (above the tcp:// ceiling: no TLS path can reach it)" if 1.6 * old > 1 else ""))
    if "connect" in g:
        c = g["connect"]
        ms = {k: [median(r["times"]) * 1e6 for r in v] for k, v in c.items()}
        for scheme in ["tls", "tcp"]:
            r = t.pair(f"connect + {'TLS + ' if scheme == 'tls' else ''}Dask handshake + one identity round trip "
                       f"to a real `dask scheduler` over {scheme}://: framewire vs Python"
                       + ("; target ≤ Python's time" if scheme == "tls" else ""),
                       ms[f"fw/{scheme}"], ms[f"dask/{scheme}"], "us", False,
                       f"median of {len(c[f'fw/{scheme}'][0]['times'])} calls per round")
            if scheme == "tls":
                t.judged(f"target ≤ Python's time: {verdict(r, 1.0, True)}")
    if "rss" in g:
        t.section("Peak RSS of a fresh receiving process")
        r = g["rss"]
        dk = [rss_overhead_mib(x) for x in r["dask"]]
        for cell, label in [("fw_frames", "frames kept"), ("fw_deserialized", "loads + deserialize_blocks, value kept")]:
            fw = [rss_overhead_mib(x) for x in r[cell]]
            t.single(f"peak RSS receiving one 512 MiB ndarray (8 × 64 MiB shards): framewire {label}, vs Dask "
                     "(deserialize=True); figure = VmHWM − VmRSS before − payload",
                     fmt_num(median(fw), "MiB"), f"Dask {fmt_num(median(dk), 'MiB')}",
                     f"target ≤ payload + 64 MiB: {verdict(median(fw), 64, False)}",
                     f"fw {spread(fw, 'MiB')}; Dask {spread(dk, 'MiB')}")
    if "client/gather" in g or "client/small" in g:
        t.section("The Rust client beside Python's `Client`, two processes per side (`--only client`)",
                  "A real cluster (a `dask scheduler` and one Python `dask worker`, one thread, no nanny); "
                  "framewire's `dask::Client` in its worker process and a Python `distributed.Client` in "
                  "Python's, each connected once and kept between rounds (warm: Python's connection pool, "
                  "framewire's pool of worker connections). Gather: a 256 MiB float64 array that Python "
                  "scattered and holds; framewire `Client::gather` (`who_has`, then `get_data` from the "
                  "worker), Python `Client.gather(direct=True)` (the same path: equal work, the row judged) "
                  "and, apart, Python's default `Client.gather` (through the scheduler, which fetches the "
                  "data from the worker and forwards it: the bytes travel twice); the figure per round "
                  "is the median of its timed gathers, after one untimed. Small keys: 10,000 bytes values of "
                  "100 bytes, scattered (Rust: `Client::scatter`; Python: `client.scatter(dict)`) then "
                  "gathered (`gather` of all the keys / of the futures), checked equal, new keys each round; "
                  "framewire sends bytes under 64 KiB inline (msgpack bin), Python each as a serialized "
                  "block: the worker holds the same `bytes` either way.")
    if "client/gather" in g:
        c = g["client/gather"]
        fw = [median(r["times"]) * 1e6 for r in c["fw"]]
        dk = [median(r["times"]) * 1e6 for r in c["dask"]]
        pool = (f"framewire's pool: {c['fw'][-1]['opened']} connection(s) opened, "
                f"{c['fw'][-1]['reused']} calls on a reused one")
        what = f"gather of a {size_label(c['fw'][0]['bytes'])} numpy array: framewire `Client::gather` vs Python"
        if "dask_direct" in c:
            dd = [median(r["times"]) * 1e6 for r in c["dask_direct"]]
            r = t.pair(f"{what} `Client.gather(direct=True)` (equal work: both straight from the worker)",
                       fw, dd, "us", False, pool)
            t.judged(f"target ≥ 1×: {verdict(r, 1, True)}")
            t.pair(f"{what}'s default `Client.gather` (through the scheduler: the bytes travel twice on "
                   "Python's side; not equal work, not judged)", fw, dk, "us", False)
        else:
            r = t.pair(f"{what} `Client.gather`", fw, dk, "us", False, pool)
            t.judged(f"target ≥ 1×: {verdict(r, 1, True)}")
        if "fw_nopool" in c:
            np_ = [median(r["times"]) * 1e6 for r in c["fw_nopool"]]
            base, peer = (dd, "`Client.gather(direct=True)`") if "dask_direct" in c else (dk, "`Client.gather`")
            t.pair("the same gather, framewire without its connection pool (`idle_connections_per_address = 0`: "
                   f"a connection and a fresh receive buffer per gather, as before the pool) vs Python {peer}",
                   np_, base, "us", False,
                   f"framewire with its pool / without, same rounds: "
                   f"{fmt_num(median(ratios(fw, np_, False)), 'x')} faster")
    if "client/small" in g:
        c = g["client/small"]
        n = c["fw"][0]["n"]
        for field, what in [("secs", "scatter + gather"), ("scatter_s", "of which scatter"),
                            ("gather_s", "of which gather")]:
            fw = [x[field] * 1e6 for x in c["fw"]]
            dk = [x[field] * 1e6 for x in c["dask"]]
            r = t.pair(f"{what} of {n:,} small keys: framewire `Client` vs Python `Client`", fw, dk, "us", False)
            if field == "secs":
                t.judged(f"target ≥ 2×: {verdict(r, 2, True)}")
    if "client/compute" in g or "client/tiny" in g:
        t.section("Computing from Rust beside Python's `Client`, two processes per side (`--only client`)",
                  f"The same cluster. Many tasks: {CLIENT_COMPUTE:,} `operator.add(i, round)` in one graph "
                  "(framewire `Client::map` + `wait`; Python `client.map` + `distributed.wait`), new inputs "
                  "each round (their keys are tokens of them), the keys forgotten between measures; wall time "
                  "from the call to every key in memory, and the client process's CPU time over the same "
                  "span (framewire: `/proc/self/stat`; Python: `time.process_time()`, every thread). One "
                  "task: `submit` of one `operator.add` and its result (framewire `Client::result`, Python "
                  "`Future.result()`), the median of the calls of a round.")
    if "client/compute" in g:
        c = g["client/compute"]
        n = c["fw"][0]["n"]
        fw = [x["secs"] * 1e6 for x in c["fw"]]
        dk = [x["secs"] * 1e6 for x in c["dask"]]
        r = t.pair(f"submit and wait for {n:,} tasks: wall time, framewire vs Python", fw, dk, "us", False)
        t.judged(f"target ≥ 1× (no slower): {verdict(r, 1, True)}")
        fw = [x["cpu_s"] * 1e6 for x in c["fw"]]
        dk = [x["cpu_s"] * 1e6 for x in c["dask"]]
        r = t.pair(f"the same: the client process's CPU time, framewire vs Python", fw, dk, "us", False)
        t.judged(f"target ≥ 5× (at most a fifth): {verdict(r, 5, True)}")
    if "client/tiny" in g:
        c = g["client/tiny"]
        fw = [median(x["times"]) * 1e6 for x in c["fw"]]
        dk = [median(x["times"]) * 1e6 for x in c["dask"]]
        r = t.pair("one tiny task, submit to result: framewire vs Python", fw, dk, "us", False)
        t.judged(f"target ≥ 1× (no slower): {verdict(r, 1, True)}")
    if any(k.startswith("pickle/") for k in g):
        t.section("Plain Python values read from their pickles, two processes (`--only pickle`)",
                  "The pickles Python writes (protocol 5, as Dask's pickle family sends a result that is "
                  "not an array); framewire `pickle::loads` (feature `pickle`: the list's ints packed into "
                  "one `IntArray`, as framewire reads msgpack) beside Python's C `pickle.loads` of the same "
                  "bytes; each builds its language's values and drops them, per call.")
    for name, (what, _) in PICKLE_CASES.items():
        gid = f"pickle/{name}"
        if gid in g:
            us = {k: [r["per_call_s"] * 1e6 for r in v] for k, v in g[gid].items()}
            r = t.pair(f"{what}: framewire `pickle::loads` vs Python's `pickle.loads`", us["fw"], us["python"],
                       "us", False, f"{g[gid]['fw'][0]['bytes']:,} bytes of pickle")
            t.judged(f"target ≥ 1×: {verdict(r, 1, True)}")
    if "sizes" in g:
        t.section("Throughput against message size, two processes per side (`--only sizes`)",
                  "Each variant at each size beside its own 64 MiB figure, same rounds. Where a message and "
                  "the receiver's buffer fit in the last-level cache, they stay there between messages (the "
                  "sender resends one payload, the receiver reuses its buffer); larger ones cross memory, "
                  "so the ratios show the cache as much as the code (the header gives its size).")
        c = g["sizes"]
        for cell, _, label in SWEEP_VARIANTS + [("dask", None, "Python comm")]:
            base = [gibs(r) for r in c[f"{cell}@{64 * MIB}"]]
            for size in SWEEP_SIZES:
                if size != 64 * MIB:
                    t.pair(f"{label}: {size_label(size)} vs 64 MiB messages", [gibs(r) for r in c[f"{cell}@{size}"]],
                           base, "GiB/s", True, "peer = its own 64 MiB figure")
        for size in SWEEP_SIZES:
            t.pair(f"{size_label(size)}: framewire task messages vs the raw writev loop",
                   [gibs(r) for r in c[f"task@{size}"]], [gibs(r) for r in c[f"raw_writev@{size}"]], "GiB/s", True,
                   "peer = the raw loop")
    return t


def build_before_after(groups, rev):
    """The baseline's twins beside this tree's cells: after / before per round."""
    t = Table()
    t.section(f"Before ({rev}) and after (this tree), the same harness, in the same rounds",
              "Each framewire cell of these groups was measured twice per round: by a worker built from "
              f"{rev}'s library and by this tree's. ratio = this tree's speed / {rev}'s (>1: faster now).")
    g = groups
    for struct, n_name in [("tuple_small_ints", "tuple of 1e6 small ints"), ("list_bytes8", "list of 1e6 8-byte bytes")]:
        for mode, _ in MODES:
            key = serde_key(struct, mode)
            if key in g and "before/fw" in g[key]:
                c = g[key]
                t.pair(f"{n_name}, {mode}, serialize+deserialize", [ns_per_elem(r, 1e6) for r in c["fw"]],
                       [ns_per_elem(r, 1e6) for r in c["before/fw"]], "ns/elem", False, "peer = before")
    if "dumps" in g and f"before/fw/{GIB}" in g["dumps"]:
        d = g["dumps"]
        per = {k: [r["per_call_s"] * 1e6 for r in v] for k, v in d.items()}
        for size, name in [(KIB, "1 KiB"), (GIB, "1 GiB")]:
            t.pair(f"dumps, {name} payload", per[f"fw/{size}"], per[f"before/fw/{size}"], "us", False,
                   "peer = before")
        after = [b / a for a, b in zip(per[f"fw/{KIB}"], per[f"fw/{GIB}"])]
        before = [b / a for a, b in zip(per[f"before/fw/{KIB}"], per[f"before/fw/{GIB}"])]
        t.single("dumps 1 GiB / 1 KiB", fmt_num(median(after), "x"), f"before {fmt_num(median(before), 'x')}",
                 "target ≤ 2×", f"after {spread(after, 'x')}; before {spread(before, 'x')}")
    if "before/fw" in g.get("msg_collection", {}):
        c = g["msg_collection"]
        t.pair("dumps + loads of a message carrying a list of 1e5 8-byte bytes, iterated",
               [r["per_call_s"] * 1e6 for r in c["fw"]], [r["per_call_s"] * 1e6 for r in c["before/fw"]], "us",
               False, "peer = before")
    now, then = transport_by(g), transport_by(g, "before/")
    for (cell, size), results in sorted(now.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        if (cell, size) in then and cell in ("task", "task_1t", "connection", "raw_writev"):
            t.pair(f"{size_label(size)} two processes, {cell}", [gibs(r) for r in results],
                   [gibs(r) for r in then[(cell, size)]], "GiB/s", True, "peer = before")
    for gid, cell, what in [("typed/compute-task", "typed_decode", "captured compute-task batch: typed decode (from_frames)"),
                            ("typed/compute-task", "typed_decode_value", "captured compute-task batch: typed decode through a Value"),
                            ("typed/task-finished", "typed_encode", "captured task-finished batch: typed encode (to_frames)"),
                            ("typed/task-finished", "typed_encode_value", "captured task-finished batch: typed encode through a Value")]:
        if f"before/fw/{cell}" in g.get(gid, {}):
            c = g[gid]
            t.pair(what, [r["per_call_s"] * 1e6 for r in c[f"fw/{cell}"]],
                   [r["per_call_s"] * 1e6 for r in c[f"before/fw/{cell}"]], "us", False, "peer = before")
    for gid, what in [("small_one_way", "1 KiB task messages one way"), ("round_trip", "round trips")]:
        if gid in g:
            for f in ["1thread", "2threads"]:
                if f"before/fw_{f}" in g[gid]:
                    t.pair(f"{what}, two processes, {f}", [rate(r) for r in g[gid][f"fw_{f}"]],
                           [rate(r) for r in g[gid][f"before/fw_{f}"]], "msgs/s", True, "peer = before")
    return t


# The groups each category's table renders (what its results file keeps).
def table_groups(category, gids):
    if category == "serialize":
        return [g for g in gids if g.endswith("/1000000")]
    return gids


def run_line(env_or_run):
    rounds = env_or_run["rounds"]
    return (f"{'--quick' if env_or_run['mode'] == 'quick' else 'full run'}: rounds {rounds['default']} (serialize, "
            f"dumps, typed), {rounds['transport']} (transport, messages, wire), "
            f"{2 if env_or_run['mode'] == 'quick' else 3} (RSS); {env_or_run['rustc']}; {env_or_run['python']}")


def render_category(rec):
    """The markdown of a region compare-CATEGORY (benches/figures.py adds the
    header line) from its results file."""
    return "> " + run_line(rec["data"]["run"]) + "\n\n" + build_table(rec["data"]["groups"]).markdown()
