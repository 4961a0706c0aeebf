#!/usr/bin/env python3
"""A real Python `distributed` comm for framewire's live interop tests.

    python peer.py listen
        Listens on tcp://127.0.0.1 (random port) with `distributed.comm.listen`,
        prints the port on the first line of stdout, accepts ONE connection
        (the real Dask handshake runs), then prints one line per message that
        `comm.read()` (deserialize=True) returns, in the tagged JSON of
        gen_captures.py (`py_json`), or {"$exception": name, "message": ...}
        when `read()` raises. Exits when the peer closes the connection.

The tagged JSON is the one the committed captures' `value` fields use, so a
test can compare what Python decoded from framewire's bytes with what Python
decoded from its own.
"""

import asyncio
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_captures import py_json  # noqa: E402  (re-execs with PYTHONHASHSEED=0)

from distributed.comm import listen  # noqa: E402
from distributed.comm.core import CommClosedError  # noqa: E402


def emit(obj) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
    sys.stdout.flush()


async def serve() -> None:
    done = asyncio.Event()

    async def handler(comm):
        try:
            while True:
                try:
                    msg = await comm.read()
                except CommClosedError:
                    break
                except Exception as e:  # a decode error: report it, keep reading if we can
                    emit({"$exception": type(e).__name__, "message": str(e)})
                    if comm.closed():
                        break
                    continue
                emit(py_json(msg))
        finally:
            done.set()

    listener = await listen("tcp://127.0.0.1:0", handler, deserialize=True)
    await listener.start()
    emit(listener.listen_address.rsplit(":", 1)[1])
    await asyncio.wait_for(done.wait(), timeout=120)
    listener.stop()


def main() -> None:
    if sys.argv[1:] != ["listen"]:
        sys.exit("usage: peer.py listen")
    asyncio.run(serve())


if __name__ == "__main__":
    main()
