"""Feeds byte examples to Python Dask's TCP reader, as a peer would send them.

    python spec_examples.py < examples.json > outcomes.json

Input: a JSON list of {"name", "hex", "reads", "deserialize"}: the bytes of
one SPEC.md example, how many messages to read from them, and the
`deserialize` settings of the comm to read them with (false: a scheduler's
pass-through; true: a worker's).

For each example and setting, the bytes are written into one end of a
socket pair whose write side is then shut, and `distributed.comm.tcp.TCP`
(Dask's own comm class: the framing of `TCP.read`, then `from_frames` and
`distributed.protocol.loads`) reads `reads` messages from the other end.

Output: {name: {"false" | "true": [outcome, ...]}}, one outcome per read:
{"message": JSON} or {"error": {"types": [class names of the exception, its
MRO, qualified and not], "text": str}}; reading stops at the first error.

The message is converted with the JSON conventions of SPEC.md: nil, bool,
int, float, str as themselves (non-finite floats as {"$float": "NaN" |
"inf" | "-inf"}); bytes as {"$bytes": hex}; tuples and lists as arrays; a
dict whose keys are all str as an object (insertion order, which is wire
order), any other as {"$map": [[k, v], ...]}; a `Serialized` block as
{"$serialized": offset} and the result of unpickling a `__Pickled__` block
as {"$pickled": offset}, the offset being the frame its sub-header was read
from; a numpy array as {"$ndarray": {"dtype", "shape", "strides",
"writeable", "data"}}. Anything else (a set, an ExtType...) as
{"$python": [type name, repr]}, which no SPEC.md expectation uses.

To know the offsets, `loads` is given the frame list wrapped in a list
subclass that records which frames it indexes (it reads the same frames);
and the `pickle` module `distributed.protocol.core` calls is wrapped to
record which object each `pickle.loads` returned (it still unpickles).
"""

import asyncio
import json
import math
import socket
import sys

import numpy
import tornado.iostream

import distributed.comm.utils as comm_utils
import distributed.protocol as protocol
import distributed.protocol.core as core
from distributed.comm.tcp import TCP
from distributed.protocol.serialize import Serialized


class Recorded(list):
    """A frame list that remembers the block each slice was taken for."""

    def __init__(self, frames, trace):
        super().__init__(frames)
        self.trace = trace

    def __getitem__(self, i):
        got = super().__getitem__(i)
        if isinstance(i, slice):
            # loads slices a block's payload frames right after its sub-header.
            self.trace["slices"][id(got)] = i.start - 1
        else:
            self.trace["last_index"] = i
        return got


class PickleSpy:
    """`distributed.protocol.pickle`, recording what each `loads` returned."""

    def __init__(self, real, trace):
        self._real = real
        self._trace = trace

    def __getattr__(self, name):
        return getattr(self._real, name)

    def loads(self, *args, **kwargs):
        obj = self._real.loads(*args, **kwargs)
        self._trace["pickled"][id(obj)] = (self._trace["last_index"], obj)
        return obj


TRACE = {"slices": {}, "pickled": {}, "last_index": None}
real_loads = protocol.loads


def traced_loads(frames, *args, **kwargs):
    return real_loads(Recorded(frames, TRACE), *args, **kwargs)


comm_utils.protocol.loads = traced_loads
core.pickle = PickleSpy(core.pickle, TRACE)


def to_json(v):
    pickled = TRACE["pickled"].get(id(v))
    if pickled is not None and pickled[1] is v:
        return {"$pickled": pickled[0]}
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        if math.isnan(v):
            return {"$float": "NaN"}
        if math.isinf(v):
            return {"$float": "inf" if v > 0 else "-inf"}
        return v
    if isinstance(v, (bytes, bytearray, memoryview)):
        return {"$bytes": bytes(v).hex()}
    if isinstance(v, (tuple, list)):
        return [to_json(x) for x in v]
    if isinstance(v, dict):
        if all(isinstance(k, str) for k in v):
            return {k: to_json(x) for k, x in v.items()}
        return {"$map": [[to_json(k), to_json(x)] for k, x in v.items()]}
    if isinstance(v, Serialized):
        offset = TRACE["slices"].get(id(v.frames))
        return {"$serialized": offset}
    if isinstance(v, numpy.ndarray):
        return {
            "$ndarray": {
                "dtype": v.dtype.str,
                "shape": list(v.shape),
                "strides": list(v.strides),
                "writeable": bool(v.flags.writeable),
                "data": v.tobytes(order="A").hex(),
            }
        }
    return {"$python": [type(v).__name__, repr(v)]}


def error(e):
    types = []
    for t in type(e).__mro__:
        types.append(t.__name__)
        types.append(f"{t.__module__}.{t.__name__}")
    return {"error": {"types": types, "text": str(e)}}


async def read_all(data, reads, deserialize):
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    stream = tornado.iostream.IOStream(theirs)
    comm = TCP(stream, "tcp://spec-example:1", "tcp://spec-example:2", deserialize=deserialize)
    loop = asyncio.get_running_loop()
    await loop.sock_sendall(ours, data)
    ours.shutdown(socket.SHUT_WR)
    outcomes = []
    try:
        for _ in range(reads):
            TRACE["slices"].clear()
            TRACE["pickled"].clear()
            try:
                msg = await asyncio.wait_for(comm.read(), 30)
            except Exception as e:  # noqa: BLE001 - any refusal is an outcome
                outcomes.append(error(e))
                break
            outcomes.append({"message": to_json(msg)})
    finally:
        comm.abort()
        ours.close()
    return outcomes


async def main():
    examples = json.load(sys.stdin)
    out = {}
    for ex in examples:
        data = bytes.fromhex(ex["hex"])
        out[ex["name"]] = {
            json.dumps(d): await read_all(data, ex["reads"], d) for d in ex["deserialize"]
        }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    # Dask logs a failed loads at CRITICAL: expected here, for the refused ones.
    import logging

    logging.disable(logging.CRITICAL)
    # Examples nest 1024 levels deep: the converter and json recurse.
    sys.setrecursionlimit(20000)
    asyncio.run(main())
