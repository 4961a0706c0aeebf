#!/usr/bin/env python3
"""A real Python `distributed` listener for framewire's typed-message interop tests
(tests/dask_python.rs).

    python typed_peer.py

Listens on tcp://127.0.0.1 (random port) with `distributed.comm.listen` (the real
Dask handshake, `deserialize=True` as every Dask server), prints {"port": P} on the
first line of stdout, accepts ONE connection and reads messages with `comm.read()`
until the peer closes it. For each message it prints one JSON line describing the
Python objects `distributed.protocol.loads` built, types included:

    {"dict": [[k, v], ...]}      a dict, entries in order
    {"tuple": [...]}             a tuple (msgpack arrays decode as tuples)
    {"list": [...]}              a list
    {"set": [...]}               a set (items sorted by their JSON text)
    {"str": s} {"bytes": hex} {"int": "123"} {"float": repr} {"bool": b} {"none": null}
    {"ndarray": {"dtype", "shape", "values"}}     a numpy array (values: tolist())
    {"object": "module.Class", "repr": str, "key": ...}   anything else (a Task: its key)

Then prints {"done": n} and exits.
"""

import asyncio
import json
import sys

import numpy as np
from distributed.comm import listen
from distributed.comm.core import CommClosedError


def emit(obj) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def describe(x):
    if x is None:
        return {"none": None}
    if isinstance(x, bool):
        return {"bool": x}
    if isinstance(x, int):
        return {"int": str(x)}
    if isinstance(x, float):
        return {"float": repr(x)}
    if isinstance(x, str):
        return {"str": x}
    if isinstance(x, (bytes, bytearray, memoryview)):
        return {"bytes": bytes(x).hex()}
    if isinstance(x, dict):
        return {"dict": [[describe(k), describe(v)] for k, v in x.items()]}
    if isinstance(x, tuple):
        return {"tuple": [describe(v) for v in x]}
    if isinstance(x, list):
        return {"list": [describe(v) for v in x]}
    if isinstance(x, (set, frozenset)):
        items = [describe(v) for v in x]
        return {"set": sorted(items, key=lambda d: json.dumps(d, sort_keys=True))}
    if isinstance(x, np.ndarray):
        return {
            "ndarray": {
                "dtype": x.dtype.str,
                "shape": list(x.shape),
                "values": describe(x.ravel().tolist()),
            }
        }
    out = {"object": f"{type(x).__module__}.{type(x).__qualname__}", "repr": repr(x)[:200]}
    key = getattr(x, "key", None)
    if key is not None:
        out["key"] = describe(key)
    return out


async def main() -> None:
    done = asyncio.Event()
    count = 0

    async def handle(comm):
        nonlocal count
        try:
            while True:
                msg = await comm.read()
                emit(describe(msg))
                count += 1
        except CommClosedError:
            pass
        finally:
            done.set()

    listener = listen("tcp://127.0.0.1:0", handle)
    await listener.start()
    emit({"port": listener.listen_address.rsplit(":", 1)[1]})
    await done.wait()
    listener.stop()
    emit({"done": count})


if __name__ == "__main__":
    asyncio.run(main())
