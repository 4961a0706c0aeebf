"""The Python side of cli/tests/cli_client.rs (`framewire scatter`, `gather`,
`who-has` against a real cluster).

    python client_cli_peer.py save DIR        # the files the CLI scatters
    python client_cli_peer.py check SCHEDULER # Python reads what the CLI scattered,
                                              # and computes keys for the CLI to gather
    python client_cli_peer.py load FILE       # a .npy file the CLI gathered

Each mode prints one JSON line `{"check": name, ...facts}` and raises (exit
status 1) when a check it makes fails.
"""

import json
import os
import collections
import sys

import numpy as np


def array():
    return np.arange(12, dtype="float64").reshape(3, 4) * 0.5


BLOB = bytes(range(256)) * 4
VALUE = {"a": [1, 2, 3], "b": "text", "c": 1.5}
PY_DICT = {"x": 0.25, "y": -3.0}


def emit(check, **facts):
    print(json.dumps({"check": check, **facts}), flush=True)


def save(d):
    np.save(os.path.join(d, "arr.npy"), array())
    with open(os.path.join(d, "blob.bin"), "wb") as f:
        f.write(BLOB)
    with open(os.path.join(d, "value.json"), "w") as f:
        json.dump(VALUE, f)
    emit("saved")


def check(addr):
    from distributed import Client, Future, fire_and_forget

    with Client(addr, timeout=30) as c:
        got = {
            k: Future(k, client=c, state="memory").result(timeout=30)
            for k in ["cli-array", "cli-bytes", "cli-json"]
        }
        a = got["cli-array"]
        assert isinstance(a, np.ndarray) and a.dtype == np.float64, repr(a)
        assert np.array_equal(a, array()), a
        assert got["cli-bytes"] == BLOB, got["cli-bytes"][:20]
        # JSON lists arrive as tuples (Dask reads msgpack arrays as tuples).
        assert got["cli-json"] == {**VALUE, "a": tuple(VALUE["a"])}, got["cli-json"]
        # Keys for the CLI to gather, kept after this client goes.
        fs = [
            c.submit(lambda: dict(PY_DICT), key="py-dict", pure=False),
            c.submit(lambda: np.linspace(0.0, 1.0, 5), key="py-array", pure=False),
            # Not plain data: the CLI says which global stopped it.
            c.submit(
                lambda: collections.OrderedDict(a=1), key="py-ordered", pure=False
            ),
        ]
        for f in fs:
            f.result(timeout=30)
            fire_and_forget(f)
        emit("checked", keys=sorted(got))


def load(path):
    a = np.load(path)
    assert np.array_equal(a, array()) and a.dtype == np.float64, a
    emit("loaded", shape=list(a.shape))


if __name__ == "__main__":
    mode, arg = sys.argv[1:]
    {"save": save, "check": check, "load": load}[mode](arg)
