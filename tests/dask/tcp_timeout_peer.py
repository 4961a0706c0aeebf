#!/usr/bin/env python3
"""What Dask's own TCP comm sets on its sockets, for framewire's
tests/transport_python.rs (`tcp_timeouts_are_set_as_dask_sets_them`).

    python tcp_timeout_peer.py T [T ...]

For each T (seconds), with `distributed.comm.timeouts.tcp` set to T, opens a
real Dask comm over 127.0.0.1 (`distributed.comm.listen` / `connect`: the
comm's constructor calls `set_tcp_timeout`) and reads the options back from
the connecting side's socket. Prints one JSON line: {"T": {"keepalive": 0|1,
"idle": s, "interval": s, "probes": n, "user_timeout_ms": ms}, ...}, or
{"T": {"refused": "<the error>"}} when Dask refuses T.
"""

import asyncio
import json
import socket
import sys

import dask
from distributed.comm import connect, listen

TCP_USER_TIMEOUT = 18  # Linux, as distributed/comm/tcp.py names it


def read(sock: socket.socket) -> dict:
    tcp = socket.IPPROTO_TCP
    return {
        "keepalive": sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
        "idle": sock.getsockopt(tcp, socket.TCP_KEEPIDLE),
        "interval": sock.getsockopt(tcp, socket.TCP_KEEPINTVL),
        "probes": sock.getsockopt(tcp, socket.TCP_KEEPCNT),
        "user_timeout_ms": sock.getsockopt(tcp, TCP_USER_TIMEOUT),
    }


async def options(timeout: str) -> dict:
    async def handle(comm):
        await comm.close()

    with dask.config.set({"distributed.comm.timeouts.tcp": f"{timeout}s"}):
        listener = await listen("tcp://127.0.0.1:0", handle)
        await listener.start()
        try:
            comm = await connect(listener.contact_address, timeout=5)
        except BaseException as e:  # Dask asserts on a timeout too low
            return {"refused": f"{type(e).__name__}: {e}"}
        finally:
            listener.stop()
        got = read(comm.stream.socket)
        comm.abort()
        return got


async def main() -> None:
    print(json.dumps({t: await options(t) for t in sys.argv[1:]}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
