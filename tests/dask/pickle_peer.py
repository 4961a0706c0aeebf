#!/usr/bin/env python3
"""Python's own pickle and Dask's pickle family against framewire::pickle,
for tests/pickle_python.rs. Run with PYTHONHASHSEED=0 (the test sets it), so
that sets iterate in the same order in every run.

    python pickle_peer.py produce DIR
        Pickles every case of `cases()` at protocols 2, 3, 4, 5 (in band) and
        5 with out-of-band buffers ("5oob"): DIR/<id>.pkl and its buffers
        DIR/<id>.buf<i>, and DIR/cases.json: per pickle {"id", "name",
        "mode", "buffers", "expect"}, `expect` being what framewire must read
        (`fw`), or {"$error": variant, ...} when it must refuse; then the
        pickles of `handmade()` (mode "handmade"), `expect` what Python's
        own `pickle.loads` reads of each.

    python pickle_peer.py check DIR
        Reads DIR/check.json (a list of {"id", "name", "buffers",
        "writeable"}), unpickles each DIR/<id>.pkl with its buffers (as Dask
        hands them: memoryviews, read-only unless writeable), and prints one
        JSON line per pickle: {"id", "ok", "why"}, ok when the value is, type
        for type, what `norm` says framewire writes for the case `name`.

    python pickle_peer.py dask FILE SIDECAR
        Writes to FILE enveloped messages {"op": "pickled", "v": block} made
        by `distributed.protocol.dumps`, block = Serialized(*serialize(x,
        serializers=("pickle",))) (a list is a collection of pickle blocks)
        and then ToPickle(x), for the values of `dask_values()`; SIDECAR: per
        message {"name", "kind", "collection", "expect"}.
"""

import collections
import fractions
import json
import math
import os
import pickle
import struct
import sys

import numpy as np

INLINE = 512


class Point:
    """A class instance: its pickle names `__main__.Point`."""

    def __init__(self, x):
        self.x = x


def recursive_list():
    x = [1]
    x.append(x)
    return x


def cases():
    """(name, value, expected error or None)."""
    shared = [1, 2]
    pair = (1, 2)
    yield "none", None, None
    yield "bools", [True, False], None
    yield "ints", [0, 1, -1, 255, 256, 65535, 65536, -(2**31), 2**31 - 1, 2**31,
                   2**63 - 1, -(2**63), 2**64 - 1, 12345678901234], None
    yield "floats", [0.0, -0.0, 1.5, math.nan, math.inf, -math.inf, 1e308, 5e-324], None
    yield "strs", ["", "a", "é€😀", "x" * 300, "y" * 70000], None
    yield "bytes", [b"", b"\x00\xff", b"z" * 300, b"w" * 70000], None
    yield "bytearrays", [bytearray(b"ab"), bytearray()], None
    yield "tuples", [(), (1,), (1, 2), (1, 2, 3), tuple(range(40))], None
    yield "list_mixed", [1, "a", None, 2.5, [3, [4, (5,)]]], None
    yield "list_ints", list(range(2500)), None
    yield "sets", [{1, 2, 3}, frozenset({"a", "b"}), set(), frozenset()], None
    yield "dicts", [{}, {"a": 1, "b": [1, 2]}, {1: "x", (1, 2): "y", b"k": 3.5, None: True}], None
    yield "dict_key_types", [{True: "bool", 2: "int", 3.0: "float", "4": "str", b"5": "bytes"},
                             {1.0: "float one"}, {False: 0}, {(1, 2.0): "tuple"}], None
    yield "dict_str_float", {f"k{i}": i / 7 for i in range(2000)}, None
    yield "shared_list", [shared, {"again": shared}, shared], None
    yield "shared_tuples", [pair] * 3, None
    yield "shared_keys", [{"a": i, "b": -i} for i in range(5)], None
    yield "complex", 1 + 2j, None
    yield "c_f8", np.arange(12.0).reshape(3, 4), None
    yield "fortran_i4", np.asfortranarray(np.arange(6, dtype="<i4").reshape(2, 3)), None
    yield "strided_i8", np.arange(20, dtype="<i8")[::3], None
    yield "zero_d", np.array(7, dtype="<i2"), None
    yield "empty", np.zeros((0, 3)), None
    yield "dtypes", [
        np.arange(3, dtype=">i4"),
        np.array([1 + 2j, -0.5j], dtype="<c16"),
        np.array([0, 10**18], dtype="<M8[ns]"),
        np.array([5, -7], dtype="<m8[10ms]"),
        np.arange(5, dtype="|u1"),
        np.array([True, False, True]),
        np.linspace(0, 1, 4, dtype="<f4"),
        np.array([b"ab", b"c"], dtype="|S3"),
        np.array(["xy", "é"], dtype="<U5"),
        np.arange(3, dtype="<f2"),
    ], None
    yield "big_f8", np.arange(200_000, dtype="<f8"), None
    yield "list_of_arrays", [np.arange(3.0), np.arange(4, dtype="<i4"), np.ones((2, 2))], None
    yield "dict_of_arrays", {"a": np.arange(3.0), "b": np.zeros(2, dtype="<u2")}, None
    yield "scalars", [np.float64(1.5), np.int32(-3), np.bool_(True), np.complex64(1 + 2j),
                      np.datetime64("2020-01-01", "D"), np.uint64(2**64 - 1)], None
    yield "int_too_big", 2**64, {"$error": "IntegerOutOfRange"}
    yield "int_too_small", -(2**63) - 1, {"$error": "IntegerOutOfRange"}
    yield "ordered_dict", collections.OrderedDict(a=1), {
        "$error": "GlobalNotAllowed", "global": "collections.OrderedDict"}
    yield "fraction", fractions.Fraction(1, 3), {
        "$error": "GlobalNotAllowed", "global": "fractions.Fraction"}
    yield "instance", Point(3), {"$error": "GlobalNotAllowed", "global": "__main__.Point"}
    yield "object_array", np.array(["a", 1], dtype=object), {"$error": "UnsupportedDtype"}
    yield "recursive", recursive_list(), {"$error": "Recursive"}


def _push(x):
    """The opcodes that push x (a scalar or a tuple of them), memoizing nothing."""
    if x is None:
        return b"N"
    if type(x) is bool:
        return b"\x88" if x else b"\x89"
    if type(x) is int:
        n = x.to_bytes(x.bit_length() // 8 + 1, "little", signed=True)
        return b"\x8a" + bytes([len(n)]) + n
    if type(x) is float:
        return b"G" + struct.pack(">d", x)
    if type(x) is str:
        return b"\x8c" + bytes([len(x.encode())]) + x.encode()
    if type(x) is bytes:
        return b"C" + bytes([len(x)]) + x
    if type(x) is tuple:
        return b"(" + b"".join(map(_push, x)) + b"t"
    raise TypeError(f"no opcodes for {type(x)}")


def handmade():
    """Pickles no pickler writes, for what Python's own `pickle.loads` reads
    of them: (name, bytes). Dicts that set a key twice keep one entry, the
    first key and the last value (1, 1.0 and True one key), built by
    SETITEMS into a memoized dict, by SETITEM, and by DICT."""
    dicts = {
        "repeated": [(1, None), (1, "x")],
        "numbers": [(1, "a"), (1.0, "b"), (True, "c"), (0, "d"), (-0.0, "e"), (False, "f"),
                    (2**53, "g"), (2.0**53, "h"), (2**53 + 1, "i"), (2**64 - 1, "j"),
                    (2.0**64, "k"), (math.inf, "l"), (math.inf, "m"), (math.nan, "n"),
                    (math.nan, "o"), (0.5, "p"), (0.25, "q"), (0.5, "r")],
        "kinds": [("a", 1), (b"a", 2), (None, 3), (None, 4), ("a", 5), ((1, "a"), 6),
                  ((1.0, "a"), 7), ((1,), 8), ((True, (2.0,)), 9), ((1, (2,)), 10),
                  (("a", "bc"), 11), (("ab", "c"), 12), (("a", "bc"), 13)],
        "many": [(i % 40 if i % 2 else float(i % 40), i) for i in range(1000)],
    }
    for name, pairs in dicts.items():
        items = [_push(k) + _push(v) for k, v in pairs]
        yield f"dup_keys_{name}_setitems", b"\x80\x05}\x94(" + b"".join(items) + b"u."
        yield f"dup_keys_{name}_setitem", b"}" + b"s".join(items) + b"s."
        yield f"dup_keys_{name}_dict", b"(" + b"".join(items) + b"d."


MODES = {"2": (2, False), "3": (3, False), "4": (4, False), "5": (5, False), "5oob": (5, True)}


def _float(x):
    """repr: Rust's parse reads it back exactly ("nan", "inf", "-0.0" too)."""
    return {"$float": repr(x)}


def _ndarray(dtype, shape, raw, inside):
    body = {"dtype": dtype, "shape": list(shape), "inside": inside}
    if len(raw) <= INLINE:
        body["hex"] = raw.hex()
    else:
        import hashlib

        body["len"] = len(raw)
        body["sha256"] = hashlib.sha256(raw).hexdigest()
    return {"$ndarray": body}


def fw(x):
    """What framewire reads for x, as tagged JSON."""
    t = type(x)
    if x is None or t in (bool, int, str):
        return x
    if t is float:
        return _float(x)
    if t in (bytes, bytearray):
        return {"$bytes": bytes(x).hex()}
    if t in (tuple, list, set, frozenset):
        return [fw(e) for e in x]
    if t is dict:
        return {"$map": [[fw(k), fw(v)] for k, v in x.items()]}
    if t is complex:
        return _ndarray("<c16", (), struct.pack("<dd", x.real, x.imag), False)
    if t is np.ndarray or isinstance(x, np.generic):
        a = np.asarray(x)
        return _ndarray(a.dtype.str, a.shape, np.ascontiguousarray(a).tobytes(), True)
    raise TypeError(f"no framewire form for {t}")


def norm(x):
    """What Python gets back from framewire's pickle of what it read from x."""
    t = type(x)
    if x is None or t in (bool, int, float, str, bytes):
        return x
    if t is bytearray:
        return bytes(x)
    if t in (tuple, list, set, frozenset):
        return tuple(norm(e) for e in x)
    if t is dict:
        return {norm(k): norm(v) for k, v in x.items()}
    if t is complex:
        return np.complex128(x)
    if t is np.ndarray:
        return x[()] if x.ndim == 0 else x
    if isinstance(x, np.generic):
        return x
    raise TypeError(f"no framewire form for {t}")


def same(a, b, path="value"):
    """None when a and b are equal type for type (NaN equal to itself), else why not."""
    if type(a) is not type(b):
        return f"{path}: {type(a).__name__} != {type(b).__name__}"
    if type(a) is float:
        return None if struct.pack("<d", a) == struct.pack("<d", b) else f"{path}: {a!r} != {b!r}"
    if type(a) is tuple:
        if len(a) != len(b):
            return f"{path}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            why = same(x, y, f"{path}[{i}]")
            if why:
                return why
        return None
    if type(a) is dict:
        if len(a) != len(b):
            return f"{path}: keys {list(a)!r} != {list(b)!r}"
        # Entry by entry, in order, keys type for type too: 1, 1.0, True and
        # numpy.int64(1) are one key to `==`, but a key written back with
        # another type is wrong; NaN keys found.
        for i, ((ka, va), (kb, vb)) in enumerate(zip(a.items(), b.items())):
            why = same(ka, kb, f"{path}.key{i}") or same(va, vb, f"{path}[{ka!r}]")
            if why:
                return why
        return None
    if type(a) is np.ndarray or isinstance(a, np.generic):
        a, b = np.asarray(a), np.asarray(b)
        if a.dtype != b.dtype or a.shape != b.shape:
            return f"{path}: {a.dtype}{a.shape} != {b.dtype}{b.shape}"
        if np.ascontiguousarray(a).tobytes() != np.ascontiguousarray(b).tobytes():
            return f"{path}: array data differs"
        return None
    return None if a == b else f"{path}: {a!r} != {b!r}"


# The comparison tells key types apart (a check that could not fail would
# hold nothing).
assert same({1: "x"}, {True: "x"}) and same({1: "x"}, {1.0: "x"})
assert same({1: "x"}, {np.int64(1): "x"}) and same({(1,): 0}, {(1.0,): 0})
assert same({1: "x", "a": 2.5}, {1: "x", "a": 2.5}) is None


def rust_cases():
    """The values tests/pickle_python.rs builds itself, by name."""
    yield "rust:ints", (0, 255, 256, 65536, -1, -(2**31) - 1, 2**63 - 1, -(2**63), 2**64 - 1)
    yield "rust:floats", (math.nan, -0.0, math.inf, 2.5)
    yield "rust:text", {"key": "välue", "bytes": b"\x00\x01", "none": None, "t": True}
    yield "rust:packed", tuple(range(-20, 20))
    yield "rust:tuple_keys", {(1, "a"): 1.5, b"k": (), 7: {}}
    yield "rust:broadcast", np.broadcast_to(np.arange(3, dtype="<i8"), (4, 3))
    yield "rust:fortran", np.asfortranarray(np.arange(6, dtype="<i4").reshape(2, 3))
    yield "rust:strided", np.arange(20, dtype="<u2")[::4]
    yield "rust:readonly", np.arange(4, dtype=">f8")
    yield "rust:scalar", np.float32(0.25)
    yield "rust:datetime", np.array([1, 2], dtype="<M8[10ms]")
    yield "rust:nested", ((((),),),)


def produce(out: str) -> None:
    listing = []
    for name, value, error in cases():
        for mode, (protocol, oob) in MODES.items():
            buffers = []
            kwargs = {"protocol": protocol}
            if oob:
                kwargs["buffer_callback"] = buffers.append
            data = pickle.dumps(value, **kwargs)
            ident = f"{name}-p{mode}"
            with open(os.path.join(out, ident + ".pkl"), "wb") as f:
                f.write(data)
            for i, b in enumerate(buffers):
                with open(os.path.join(out, f"{ident}.buf{i}"), "wb") as f:
                    f.write(b.raw())
            expect = error if error is not None else fw(value)
            if error is None and protocol == 2:
                expect = _copied(expect)
            listing.append({"id": ident, "name": name, "mode": mode,
                            "buffers": len(buffers), "expect": expect})
    for name, data in handmade():
        with open(os.path.join(out, name + ".pkl"), "wb") as f:
            f.write(data)
        listing.append({"id": name, "name": name, "mode": "handmade", "buffers": 0,
                        "expect": fw(pickle.loads(data))})
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump(listing, f, ensure_ascii=False)


def _copied(expect):
    """At protocol 2 bytes are latin-1 strs: array data is rebuilt, not sliced."""
    if isinstance(expect, dict) and "$ndarray" in expect:
        return {"$ndarray": {**expect["$ndarray"], "inside": False}}
    if isinstance(expect, dict) and "$map" in expect:
        return {"$map": [[_copied(k), _copied(v)] for k, v in expect["$map"]]}
    if isinstance(expect, list):
        return [_copied(e) for e in expect]
    return expect


def check(out: str) -> None:
    expected = {name: value for name, value, error in cases() if error is None}
    expected.update({name: value for name, value in rust_cases()})
    expected.update({name: pickle.loads(data) for name, data in handmade()})
    with open(os.path.join(out, "check.json")) as f:
        listing = json.load(f)
    for entry in listing:
        ident = entry["id"]
        with open(os.path.join(out, ident + ".pkl"), "rb") as f:
            data = f.read()
        buffers = []
        for i, w in enumerate(entry["writeable"]):
            with open(os.path.join(out, f"{ident}.buf{i}"), "rb") as f:
                raw = f.read()
            buffers.append(memoryview(bytearray(raw)) if w else memoryview(raw))
        try:
            got = pickle.loads(data, buffers=buffers)
            want = expected[entry["name"]]
            want = norm(want) if not entry["name"].startswith("rust:") else want
            why = same(want, got)
            if why is None and isinstance(got, np.ndarray) and not entry["writeable"][0]:
                why = None if not got.flags.writeable else "a read-only array came back writeable"
        except Exception as e:  # noqa: BLE001
            why = f"{type(e).__name__}: {e}"
        print(json.dumps({"id": ident, "ok": why is None, "why": why}), flush=True)


def dask_values():
    yield "int", 42
    yield "big_int", 2**62 + 5
    yield "float", 2.75
    yield "str", "hello, dask"
    yield "dict_str_float", {"a": 1.0, "b": -2.5, "c": math.pi}
    yield "list_of_arrays", [np.arange(1000.0), np.arange(6, dtype="<i4").reshape(2, 3)]
    yield "array", np.arange(100_000, dtype="<f8").reshape(1000, 100)


def dask(path: str, sidecar: str) -> None:
    from distributed.comm.tcp import _add_frames_header
    from distributed.protocol import dumps
    from distributed.protocol.serialize import Serialized, ToPickle, serialize

    context = {"compression": None, "pickle-protocol": 5}
    listing = []
    with open(path, "wb") as f:
        for name, value in dask_values():
            for kind in ("pickle-family", "ToPickle"):
                collection = False
                if kind == "pickle-family":
                    header, frames = serialize(value, serializers=("pickle",))
                    # A list is iterated: a collection of pickle blocks.
                    collection = "is-collection" in header
                    block = Serialized(header, frames)
                else:
                    block = ToPickle(value)
                frames = dumps({"op": "pickled", "v": block}, context=context)
                wire, _, _ = _add_frames_header(frames)
                for piece in wire:
                    f.write(bytes(piece))
                listing.append({"name": name, "kind": kind, "collection": collection,
                                "expect": fw(value)})
    with open(sidecar, "w") as f:
        json.dump(listing, f)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "produce":
        produce(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "check":
        check(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "dask":
        dask(sys.argv[2], sys.argv[3])
    else:
        sys.stderr.write(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main()
