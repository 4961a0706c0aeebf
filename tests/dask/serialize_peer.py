#!/usr/bin/env python3
"""Live serialize-layer interop with the real Python `distributed` 2026.8.0,
for tests/python_serialize.rs.

    python serialize_peer.py consume
        Reads a stream of enveloped messages on stdin (the TCP framing:
        u64 first-read length | u64 count | count x u64 length | frames, all
        little-endian), splits it itself, and for each message prints one line:
        the tagged JSON (gen_captures.py's `py_json`) of
        `distributed.protocol.loads(frames, deserialize=True)`, or
        {"$exception": name, "message": str(exc)} if loads raises.

    python serialize_peer.py produce SIDECAR.json
        Writes enveloped messages made by `distributed.protocol.dumps(msg,
        context={"compression": None, "pickle-protocol": 5})` (framed with
        distributed.comm.tcp's own `_add_frames_header`) on stdout, and to
        SIDECAR.json a JSON list with, per message, {"name", "value"}: the
        tagged JSON of what Python's own `loads(frames, deserialize=True)`
        returns for those frames.
"""

import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_captures import py_json  # noqa: E402  (re-execs with PYTHONHASHSEED=0)

import numpy as np  # noqa: E402
from distributed.comm.tcp import _add_frames_header  # noqa: E402
from distributed.protocol import dumps, loads, to_serialize  # noqa: E402
from distributed.protocol.serialize import Serialized, serialize  # noqa: E402

CONTEXT = {"compression": None, "pickle-protocol": 5}


def split_stream(data: bytes):
    """Yields the frame list of each enveloped message in `data`."""
    pos = 0
    while pos < len(data):
        first_read, count = struct.unpack_from("<QQ", data, pos)
        lengths = struct.unpack_from(f"<{count}Q", data, pos + 16)
        at = pos + 16 + 8 * count
        assert first_read >= 8 + 8 * count, (first_read, count)
        frames = []
        for n in lengths:
            frames.append(data[at : at + n])
            at += n
        assert at <= len(data), "truncated message"
        pos = at
        yield frames


def consume() -> None:
    data = sys.stdin.buffer.read()
    for frames in split_stream(data):
        try:
            out = py_json(loads(frames, deserialize=True))
        except Exception as e:  # noqa: BLE001
            out = {"$exception": type(e).__name__, "message": str(e)}
        sys.stdout.write(json.dumps(out, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def messages():
    """(name, message, frame_split_size) for `produce`."""
    c2d = np.arange(12, dtype="<f8").reshape(3, 4)
    fortran = np.asfortranarray(np.arange(6, dtype="<i4").reshape(2, 3))
    assert fortran.flags.f_contiguous and not fortran.flags.c_contiguous
    bcast = np.broadcast_to(np.arange(3, dtype="<i8"), (4, 3))
    yield "c_order_f8", {"op": "x", "a": to_serialize(c2d)}, None
    yield "fortran_i4", {"op": "x", "a": to_serialize(fortran)}, None
    yield "broadcast_i8", {"op": "x", "a": to_serialize(bcast)}, None
    yield "zero_d_i2", {"op": "x", "a": to_serialize(np.array(7, dtype="<i2"))}, None
    yield "strided_slice", {"op": "x", "a": to_serialize(np.arange(20, dtype="<i8")[::3])}, None
    yield "empty_f8", {"op": "x", "a": to_serialize(np.zeros(0, dtype="<f8"))}, None
    yield "dtypes", {
        "op": "x",
        "be": to_serialize(np.arange(3, dtype=">i4")),
        "c16": to_serialize(np.array([1 + 2j, -0.5j], dtype="<c16")),
        "dt": to_serialize(np.array([0, 10**18], dtype="<M8[ns]")),
        "u1": to_serialize(np.arange(5, dtype="|u1")),
        "b1": to_serialize(np.array([True, False, True])),
        "f4": to_serialize(np.linspace(0, 1, 4, dtype="<f4")),
        "f2d": to_serialize(np.asfortranarray(np.arange(12, dtype="<f8").reshape(3, 4))),
    }, None
    yield "bytes", {"op": "x", "b": to_serialize(b"hello world"), "e": to_serialize(b"")}, None
    yield "bytes_list", {"op": "x", "l": to_serialize([b"a", b"b"])}, None
    # 40 bytes, one frame each: framewire packs them (Value::BinArray).
    yield "bytes_list_long", {"op": "x", "l": to_serialize([i.to_bytes(8, "little") for i in range(40)])}, None
    yield "dict_of_array", {"op": "x", "d": to_serialize({"k": np.ones(3)})}, None
    yield "mixed_tuple", {
        "op": "x",
        "t": to_serialize((np.arange(3, dtype="<i8"), b"raw", "s", 42, {"n": np.arange(2, dtype="<u2")})),
    }, None
    yield "nested_in_frame0", {
        "op": "x",
        "tasks": [
            {"key": ("k", 0), "data": to_serialize(np.arange(4, dtype="<f4"))},
            {"key": ("k", 1), "data": to_serialize(b"\x00\x01")},
        ],
    }, None
    # Blobs of Dask's msgpack family (what serializers=("msgpack",) sends):
    # framewire packs the long integer arrays in them.
    def msgpack_blob(x):
        return Serialized(*serialize(x, serializers=("msgpack",), iterate_collection=False))

    yield "msgpack_ints", {
        "op": "x",
        "small": msgpack_blob(tuple(range(-50, 50))),
        "wide": msgpack_blob([2**63 - 1, -(2**63), 0, 255, -129] * 8),
        "over": msgpack_blob(list(range(40)) + [2**64 - 1]),
        "short": msgpack_blob(tuple(range(5))),
        "nested": msgpack_blob({"n": tuple(range(40)), "s": ("a", 1)}),
    }, None
    yield "sharded", {
        "op": "x",
        "big": to_serialize(np.arange(5000, dtype="<u2")),
        "blob": to_serialize(bytes(range(256)) * 40),
    }, 4096


def produce(sidecar: str) -> None:
    out = sys.stdout.buffer
    expected = []
    for name, msg, split in messages():
        kwargs = {"context": CONTEXT}
        if split is not None:
            kwargs["frame_split_size"] = split
        frames = dumps(msg, **kwargs)
        # What Python itself reads back from these frames.
        value = py_json(loads([bytes(f) for f in frames], deserialize=True))
        expected.append({"name": name, "n_frames": len(frames), "value": value})
        wire, _, _ = _add_frames_header(frames)
        for piece in wire:
            out.write(bytes(piece))
    out.flush()
    with open(sidecar, "w") as f:
        json.dump(expected, f, ensure_ascii=False)


def main() -> None:
    if len(sys.argv) >= 2 and sys.argv[1] == "consume":
        consume()
    elif len(sys.argv) == 3 and sys.argv[1] == "produce":
        produce(sys.argv[2])
    else:
        sys.stderr.write(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main()
