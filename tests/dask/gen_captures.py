#!/usr/bin/env python3
"""framewire's capture generator for the Dask `distributed` 2026.8.0 wire protocol.

    python gen_captures.py --out DIR     (re)create DIR with one folder per case
    python gen_captures.py --check DIR   regenerate into a temp dir, compare with DIR

Each case is a Python message. The generator encodes it with
``distributed.protocol.dumps`` (the arguments a TCP comm uses after a handshake)
and stores the frames as ``frame_NNN.bin``; then it sends the same message with
``comm.write`` over a real ``distributed.comm.connect`` -> ``listen`` TCP
connection on 127.0.0.1, through a small recording proxy, and stores the
client->server bytes of that one message as ``wire.bin``. ``case.json`` holds
the description, the call, the parsed framing, frame 0 and the sub-headers in
framewire's JSON, and the Python-level input / decoded value in tagged JSON.
Two extra folders: ``handshake`` (the four handshake messages) and
``real_scheduler_echo`` (a raw socket talking to a real ``distributed.Scheduler``).

Determinism: the script re-executes itself with PYTHONHASHSEED=0, seeds
``random`` before every dumps()/write() (compression decisions sample the data
at random), and sorts everything unordered. Only 127.0.0.1 is used.

JSON conventions
----------------
msgpack level (``message``, ``blocks[].header``, handshake messages), i.e.
framewire's own conventions:
  nil/bool/int/float/str   plain JSON (integers exact)
  bin                      {"$bytes": "<lowercase hex>"} when <= 512 bytes, else
                           {"$bytes": null, "len": n, "sha256": "<hex>"}
  array                    JSON array
  map, all keys str        JSON object, keys in wire order
  any other map            {"$map": [[k, v], ...]} in wire order
  nan / inf / -inf / -0.0  {"$float": "nan" | "inf" | "-inf" | "-0.0"}
  placeholder maps (``message`` only): {"__Serialized__": i} -> {"$serialized": i},
                           {"__Pickled__": i} -> {"$pickled": i}

Python level (``input``, ``value``): same scalars, bytes and floats as above, plus
  list                     JSON array
  tuple                    {"$tuple": [...]}
  set / frozenset          {"$set": [...]} / {"$frozenset": [...]}, items sorted by
                           their canonical JSON text
  dict, all keys str       JSON object in insertion order; otherwise
                           {"$dict": [[k, v], ...]} in insertion order
  bytearray                {"$bytearray": ...} (same shape as $bytes)
  memoryview               {"$memoryview": hex|null, "format", "shape"[, "len", "sha256"]}
  array.array              {"$array": {"typecode", "values"}}
  numpy.ndarray            {"$ndarray": {"dtype", "shape", "data_hex"}} with the
                           C-order bytes; over 512 bytes "data_sha256" (+ "nbytes")
                           instead of "data_hex"; object arrays carry "values";
                           structured dtypes are given as [[name, str], ...]
  numpy masked array       {"$masked_array": {"data", "mask", "fill_value"}}
  numpy.ma.masked          {"$masked": true}
  Enum member              {"$enum": "module.Class.member"}
  exception                {"$exception": "TypeName", "message": str(exc)}
  Serialize / ToPickle     {"$Serialize": v} / {"$ToPickle": v}
  Serialized / Pickled     {"$Serialized": {"header", "frames"}} / {"$Pickled": ...}
                           (header in Python-level tags, frames as $bytes)
  anything else            {"$repr": repr without addresses, "type": "module.Qualname"}
"""

from __future__ import annotations

import os
import sys

# -- bootstrap: fixed hash seed (set iteration order of str/bytes items) --------
if os.environ.get("PYTHONHASHSEED") != "0":
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0"})

import argparse  # noqa: E402
import asyncio  # noqa: E402
import enum  # noqa: E402
import filecmp  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import math  # noqa: E402
import pickle  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import socket  # noqa: E402
import struct  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
from array import array  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from decimal import Decimal  # noqa: E402
from typing import Callable  # noqa: E402

REQUIRED_DISTRIBUTED = "2026.8.0"
RANDOM_SEED = 1234
STD_SHARD = 64 * 1024 * 1024  # default of distributed.comm.shard for TCP
INLINE_LIMIT = 512
LOOPBACK = "127.0.0.1"
# Subfolders of the output directory that other generators own (gen_conversation.py's
# examples and sessions):
# --out keeps them, --check does not compare them.
FOREIGN = ("conversation", "sessions")


def _refuse(msg: str) -> None:
    sys.stderr.write(f"gen_captures.py: refusing to run: {msg}\n")
    sys.exit(2)


if sys.byteorder != "little":
    _refuse("the host is not little-endian (Dask writes native-endian lengths)")

import dask  # noqa: E402
import distributed  # noqa: E402

# The captures are 2026.8.0's; gen_conversation.py imports this module's helpers with
# any release.
if __name__ == "__main__" and distributed.__version__ != REQUIRED_DISTRIBUTED:
    _refuse(f"distributed {distributed.__version__} installed, {REQUIRED_DISTRIBUTED} required")

import cloudpickle  # noqa: E402
import lz4  # noqa: E402
import msgpack  # noqa: E402
import numpy as np  # noqa: E402
import zstandard  # noqa: E402
from distributed.comm import connect, listen  # noqa: E402
from distributed.comm.core import Comm, CommClosedError  # noqa: E402
from distributed.core import Status  # noqa: E402
from distributed.protocol import (  # noqa: E402
    Pickled,
    Serialize,
    Serialized,
    ToPickle,
    dumps,
    loads,
    serialize,
    to_serialize,
)

logging.getLogger("distributed").setLevel(logging.CRITICAL + 10)


# ============================================================================
# JSON rendering
# ============================================================================


def _digest(data) -> str:
    return hashlib.sha256(bytes(data)).hexdigest()


def _blob(tag: str, data) -> dict:
    data = bytes(data)
    if len(data) <= INLINE_LIMIT:
        return {tag: data.hex()}
    return {tag: None, "len": len(data), "sha256": _digest(data)}


def _float_json(x: float):
    if math.isnan(x):
        return {"$float": "nan"}
    if math.isinf(x):
        return {"$float": "-inf" if x < 0 else "inf"}
    if x == 0.0 and math.copysign(1.0, x) < 0:
        return {"$float": "-0.0"}
    return x


class MsgMap(list):
    """A msgpack map decoded as its list of (key, value) pairs, in wire order."""


def mp_decode(buf) -> object:
    """Decode msgpack like frame 0 (raw=False, strict_map_key=False, use_list=True),
    keeping maps as ordered pair lists (keys may be unhashable arrays)."""
    return msgpack.unpackb(
        bytes(buf), raw=False, strict_map_key=False, use_list=True,
        object_pairs_hook=MsgMap,
    )


def _placeholder(v):
    """('serialized'|'pickled', index) if v is a one-entry placeholder map."""
    if isinstance(v, MsgMap) and len(v) == 1:
        k, i = v[0]
        if k in ("__Serialized__", "__Pickled__") and type(i) is int:
            return ("serialized" if k == "__Serialized__" else "pickled"), i
    return None


def fw_json(v, placeholders: bool = False):
    """framewire JSON of a decoded msgpack value."""
    if v is None or type(v) in (bool, int, str):
        return v
    if type(v) is float:
        return _float_json(v)
    if type(v) is bytes:
        return _blob("$bytes", v)
    if type(v) is list:
        return [fw_json(x, placeholders) for x in v]
    if type(v) is MsgMap:
        if placeholders:
            ph = _placeholder(v)
            if ph is not None:
                return {"$" + ph[0]: ph[1]}
        keys = [k for k, _ in v]
        if all(type(k) is str for k in keys) and len(set(keys)) == len(keys):
            return {k: fw_json(x, placeholders) for k, x in v}
        return {"$map": [[fw_json(k, placeholders), fw_json(x, placeholders)] for k, x in v]}
    raise TypeError(f"unexpected msgpack value {type(v)!r}")


def _json_key(item) -> str:
    return json.dumps(item, sort_keys=True, ensure_ascii=False)


_ADDR = re.compile(r" at 0x[0-9a-fA-F]+")


def _dtype_json(dt):
    if dt.fields is not None:
        return [[name, dt.fields[name][0].str] for name in dt.names]
    return dt.str


def py_json(x):
    """Tagged JSON of a Python value (see the module docstring)."""
    t = type(x)
    if x is None or t in (bool, int, str):
        return x
    if t is float:
        return _float_json(x)
    if t is bytes:
        return _blob("$bytes", x)
    if t is bytearray:
        return _blob("$bytearray", x)
    if t is memoryview:
        out = _blob("$memoryview", x.tobytes())
        out["format"] = x.format
        out["shape"] = list(x.shape)
        return out
    if t is list:
        return [py_json(e) for e in x]
    if t is tuple:
        return {"$tuple": [py_json(e) for e in x]}
    if t in (set, frozenset):
        items = sorted((py_json(e) for e in x), key=_json_key)
        return {("$set" if t is set else "$frozenset"): items}
    if t is dict:
        if all(type(k) is str for k in x):
            return {k: py_json(v) for k, v in x.items()}
        return {"$dict": [[py_json(k), py_json(v)] for k, v in x.items()]}
    if t is array:
        return {"$array": {"typecode": x.typecode, "values": [py_json(e) for e in x.tolist()]}}
    if x is np.ma.masked:
        return {"$masked": True}
    if isinstance(x, np.ma.MaskedArray):
        return {
            "$masked_array": {
                "data": py_json(np.asarray(x.data)),
                "mask": py_json(np.ma.getmaskarray(x)),
                "fill_value": py_json(x.fill_value.item() if hasattr(x.fill_value, "item") else x.fill_value),
            }
        }
    if t is np.ndarray:
        body = {"dtype": _dtype_json(x.dtype), "shape": list(x.shape)}
        if x.dtype.hasobject:
            body["values"] = py_json(x.tolist())
        else:
            raw = np.ascontiguousarray(x).tobytes()
            if len(raw) <= INLINE_LIMIT:
                body["data_hex"] = raw.hex()
            else:
                body["nbytes"] = len(raw)
                body["data_sha256"] = _digest(raw)
        return {"$ndarray": body}
    if isinstance(x, enum.Enum):
        return {"$enum": f"{t.__module__}.{t.__qualname__}.{x.name}"}
    if t is Serialize:
        return {"$Serialize": py_json(x.data)}
    if t is ToPickle:
        return {"$ToPickle": py_json(x.data)}
    if t in (Serialized, Pickled):
        return {
            "$" + t.__name__: {
                "header": py_json(x.header),
                "frames": [_blob("$bytes", f) for f in x.frames],
            }
        }
    if isinstance(x, BaseException):
        return {"$exception": t.__name__, "message": str(x)}
    return {"$repr": _ADDR.sub("", repr(x)), "type": f"{t.__module__}.{t.__qualname__}"}


# ============================================================================
# Frame and wire analysis (our own reading of the bytes, not Dask's code)
# ============================================================================


def walk_placeholders(v, found: list) -> list:
    """Depth-first: map keys before values, arrays in order."""
    ph = _placeholder(v)
    if ph is not None:
        found.append(ph)
    elif isinstance(v, MsgMap):
        for k, x in v:
            walk_placeholders(k, found)
            walk_placeholders(x, found)
    elif isinstance(v, list):
        for x in v:
            walk_placeholders(x, found)
    return found


def describe_frames(frames: list[bytes]) -> dict:
    """message / blocks / orphans of one dumps() output."""
    top = mp_decode(frames[0])
    blocks, covered = [], set()
    for kind, offset in walk_placeholders(top, []):
        header = mp_decode(frames[offset])
        n_sub = dict(header)["num-sub-frames"]
        assert offset + n_sub < len(frames), "block runs past the last frame"
        covered.update(range(offset, offset + n_sub + 1))
        blocks.append({"kind": kind, "offset": offset, "num_sub_frames": n_sub, "header": fw_json(header)})
    orphans = sorted(set(range(1, len(frames))) - covered)
    return {"message": fw_json(top, placeholders=True), "blocks": blocks, "orphans": orphans}


def split_wire(buf: bytes) -> tuple[dict, list[bytes]]:
    """Parse one framed message: u64 N | u64 count | count x u64 len | frames."""
    if len(buf) < 16:
        raise ValueError("wire message shorter than 16 bytes")
    first_read, count = struct.unpack_from("<QQ", buf, 0)
    lengths = list(struct.unpack_from(f"<{count}Q", buf, 16))
    boundary = 8 + first_read  # absolute offset where the first read ends
    pos = 16 + 8 * count
    if boundary < pos:
        raise ValueError("first read shorter than the prelude")
    frames, inside = [], 0
    for n in lengths:
        if pos < boundary:
            if pos + n > boundary:
                raise ValueError("first read ends inside a frame")
            inside += 1
        frames.append(buf[pos:pos + n])
        pos += n
    if pos < boundary:
        raise ValueError("first read longer than the message")
    if pos != len(buf):
        raise ValueError(f"{len(buf) - pos} bytes after the last frame")
    info = {
        "total_nbytes": len(buf),
        "first_read": first_read,
        "n_frames": count,
        "frame_lengths": lengths,
        "frames_inside_first_read": inside,
    }
    return info, frames


def frame_whole(frames) -> bytes:
    """Frame a message the simplest way (first read = whole message)."""
    frames = [bytes(f) for f in frames]
    table = struct.pack(f"<Q{len(frames)}Q", len(frames), *(len(f) for f in frames))
    body = table + b"".join(frames)
    return struct.pack("<Q", len(body)) + body


def socket_like(frames) -> list:
    """Writable buffers, as the TCP reader hands them to loads()."""
    return [memoryview(bytearray(bytes(f))) for f in frames]


def decode_value(frames, deserialize: bool = True):
    try:
        return "ok", py_json(loads(socket_like(frames), deserialize=deserialize))
    except Exception as exc:  # the "error" family raises on purpose
        return "error", py_json(exc)


# ============================================================================
# Cases
# ============================================================================


@dataclass
class Case:
    name: str
    description: str
    build: Callable[[], object]
    serializers: list | None = None
    compression: str | None = None
    shard: int = STD_SHARD
    deterministic: bool = True
    volatile_frames: tuple = ()  # frames whose bytes vary across machines

    @property
    def connection(self) -> str:
        return self.compression or "default"


CASES: list[Case] = []


def register(name, description, **kw):
    def wrap(fn):
        CASES.append(Case(name, description, fn, **kw))
        return fn
    return wrap


def arange(n, dtype):
    return np.arange(n, dtype=dtype)


@register("plain_dict", "Small RPC-style dict, only msgpack-native values: one frame.")
def _plain_dict():
    return {
        "op": "heartbeat-worker",
        "address": "tcp://127.0.0.1:40000",
        "now": 1700000000.25,
        "executing": 3,
        "reply": True,
        "metrics": {"memory": 123456789, "cpu": 12.5, "ready": None},
    }


@register("msgpack_scalar_widths",
          "Integers, floats, strings and bytes at every msgpack width boundary, to pin the exact"
          " encodings msgpack-python chooses.")
def _scalar_widths():
    positive = [0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1]
    negative = [-1, -32, -33, -128, -129, -32768, -32769, -(2**31), -(2**31) - 1, -(2**63)]
    return {
        "ints": positive + negative,
        "floats": [0.0, -0.0, 1.5, 0.1, 1e300, math.inf, -math.inf, math.nan],
        "bools": [True, False],
        "none": None,
        "str_lengths": {str(n): "s" * n for n in (0, 31, 32, 255, 256, 65535, 65536)},
        "utf8": "h\u00e9llo \u2603 \U0001f600",
        "bytes_lengths": {str(n): b"b" * n for n in (0, 255, 256, 65535, 65536)},
    }


@register("lists_vs_tuples", "Python lists and tuples both become msgpack arrays and decode as tuples.")
def _lists_tuples():
    return {"list": [1, [2, 3]], "tuple": (1, (2, 3)), "empty_list": [], "empty_tuple": (), "mixed": [(), []]}


@register("non_str_keys", "Map keys that are tuples, ints, floats, bytes and None (strict_map_key=False on decode).")
def _non_str_keys():
    return {
        "who_has": {("x", 0): ("tcp://127.0.0.1:1",), "y-1": ()},
        7: "int key",
        1.5: "float key",
        b"bkey": "bytes key",
        None: "none key",
    }


@register("batched_stream", "A BatchedSend payload: the top-level value is a list of op dicts.")
def _batched():
    finished = {
        "op": "task-finished",
        "key": ("x", 0),
        "nbytes": 80,
        "typename": "numpy.ndarray",
        "metadata": {},
        "thread": 140000000000001,
        "startstops": ({"action": "compute", "start": 1.0, "stop": 2.0},),
        "status": "OK",
        "stimulus_id": "task-finished-1",
    }
    return [finished, {"op": "release-worker-data", "key": "y", "stimulus_id": "s-2"}, {"op": "keep-alive"}]


@register("set_and_enum", "A set and an Enum in frame 0 use the reserved __Set__/__Enum__ maps.")
def _set_enum():
    return {"op": "set-status", "keys": {"a", "b", "c"}, "status": Status.running}


@register("task_with_numpy",
          "compute-task-like message: Serialize(numpy) nested in a tuple and in a dict inside frame 0;"
          " each Serialize becomes its own {__Serialized__: offset} reference.")
def _task_numpy():
    run_spec = ("operator.add", to_serialize(arange(5, "<i8")), {"k": to_serialize(arange(3, "<f4"))})
    return {
        "op": "compute-task",
        "key": ("add-abc", 0),
        "run_spec": run_spec,
        "priority": (0, 1, -2),
        "duration": 0.5,
        "stimulus_id": "s-1",
    }


@register("numpy_layouts", "numpy arrays of various layouts and dtypes, each wrapped in Serialize.")
def _numpy_layouts():
    arrays = {
        "c2d_f4": arange(12, "<f4").reshape(3, 4),
        "fortran_f8": np.asfortranarray(arange(6, "<f8").reshape(2, 3)),
        "strided_slice": arange(10, "<i2")[::3],
        "zero_d": np.array(7, dtype="<i4"),
        "broadcast": np.broadcast_to(arange(3, "<i8"), (4, 3)),
        "big_endian": arange(3, ">i4"),
        "bool": np.array([True, False, True]),
        "complex": np.array([1 + 2j], dtype="<c16"),
        "datetime": np.array(["2020-01-01", "2021-06-30"], dtype="datetime64[D]"),
        "structured": np.zeros(2, dtype=[("x", "<i4"), ("y", "<f8")]),
        "readonly": np.frombuffer(b"\x01\x02\x03\x04", dtype="u1"),
    }
    return {k: to_serialize(a) for k, a in arrays.items()}


@register("numpy_pickled_and_masked", "Object-dtype array (header pickle: True) and a masked array.")
def _numpy_obj_masked():
    obj = np.array(["a", 1, None], dtype=object)
    masked = np.ma.masked_array(arange(4, "<i8"), mask=[False, True, False, True], fill_value=-1)
    return {"obj": to_serialize(obj), "masked": to_serialize(masked)}


@register("bytes_payloads", "bytes inline in frame 0 vs Serialize(bytes/bytearray/memoryview/array.array).")
def _bytes_payloads():
    return {
        "inline": b"inline bytes are a msgpack bin in frame 0",
        "ser_bytes": to_serialize(b"hello world"),
        "ser_bytearray": to_serialize(bytearray(b"xyz")),
        "ser_memoryview": to_serialize(memoryview(b"abcdef").cast("B", (2, 3))),
        "ser_array": to_serialize(array("d", [1.0, 2.5])),
    }


@register("serialize_collection_list",
          "Serialize(list): the top-level collection is always iterated (iterate_collection=True).")
def _ser_list():
    return {"data": to_serialize([arange(3, "<i8"), b"raw", "a str", 42])}


@register("iterate_inference",
          "Nested collections inside a Serialize(list) with iterate_collection=None: inference looks only"
          " at the first element (or first dict value).")
def _iterate_inference():
    items = [
        [b"a", 1],                                 # first element bytes: iterated
        [1, b"a"],                                 # first element int: pickled whole
        (arange(2, "<i8"), "x"),                   # first element ndarray: iterated
        {"k": arange(2, "<i8"), "s": "v"},         # first value ndarray: iterated
        {"k": "v", "arr": arange(2, "<i8")},       # first value str: pickled whole
        [],                                        # empty: pickled
        {b"z"},                                    # set whose first item is bytes: iterated
    ]
    return {"data": to_serialize(items)}


@register("dict_key_safety",
          "Serialize(dict): msgpack-safe keys go into each sub-header's 'key'; a frozenset key makes the"
          " dict unsafe so the whole dict is pickled (numpy buffer out-of-band).")
def _dict_keys():
    safe = {"a": arange(2, "<i8"), 1: b"int key", ("t", 0): b"tuple key", b"k": b"bytes key"}
    unsafe = {frozenset({1}): arange(2, "<i8")}
    return {"safe": to_serialize(safe), "unsafe": to_serialize(unsafe)}


@register("msgpack_family", "serializers=['msgpack']: Serialize'd values use the msgpack serializer family.",
          serializers=["msgpack"])
def _msgpack_family():
    return {
        "a": to_serialize("hello"),
        "b": to_serialize((1, "a", None)),
        "c": to_serialize([[1, 2], [3]]),
        "d": to_serialize({"x": 1}),
        "e": to_serialize([(1, "a", None)]),
    }


def _rule_data():
    return {"data": to_serialize([[1, 2], ["x"], (3, 4)])}


register("msgpack_before_pickle_rule",
         "serializers=['dask','msgpack','pickle']: inner lists are iterated because msgpack precedes pickle.",
         serializers=["dask", "msgpack", "pickle"])(_rule_data)
register("pickle_before_msgpack_rule",
         "serializers=['dask','pickle','msgpack']: same data, inner lists are pickled whole.",
         serializers=["dask", "pickle", "msgpack"])(_rule_data)


@register("preserialized_serialized",
          "Serialized(header, frames) objects are passed through untouched (no split-*/compression keys"
          " added; only num-sub-frames).")
def _preserialized():
    return {
        "arr": Serialized(*serialize(arange(6, "u1"))),
        "pickle_family": Serialized(*serialize(("tuple", 1))),
        "zero_frames": Serialized(*serialize(np.ma.masked)),
    }


@register("scheduler_relay",
          "What a scheduler (deserialize=False) forwards: loads(frames, deserialize=False) then dumps again.")
def _relay():
    first_hop = dumps(
        {"op": "update-data", "data": {"k": to_serialize(arange(4, "<i8"))}},
        context={"compression": None, "pickle-protocol": 5},
    )
    return loads([bytes(f) for f in first_hop], deserialize=False)


@register("sharded_4096",
          "frame_split_size=4096 (comm.max_shard_size forced to 4096 for the socket capture): large"
          " payload frames are cut into shards.", shard=4096)
def _sharded():
    return {
        "u2": to_serialize(arange(5000, "<u2")),
        "bytes": to_serialize(bytes(range(256)) * 40),
        "small": to_serialize(arange(10, "<i8")),
    }


@register("sharded_itemsize_rounding",
          "frame_split_size=1001: shards are a whole number of items (8-byte floats -> 1000-byte shards),"
          " bytes are cut at exactly 1001.", shard=1001)
def _sharded_items():
    return {"f8": to_serialize(arange(300, "<f8")), "bytes": to_serialize(bytes(range(250)) * 10)}


@register("lz4_compression",
          "Negotiated compression 'lz4': compressible payload frames >= 10000 bytes are lz4-block"
          " compressed (4-byte LE size prefix); small or incompressible ones are not.", compression="lz4")
def _lz4():
    noise = np.random.default_rng(0).integers(0, 256, 20000, dtype="u1").tobytes()
    return {
        "zeros": to_serialize(np.zeros(50000, dtype="u1")),
        "text": to_serialize(b"abcd" * 5000),
        "small": to_serialize(np.zeros(100, dtype="u1")),
        "random": to_serialize(noise),
    }


@register("lz4_compression_sharded",
          "lz4 + frame_split_size=12000: every shard is compressed on its own; the 6000-byte tail is below"
          " the 10000-byte minimum and stays raw.", compression="lz4", shard=12000)
def _lz4_sharded():
    return {"zeros": to_serialize(np.zeros(30000, dtype="u1"))}


@register("zstd_compression",
          "Extra case (not in the shared fixtures): negotiated compression 'zstd' (connection configured"
          " like the lz4 one); compressible payload frames >= 10000 bytes become one zstd frame with"
          " content size, small or incompressible ones stay raw.", compression="zstd")
def _zstd():
    noise = np.random.default_rng(1).integers(0, 256, 12000, dtype="u1").tobytes()
    return {
        "zeros": to_serialize(np.zeros(30000, dtype="u1")),
        "text": to_serialize(b"wxyz" * 4000),
        "small": to_serialize(b"tiny"),
        "random": to_serialize(noise),
    }


@register("topickle", "ToPickle values become {__Pickled__: offset}; pickle-5 buffers are out-of-band frames.")
def _topickle():
    return {
        "op": "update-graph",
        "graph": ToPickle({"a": 1, "b": (2, 3), "c": {4, 5}}),
        "arr": ToPickle(arange(4, "<i4")),
    }


@register("topickle_lz4", "ToPickle with a compressible out-of-band buffer under lz4.", compression="lz4")
def _topickle_lz4():
    return {"arr": ToPickle(np.zeros(20000, dtype="u1"))}


@register("pickled_preexisting", "A Pickled(header, frames) object is passed through as-is.")
def _pickled():
    return {"obj": Pickled({"pickled-obj": pickle.dumps(("pre", 1), protocol=5)}, [])}


@register("pickle_fallback_orphans",
          "An object msgpack cannot encode (Decimal) in frame 0 makes dumps restart with a pickle fallback;"
          " frames appended during the failed first pass stay in the output, unreferenced.")
def _fallback():
    return {"a": to_serialize(b"payload"), "b": Decimal("1.5"), "c": complex(1, 2)}


@register("error_family",
          "No serializer in the list can handle the value: header {'serializer': 'error'} and a text"
          " frame; the receiver raises TypeError.", serializers=["msgpack"])
def _error():
    return {"x": to_serialize(Decimal("2.5"))}


@register("error_family_traceback",
          "A serializer raised (not NotImplementedError): the error header gets a second frame with the"
          " traceback text (contains file paths: not deterministic across machines).",
          deterministic=False, volatile_frames=(3,))
def _error_tb():
    return {"x": to_serialize(threading.Lock())}


@register("empty_frames", "Zero-length payload frames, zero-frame Serialize and an empty collection.")
def _empty():
    return {
        "e_bytes": to_serialize(b""),
        "e_array": to_serialize(np.empty(0, dtype="<f8")),
        "masked_const": to_serialize(np.ma.masked),
        "e_list": to_serialize([]),
        "tp_empty": ToPickle(np.empty(0, dtype="u1")),
    }


@register("deeply_nested", "100 alternating list/dict levels in frame 0 with Serialize and ToPickle at the bottom.")
def _deep():
    node = {"payload": to_serialize(b"deep"), "pickled": ToPickle((1, 2))}
    for level in range(100):
        node = {"d": node, "i": level} if level % 2 else [node, level]
    return node


@register("nested_serialize",
          "Serialize inside a Serialize'd list: iterated levels unwrap it, but inside a pickled tuple (or a"
          " list whose first element is itself a Serialize) the wrapper object is pickled and comes back as"
          " a Serialize instance.")
def _nested_ser():
    s = to_serialize
    return {"data": s([1, s(b"x"), (2, s(b"y")), [b"z", s(b"w")], [s(b"v"), b"q"]])}


@register("reply_ok", "Top-level value is the string 'OK' (reply to op=close).")
def _ok():
    return "OK"


@register("reply_pong", "Top-level value is bytes (reply of the Worker's 'ping' handler).")
def _pong():
    return b"pong"


HANDSHAKE_DESC = (
    "The first message each side writes after the TCP connect (both sides write without waiting for"
    " the other). Captured on a default connection (compression None because both ends are on"
    " 127.0.0.1) and on the lz4 connection."
)
SCHEDULER_DESC = (
    "A raw socket talks to a real distributed.Scheduler on 127.0.0.1: handshake, then {'op': 'echo',"
    " 'data': Serialize(int32 array), 'reply': True}. client_handshake.bin and request.bin were framed"
    " by this script (first read = whole message); scheduler_handshake.bin and reply.bin are the"
    " scheduler's bytes. The scheduler announces pickle-protocol 5 (its listener ignores"
    " handshake_overrides) and echoes the Serialized block unchanged."
)


# ============================================================================
# Live TCP capture
# ============================================================================


class Tap:
    """A TCP relay on 127.0.0.1 that records both directions."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.upstream = bytearray()    # client -> server
        self.downstream = bytearray()  # server -> client
        self._pumps: list[asyncio.Task] = []
        self._server = None

    async def open(self) -> int:
        self._server = await asyncio.start_server(self._accept, LOOPBACK, 0)
        return self._server.sockets[0].getsockname()[1]

    async def _accept(self, c_reader, c_writer):
        s_reader, s_writer = await asyncio.open_connection(LOOPBACK, self.target_port)
        loop = asyncio.get_running_loop()
        self._pumps.append(loop.create_task(self._pump(c_reader, s_writer, self.upstream)))
        self._pumps.append(loop.create_task(self._pump(s_reader, c_writer, self.downstream)))

    @staticmethod
    async def _pump(reader, writer, log: bytearray):
        try:
            while chunk := await reader.read(65536):
                log += chunk
                writer.write(chunk)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def shut(self):
        self._server.close()
        if self._pumps:
            await asyncio.wait(self._pumps, timeout=5)


class Link:
    """connect() -> Tap -> listen(), all inside this process and event loop."""

    def __init__(self):
        self.inbox: asyncio.Queue = asyncio.Queue()

    async def _serve(self, comm):
        while True:
            try:
                got = await comm.read()
            except CommClosedError:
                return
            except Exception as exc:  # the error family raises in read()
                await self.inbox.put(("error", exc))
            else:
                await self.inbox.put(("ok", got))

    async def open(self, codec: str | None):
        saved = Comm.same_host
        cfg = {"distributed.comm.compression": codec or False}
        try:
            if codec:  # both ends are 127.0.0.1: pretend they are not
                Comm.same_host = property(lambda self: False)
            with dask.config.set(cfg):
                self.listener = listen(f"tcp://{LOOPBACK}:0", self._serve, deserialize=True)
                await self.listener.start()
                self.tap = Tap(self.listener.get_host_port()[1])
                port = await self.tap.open()
                self.comm = await connect(f"tcp://{LOOPBACK}:{port}")
                # wait until the server side has finished its handshake too
                for _ in range(200):
                    if self.tap.upstream and self.tap.downstream:
                        break
                    await asyncio.sleep(0.01)
                await asyncio.sleep(0.05)
        finally:
            Comm.same_host = saved
        self.hello_up = bytes(self.tap.upstream)
        self.hello_down = bytes(self.tap.downstream)
        return self

    async def send(self, message, serializers, shard):
        start_up, start_down = len(self.tap.upstream), len(self.tap.downstream)
        self.comm.max_shard_size = shard
        random.seed(RANDOM_SEED)
        await self.comm.write(message, serializers=serializers)
        status, received = await asyncio.wait_for(self.inbox.get(), 60)
        assert len(self.tap.downstream) == start_down, "server wrote during a capture"
        return status, received, bytes(self.tap.upstream[start_up:])

    async def close(self):
        await self.comm.close()
        self.listener.stop()
        await self.tap.shut()


def _recv_message(sock) -> bytes:
    def exactly(n: int) -> bytes:
        parts, left = [], n
        while left:
            chunk = sock.recv(left)
            if not chunk:
                raise EOFError("peer closed mid-message")
            parts.append(chunk)
            left -= len(chunk)
        return b"".join(parts)

    head = exactly(16)
    _first_read, count = struct.unpack("<QQ", head)
    table = exactly(8 * count)
    total = sum(struct.unpack(f"<{count}Q", table))
    return head + table + exactly(total)


# ============================================================================
# Writing a capture folder
# ============================================================================


def dump_json(path: str, obj) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(obj, indent=1, sort_keys=False, ensure_ascii=False))
        fh.write("\n")


def put(path: str, data) -> None:
    with open(path, "wb") as fh:
        fh.write(bytes(data))


def encode_case(case: Case) -> list[bytes]:
    random.seed(RANDOM_SEED)
    frames = dumps(
        case.build(),
        serializers=case.serializers,
        on_error="message",
        context={"compression": case.compression, "pickle-protocol": 5},
        frame_split_size=case.shard,
    )
    return [bytes(f) for f in frames]


async def capture_case(case: Case, link: Link, out: str) -> dict:
    folder = os.path.join(out, case.name)
    os.makedirs(folder)
    frames = encode_case(case)
    for i, fr in enumerate(frames):
        put(os.path.join(folder, f"frame_{i:03d}.bin"), fr)

    status, received, wire = await link.send(case.build(), case.serializers, case.shard)
    put(os.path.join(folder, "wire.bin"), wire)
    wire_info, wire_frames = split_wire(wire)
    if wire_frames != frames:
        raise AssertionError(f"{case.name}: frames in wire.bin differ from dumps() frames")

    expect_status, value = decode_value(frames)
    if status != expect_status:
        raise AssertionError(f"{case.name}: listener read {status}, loads() gave {expect_status}")
    if status == "ok" and py_json(received) != value:
        raise AssertionError(f"{case.name}: listener decoded a different value than loads()")
    if status == "error" and type(received).__name__ != value["$exception"]:
        raise AssertionError(f"{case.name}: listener raised {type(received).__name__}")

    meta = {
        "name": case.name,
        "description": case.description,
        "deterministic": case.deterministic,
        "dumps_call": {
            "serializers": case.serializers,
            "on_error": "message",
            "context": {"compression": case.compression, "pickle-protocol": 5},
            "frame_split_size": case.shard,
        },
        "connection": case.connection,
        "max_shard_size": case.shard,
        "listener_read": status,
        "n_frames": len(frames),
        "frame_nbytes": [len(f) for f in frames],
        "wire": wire_info,
        **describe_frames(frames),
        "value": value,
        "input": py_json(case.build()),
    }
    if case.volatile_frames:
        meta["volatile_frames"] = list(case.volatile_frames)
    dump_json(os.path.join(folder, "case.json"), meta)
    entry = {"name": case.name, "deterministic": case.deterministic, "n_frames": len(frames)}
    if case.deterministic:  # the size of a volatile case depends on the machine
        entry["wire_nbytes"] = len(wire)
    return entry


def describe_single(raw: bytes, with_value: bool = True) -> dict:
    info, frames = split_wire(raw)
    out = {"wire": info, **describe_frames(frames)}
    if with_value:
        out["value"] = decode_value(frames)[1]
    return out


def write_handshakes(out: str, plain: Link, lz: Link) -> dict:
    folder = os.path.join(out, "handshake")
    os.makedirs(folder)
    files = {}
    for prefix, link in (("", plain), ("lz4_", lz)):
        for stem, raw in (("client_to_server", link.hello_up), ("server_to_client", link.hello_down)):
            fname = f"{prefix}{stem}.bin"
            put(os.path.join(folder, fname), raw)
            files[fname] = describe_single(raw)
    meta = {
        "name": "handshake",
        "description": HANDSHAKE_DESC,
        "deterministic": True,
        "files": files,
        "negotiated": {
            "default": {k: plain.comm.handshake_options[k] for k in sorted(plain.comm.handshake_options)},
            "lz4": {k: lz.comm.handshake_options[k] for k in sorted(lz.comm.handshake_options)},
        },
    }
    dump_json(os.path.join(folder, "case.json"), meta)
    return {"name": "handshake", "deterministic": True}


async def capture_scheduler(out: str) -> dict:
    from distributed import Scheduler

    folder = os.path.join(out, "real_scheduler_echo")
    os.makedirs(folder)
    hello = {"compression": None, "python": list(sys.version_info[:3]), "pickle-protocol": 5}
    random.seed(RANDOM_SEED)
    request_frames = dumps(
        {"op": "echo", "data": to_serialize(arange(3, "<i4")), "reply": True},
        context={"compression": None, "pickle-protocol": 5},
    )
    sent_hello = frame_whole([msgpack.packb(hello, use_bin_type=True)])
    request = frame_whole(request_frames)

    async with Scheduler(host=LOOPBACK, port=0, dashboard=False) as sched:
        port = int(sched.address.rsplit(":", 1)[1])

        def talk():
            with socket.create_connection((LOOPBACK, port), timeout=30) as sock:
                sock.sendall(sent_hello)
                got_hello = _recv_message(sock)
                sock.sendall(request)
                return got_hello, _recv_message(sock)

        got_hello, reply = await asyncio.get_running_loop().run_in_executor(None, talk)

    files = {}
    for fname, raw in (("client_handshake.bin", sent_hello), ("scheduler_handshake.bin", got_hello),
                       ("request.bin", request), ("reply.bin", reply)):
        put(os.path.join(folder, fname), raw)
        files[fname] = describe_single(raw)
    meta = {"name": "real_scheduler_echo", "description": SCHEDULER_DESC, "deterministic": True, "files": files}
    dump_json(os.path.join(folder, "case.json"), meta)
    return {"name": "real_scheduler_echo", "deterministic": True}


def check_config() -> None:
    if dask.config.get("distributed.comm.compression") not in (False, None):
        _refuse("distributed.comm.compression is configured; unset it")
    if dask.utils.parse_bytes(dask.config.get("distributed.comm.shard")) != STD_SHARD:
        _refuse("distributed.comm.shard is not the default 64MiB")


async def generate(out: str) -> None:
    check_config()
    if os.path.exists(out):
        for entry in os.listdir(out):
            if entry in FOREIGN:
                continue
            path = os.path.join(out, entry)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.remove(path)
    os.makedirs(out, exist_ok=True)
    links = {"default": await Link().open(None)}
    for codec in sorted({c.compression for c in CASES if c.compression}):
        links[codec] = await Link().open(codec)
    for name, link in links.items():
        negotiated = link.comm.handshake_options["compression"]
        assert negotiated == (None if name == "default" else name), (name, negotiated)

    index = [write_handshakes(out, links["default"], links["lz4"])]
    for case in CASES:
        index.append(await capture_case(case, links[case.connection], out))
    for link in links.values():
        await link.close()
    index.append(await capture_scheduler(out))

    dump_json(os.path.join(out, "index.json"), {
        "generator": "tests/dask/gen_captures.py",
        "versions": {
            "python": ".".join(map(str, sys.version_info[:3])),
            "distributed": distributed.__version__,
            "dask": dask.__version__,
            "msgpack": ".".join(map(str, msgpack.version)),
            "numpy": np.__version__,
            "lz4": lz4.__version__,
            "cloudpickle": cloudpickle.__version__,
            "zstandard": zstandard.__version__,
        },
        "byteorder": sys.byteorder,
        "cases": index,
    })


# ============================================================================
# --check
# ============================================================================


def _without(meta: dict, keys) -> dict:
    return {k: v for k, v in meta.items() if k not in keys}


def _python_of(index_json: str) -> tuple[int, ...]:
    with open(index_json, encoding="utf-8") as fh:
        return tuple(int(x) for x in json.load(fh)["versions"]["python"].split("."))


class PythonVersionSwap:
    """The stored captures as this interpreter would have made them.

    The handshake carries the sender's Python version (``"python": [3, x, y]``), and
    index.json names it: the only bytes of the captures that depend on the interpreter.
    ``bin``/``json`` return a stored file's content with the stored version replaced by
    this interpreter's, everywhere it appears as that field, so that a fresh generation
    on any CPython is compared byte for byte with the rest. ``swapped`` counts the
    files that changed (a --check on another Python that swaps nothing is an error)."""

    def __init__(self, stored: tuple[int, ...], here: tuple[int, ...]):
        self.stored, self.here = list(stored), list(here)
        self.swapped = 0
        packed = [msgpack.packb("python") + msgpack.packb(v) for v in (self.stored, self.here)]
        self.packed_stored, self.packed_here = packed

    def bin(self, data: bytes) -> bytes:
        out = data.replace(self.packed_stored, self.packed_here)
        self.swapped += out != data
        return out

    def json(self, text: str) -> str:
        def walk(v, parent=None):
            if isinstance(v, dict):
                out = {}
                for k, x in v.items():
                    if k == "python" and x in (self.stored, {"$tuple": self.stored}):
                        x = self.here if isinstance(x, list) else {"$tuple": self.here}
                    elif k == "python" and parent == "versions" and x == ".".join(map(str, self.stored)):
                        x = ".".join(map(str, self.here))
                    else:
                        x = walk(x, k)
                    out[k] = x
                return out
            if isinstance(v, list):
                return [walk(x) for x in v]
            return v

        obj = json.loads(text)
        out = json.dumps(walk(obj), indent=1, sort_keys=False, ensure_ascii=False) + "\n"
        self.swapped += out != text
        return out


def compare_trees(expected: str, actual: str) -> tuple[list[str], list[str]]:
    """Return (differences, notes) between a fresh generation and a stored one.

    The stored captures were made by one CPython (index.json): when this one is
    another, its version replaces the stored one in the handshakes and index.json
    before comparing (``PythonVersionSwap``); every other byte is compared as stored."""
    diffs, notes = [], []
    volatile = {c.name: c for c in CASES if not c.deterministic}
    here = tuple(sys.version_info[:3])
    stored_python = _python_of(os.path.join(actual, "index.json"))
    swap = PythonVersionSwap(stored_python, here) if stored_python != here else None

    def same_as_stored(fresh_path: str, stored_path: str) -> bool:
        if swap is None:
            return filecmp.cmp(fresh_path, stored_path, shallow=False)
        if fresh_path.endswith(".json"):
            with open(fresh_path, encoding="utf-8") as fa, open(stored_path, encoding="utf-8") as fb:
                return fa.read() == swap.json(fb.read())
        with open(fresh_path, "rb") as fa, open(stored_path, "rb") as fb:
            return fa.read() == swap.bin(fb.read())

    def files_under(root):
        found = set()
        for base, dirs, names in os.walk(root):
            if base == root:
                dirs[:] = [d for d in dirs if d not in FOREIGN]
            for n in names:
                found.add(os.path.relpath(os.path.join(base, n), root))
        return found

    fresh, stored = files_under(expected), files_under(actual)
    for rel in sorted(fresh ^ stored):
        diffs.append(f"{rel}: only in {'fresh output' if rel in fresh else 'stored captures'}")
    for rel in sorted(fresh & stored):
        a, b = os.path.join(expected, rel), os.path.join(actual, rel)
        case_name = rel.split(os.sep)[0]
        fname = os.path.basename(rel)
        case = volatile.get(case_name)
        if case is None:
            if not same_as_stored(a, b):
                diffs.append(rel)
            continue
        # non-deterministic case: compare only what is stable
        if fname == "wire.bin":
            with open(a, "rb") as fa, open(b, "rb") as fb:
                _, fa_frames = split_wire(fa.read())
                _, fb_frames = split_wire(fb.read())
            same = len(fa_frames) == len(fb_frames) and all(
                x == y for i, (x, y) in enumerate(zip(fa_frames, fb_frames)) if i not in case.volatile_frames)
        elif fname == "case.json":
            with open(a, encoding="utf-8") as fa, open(b, encoding="utf-8") as fb:
                ma, mb = json.load(fa), json.load(fb)
            skip = ("wire", "value", "frame_nbytes")
            same = _without(ma, skip) == _without(mb, skip)
        elif fname.startswith("frame_") and int(fname[6:9]) in case.volatile_frames:
            notes.append(f"{rel}: not compared (machine-dependent content)")
            continue
        else:
            same = filecmp.cmp(a, b, shallow=False)
        if not same:
            diffs.append(rel)
    for name in sorted(volatile):
        notes.append(f"{name}: non-deterministic case, compared without frames "
                     f"{list(volatile[name].volatile_frames)} and the wire/value parts that contain them")
    if swap is not None:
        made, now = (".".join(map(str, v)) for v in (stored_python, here))
        notes.append(f"the captures were made with CPython {made}; compared as made with {now}: "
                     f"its version in {swap.swapped} file(s) (handshakes, index.json), every other byte as stored")
        if swap.swapped == 0:
            diffs.append(f"index.json says CPython {made}, but no stored handshake carries that version")
    return diffs, notes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--out", metavar="DIR",
                      help="write the captures into DIR (emptied first, except the FOREIGN subfolders)")
    mode.add_argument("--check", metavar="DIR", help="regenerate and compare byte-for-byte with DIR")
    args = ap.parse_args()

    if args.out:
        asyncio.run(generate(args.out))
        print(f"wrote {len(CASES) + 2} cases to {args.out}")
        return 0

    if not os.path.isdir(args.check):
        print(f"error: {args.check} is not a directory", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="framewire-captures-") as tmp:
        fresh = os.path.join(tmp, "captures")
        asyncio.run(generate(fresh))
        diffs, notes = compare_trees(fresh, args.check)
    for n in notes:
        print(f"note: {n}")
    if diffs:
        print(f"FAIL: {len(diffs)} file(s) differ from a fresh generation:")
        for d in diffs:
            print(f"  {d}")
        return 1
    print(f"ok: {args.check} matches a fresh generation ({len(CASES) + 2} cases)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
