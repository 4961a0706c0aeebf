#!/usr/bin/env python3
"""A real Python `distributed` comm for framewire's transport interop tests
(tests/transport_python.rs).

    python comm_peer.py listen
        Listens on tcp://127.0.0.1 (random port) with `distributed.comm.listen`,
        prints {"port": P} on the first line of stdout, accepts ONE connection
        (the real Dask handshake runs) and answers each message by its "op":

          "sum"    {"array": ndarray}        -> {"status": "OK", "sum": float, "dtype": str,
                                                 "shape": [..], "first": float}
          "bytes"  {"payload": bytes}        -> {"status": "OK", "len": n, "sha256": hex,
                                                 "reversed": to_serialize(payload[::-1])}
          "echo"   {"data": x}               -> {"status": "OK", "data": x, "type": type name}
          "fail"   {"text": str}             -> distributed.core.error_message(ValueError(text))
          "info"                             -> {"status": "OK", "remote_info": {..}, "options": {..}}
          "close"                            -> "OK", then closes

        Exits when the peer closes the connection.

    python comm_peer.py connect PORT
        Connects to tcp://127.0.0.1:PORT with `distributed.comm.connect`, sends the
        messages of `outgoing()` (numpy arrays and bytes via `to_serialize`, plain
        collections, the handshake it negotiated), reads ONE reply, checks it and
        prints {"ok": true, ...} (or {"ok": false, "error": ...}), then closes.

    Either command then `--tls CA CERT KEY`: the same over tls:// with a
    `distributed.security.Security` made of those files (require_encryption,
    as a TLS cluster is configured); "info" then also answers the TLS
    version and cipher Python's ssl module negotiated.
"""

import asyncio
import hashlib
import json
import sys

import numpy as np
from distributed.comm import connect, listen
from distributed.comm.core import CommClosedError
from distributed.core import error_message
from distributed.protocol import to_serialize
from distributed.security import Security

# Set from `--tls CA CERT KEY`: (scheme, listen args, connection args).
SCHEME, LISTEN_ARGS, CONNECTION_ARGS = "tcp", {}, {}


def use_tls(ca: str, cert: str, key: str) -> None:
    global SCHEME, LISTEN_ARGS, CONNECTION_ARGS
    sec = Security(
        tls_ca_file=ca,
        tls_client_cert=cert,
        tls_client_key=key,
        tls_scheduler_cert=cert,
        tls_scheduler_key=key,
        require_encryption=True,
    )
    SCHEME = "tls"
    LISTEN_ARGS = sec.get_listen_args("scheduler")
    CONNECTION_ARGS = sec.get_connection_args("client")


def emit(obj) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def plain(x):
    """JSON-able view of the handshake dicts."""
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    if isinstance(x, bytes):
        return x.hex()
    return x


async def answer(comm, msg):
    op = msg.get("op") if isinstance(msg, dict) else None
    if op == "sum":
        arr = msg["array"]
        return {
            "status": "OK",
            "sum": float(arr.sum()),
            "dtype": str(arr.dtype),
            "shape": list(arr.shape),
            "first": float(arr.flat[0]) if arr.size else None,
        }
    if op == "bytes":
        payload = bytes(msg["payload"])
        return {
            "status": "OK",
            "len": len(payload),
            "sha256": hashlib.sha256(payload).hexdigest(),
            "reversed": to_serialize(payload[::-1]),
        }
    if op == "echo":
        return {"status": "OK", "data": msg["data"], "type": type(msg["data"]).__name__}
    if op == "fail":
        try:
            raise ValueError(msg["text"])
        except ValueError as e:
            return error_message(e)
    if op == "info":
        info = {k: v for k, v in comm.remote_info.items() if k != "address"}
        reply = {"status": "OK", "remote_info": info, "options": comm.handshake_options}
        cipher = comm.extra_info.get("cipher")
        if cipher:
            reply["tls"] = {"cipher": cipher[0], "version": cipher[1]}
        return reply
    if op == "close":
        return "OK"
    return {"status": "error", "exception_text": f"unknown op {op!r}"}


async def serve() -> None:
    done = asyncio.Event()

    async def handler(comm):
        try:
            while True:
                try:
                    msg = await comm.read()
                except CommClosedError:
                    break
                reply = await answer(comm, msg)
                await comm.write(reply)
                if reply == "OK":
                    await comm.close()
                    break
        finally:
            done.set()

    listener = await listen(f"{SCHEME}://127.0.0.1:0", handler, deserialize=True, **LISTEN_ARGS)
    await listener.start()
    emit({"port": int(listener.listen_address.rsplit(":", 1)[1])})
    await asyncio.wait_for(done.wait(), timeout=120)
    listener.stop()


def outgoing(comm):
    big = np.arange(3_000_000, dtype="<f8")  # 24 MB: framewire's large-frame path
    return [
        {"op": "array", "data": to_serialize(np.arange(10))},
        {"op": "bytes", "data": to_serialize(b"hello world" * 1000), "raw": b"\x00\x01"},
        {"op": "collections", "tuple": (1, "two", 3.5), "list": [1, 2], "nested": {"a": [None, True]}},
        {"op": "big", "data": to_serialize(big), "sum": float(big.sum())},
        {
            "op": "info",
            "options": comm.handshake_options,
            "remote_extension": comm.remote_info.get("framewire-test"),
        },
    ]


async def client(port: int) -> None:
    comm = await connect(f"{SCHEME}://127.0.0.1:{port}", **CONNECTION_ARGS)
    for msg in outgoing(comm):
        await comm.write(msg)
    reply = await comm.read()
    try:
        assert reply["status"] == "OK", reply
        assert reply["received"] == 5, reply
        arr = reply["array"]
        assert isinstance(arr, np.ndarray), type(arr)
        assert arr.dtype == np.dtype("<f8") and arr.shape == (2, 3), (arr.dtype, arr.shape)
        assert arr.tolist() == [[0.5, 1.5, 2.5], [3.5, 4.5, 5.5]], arr.tolist()
        payload = reply["payload"]
        assert isinstance(payload, bytes) and payload == bytes(range(256)) * 512, type(payload)
        emit({"ok": True, "array_sum": float(arr.sum()), "payload_len": len(payload)})
    except AssertionError as e:
        emit({"ok": False, "error": str(e)})
    await comm.close()


def main() -> None:
    args = sys.argv[1:]
    if len(args) >= 4 and args[-4] == "--tls":
        use_tls(*args[-3:])
        args = args[:-4]
    if args == ["listen"]:
        asyncio.run(serve())
    elif args[:1] == ["connect"] and len(args) == 2:
        asyncio.run(asyncio.wait_for(client(int(args[1])), timeout=120))
    else:
        sys.exit("usage: comm_peer.py (listen | connect PORT) [--tls CA CERT KEY]")


if __name__ == "__main__":
    main()
