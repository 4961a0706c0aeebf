#!/usr/bin/env python3
"""Live compression interop with the real Python `distributed` 2026.8.0,
for tests/compression_python.rs.

    python compression_peer.py produce SIDECAR.json
        Writes enveloped messages on stdout, made by
        `distributed.protocol.dumps(msg, context={"compression": CODEC,
        "pickle-protocol": 5}, frame_split_size=...)` for CODEC in lz4, zstd
        and zlib (what a comm that negotiated CODEC sends), framed with
        distributed.comm.tcp's own `_add_frames_header`. SIDECAR.json gets a
        JSON list with, per message, {"name", "codec", "value"}: the tagged
        JSON (gen_captures.py's `py_json`) of what Python's own
        `loads(frames, deserialize=True)` returns for those frames.
        `random` is seeded before every dumps (Dask samples at random).

    python compression_peer.py vectors
        Writes on stdout, for a fixed list of inputs (sizes around every
        boundary of liblz4's compressor, random, text, structured, mixed),
        records of three little-endian u64-length-prefixed byte strings:
        the input, `lz4.block.compress(input)` and the zstandard level-3
        frame Dask's `zstd_compress` writes for it.

The other direction (framewire compresses, Python decodes) uses
serialize_peer.py's `consume`.
"""

import json
import os
import random
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_captures import py_json  # noqa: E402  (re-execs with PYTHONHASHSEED=0)

import dask  # noqa: E402
import lz4.block  # noqa: E402
import numpy as np  # noqa: E402
from distributed.comm.tcp import _add_frames_header  # noqa: E402
from distributed.protocol import dumps, loads, to_serialize  # noqa: E402
from distributed.protocol.compression import compressions  # noqa: E402

CODECS = ["lz4", "zstd", "zlib"]


def payloads():
    """(name, message, frame_split_size) for `produce`."""
    rng = np.random.default_rng(7)
    noise = rng.integers(0, 256, 30000, dtype="u1").tobytes()
    # Compressible, but not trivially: small integers.
    smallints = rng.integers(0, 4, 200000, dtype="u1")
    yield "zeros_array", {"op": "x", "a": to_serialize(np.zeros(50000, dtype="u1"))}, None
    yield "text_bytes", {"op": "x", "b": to_serialize(b"the quick brown fox " * 2000)}, None
    yield "random_bytes", {"op": "x", "b": to_serialize(noise)}, None
    yield "small_bytes", {"op": "x", "b": to_serialize(b"tiny")}, None
    yield "f8_arange", {"op": "x", "a": to_serialize(np.arange(40000, dtype="<f8"))}, None
    yield "smallints", {"op": "x", "a": to_serialize(smallints)}, None
    yield "sharded", {
        "op": "x",
        "a": to_serialize(np.arange(30000, dtype="<i4") % 7),
        "z": to_serialize(np.zeros(30000, dtype="u1")),
    }, 12000
    yield "collection", {
        "op": "x",
        # (a str or an int in an iterated collection would be pickled)
        "t": to_serialize((np.zeros(20000, dtype="<u2"), b"y" * 15000, np.arange(5000, dtype="<i8"))),
    }, None


def produce(sidecar: str) -> None:
    out = sys.stdout.buffer
    expected = []
    for codec in CODECS:
        assert compressions[codec].name == codec, codec
        for name, msg, split in payloads():
            kwargs = {"context": {"compression": codec, "pickle-protocol": 5}}
            if split is not None:
                kwargs["frame_split_size"] = split
            random.seed(0)
            frames = dumps(msg, **kwargs)
            value = py_json(loads([bytes(f) for f in frames], deserialize=True))
            expected.append({"name": f"{codec}/{name}", "codec": codec, "value": value})
            wire, _, _ = _add_frames_header(frames)
            for piece in wire:
                out.write(bytes(piece))
    out.flush()
    with open(sidecar, "w") as f:
        json.dump(expected, f, ensure_ascii=False)


def inputs():
    rng = np.random.default_rng(11)
    text = b"Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 4000
    yield b""
    for n in [1, 5, 12, 13, 14, 64, 1000, 65535, 65546, 65547, 65548, 70000]:
        yield bytes(n)
        yield text[:n]
        yield rng.integers(0, 256, n, dtype="u1").tobytes()
        yield rng.integers(0, 3, n, dtype="u1").tobytes()
    yield text
    yield np.arange(100000, dtype="<f8").tobytes()
    yield np.arange(300000, dtype="<i4").tobytes()
    yield (rng.integers(0, 2, 500000, dtype="u1") * 255).tobytes()
    # Runs of random lengths: long and short matches, far and near offsets.
    parts = []
    for _ in range(3000):
        parts.append(rng.integers(0, 256, int(rng.integers(1, 40)), dtype="u1").tobytes())
        parts.append(parts[int(rng.integers(0, len(parts)))])
    yield b"".join(parts)
    # Repeats farther apart than lz4's 64 KiB window.
    block = rng.integers(0, 256, 70000, dtype="u1").tobytes()
    yield block + block + block[:5000]


def vectors() -> None:
    out = sys.stdout.buffer
    zstd = compressions["zstd"].compress
    with dask.config.set({"distributed.comm.zstd.level": 3, "distributed.comm.zstd.threads": 0}):
        for data in inputs():
            for piece in (data, lz4.block.compress(data), zstd(data)):
                out.write(struct.pack("<Q", len(piece)))
                out.write(bytes(piece))
    out.flush()


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "produce":
        produce(sys.argv[2])
    elif len(sys.argv) == 2 and sys.argv[1] == "vectors":
        vectors()
    else:
        sys.stderr.write(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main()
