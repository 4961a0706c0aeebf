#!/usr/bin/env python3
"""The Python side of benches/pickle.rs: the pickles both read, and
Python's own C `pickle.loads` of them, timed.

    python pickle_loads.py write DIR
        DIR/list_int_1e6.pkl: pickle.dumps(list(range(10**6)), protocol=5)
        DIR/dict_str_float_1e5.pkl: a dict of 10**5 str -> float, protocol 5
        (what Dask's pickle family writes for them: no out-of-band buffers)

    python pickle_loads.py time DIR
        One JSON line per pickle: {"name", "bytes", "runs", "min_ms",
        "median_ms"}: pickle.loads(data), its result freed, timed alone.
"""

import gc
import json
import os
import pickle
import statistics
import sys
import time

CASES = {
    "list_int_1e6": lambda: list(range(10**6)),
    "dict_str_float_1e5": lambda: {f"key-{i}": i * 0.5 for i in range(10**5)},
}


def write(out):
    for name, make in CASES.items():
        with open(os.path.join(out, name + ".pkl"), "wb") as f:
            f.write(pickle.dumps(make(), protocol=5))


def timed(out):
    for name in CASES:
        with open(os.path.join(out, name + ".pkl"), "rb") as f:
            data = f.read()
        for _ in range(3):
            pickle.loads(data)
        runs = []
        deadline = time.perf_counter() + 3.0
        while len(runs) < 10 or (time.perf_counter() < deadline and len(runs) < 200):
            gc.collect()
            t = time.perf_counter()
            value = pickle.loads(data)
            del value
            runs.append(time.perf_counter() - t)
        print(json.dumps({
            "name": name,
            "bytes": len(data),
            "runs": len(runs),
            "min_ms": min(runs) * 1e3,
            "median_ms": statistics.median(runs) * 1e3,
        }), flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "write":
        write(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "time":
        timed(sys.argv[2])
    else:
        sys.stderr.write(__doc__)
        sys.exit(2)
