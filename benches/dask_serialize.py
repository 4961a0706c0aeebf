#!/usr/bin/env python3
"""Python Dask's side of benches/serialize.rs, case for case.

Prints one JSON object per line: {"name", "median_s", "min_s", "max_s", "reps", "elements"}
with the same `<group>/<variant>/<size>` names criterion uses, so
scripts/bench-serialize can put the two side by side.

Modes: never = iterate_collection=False, auto = None, always = True.
Timing: perf_counter, gc disabled inside the timed call, median of `reps`.
"""
import gc
import json
import statistics
import sys
import time

from distributed.protocol import deserialize, dumps, loads, serialize, to_serialize

N = [1_000, 100_000, 1_000_000]
MODES = [("never", False), ("auto", None), ("always", True)]


def timed(fn, reps):
    times = []
    fn()  # warm-up
    for _ in range(reps):
        gc.collect()
        gc.disable()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        gc.enable()
    return statistics.median(times), min(times), max(times)


def emit(name, elements, fn, reps):
    med, lo, hi = timed(fn, reps)
    print(json.dumps({"name": name, "median_s": med, "min_s": lo, "max_s": hi,
                      "reps": reps, "elements": elements}), flush=True)


def roundtrip(group, make):
    for n in N:
        value = make(n)
        for mode, flag in MODES:
            def run(value=value, flag=flag):
                header, frames = serialize(value, iterate_collection=flag)
                deserialize(header, frames)
            slow = n >= 100_000 and (flag is True or group.endswith("bytes8") and flag is None)
            emit(f"{group}/{mode}/{n}", n, run, 1 if slow else 5)


def main():
    roundtrip("serialize_roundtrip/tuple_small_ints", lambda n: tuple(i % 100 for i in range(n)))
    roundtrip("serialize_roundtrip/list_bytes8", lambda n: [i.to_bytes(8, "little") for i in range(n)])
    ctx = {"compression": None, "pickle-protocol": 5}
    for name, size in [("1KiB", 1 << 10), ("1MiB", 1 << 20), ("1GiB", 1 << 30)]:
        msg = {"op": "compute-task", "key": ("x", 0), "data": to_serialize(b"\x01" * size)}
        emit(f"dumps_loads/serialize_payload/dumps/{name}", 1, lambda: dumps(msg, context=ctx), 20)
        frames = dumps(msg, context=ctx)
        emit(f"dumps_loads/serialize_payload/loads/{name}", 1,
             lambda: loads(frames, deserialize=False), 20)


if __name__ == "__main__":
    sys.exit(main())
