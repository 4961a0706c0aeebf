"""Handing keys between a Rust client and a Python `Client`
(docs/guide/client.md, "Keys between Rust and Python"): what distributed 2026.8.0 does with each way of
doing it, asserted.

The Rust side is played here by the messages a framewire program sends
(`Scatter`, `GatherKeys`, `WhoHas` as RPCs to the scheduler; `RegisterClient`,
`ClientDesiresKeys`, `ClientReleasesKeys` on its client stream), written with
Dask's own `rpc`/`connect`: the same ops, fields and values.

Run by tests/dask_python.rs (`key_handoff_between_rust_and_python`); prints
`ok` and exits 0 when every behaviour is as that page says.
"""

import asyncio
import logging
import warnings

from distributed import Client, Future, Scheduler, Worker
from distributed.batched import BatchedSend
from distributed.core import connect, rpc
from distributed.protocol import to_serialize

logging.getLogger("distributed").setLevel(logging.CRITICAL)
warnings.simplefilter("ignore")
RUST = "Client-rust-1"


async def until(cond, what, timeout=20):
    """Waits for the scheduler's state to satisfy `cond` (polled every
    10 ms): never a fixed sleep before an assertion."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        await asyncio.sleep(0.01)


def wanted_by(s, key):
    ts = s.tasks.get(key)
    return {cs.client_key for cs in ts.who_wants} if ts is not None else set()


async def main():
    async with Scheduler(port=0, dashboard_address=":0") as s, Worker(
        s.address, nthreads=1
    ):
        async with Client(s.address, asynchronous=True) as c:
            r = rpc(s.address)
            comm = await connect(s.address)
            await comm.write(
                {"op": "register-client", "client": RUST, "reply": False, "versions": {}}
            )
            (start,) = await comm.read()
            assert start["op"] == "stream-start", start
            stream = BatchedSend(interval="2ms")
            stream.start(comm)

            async def rust_scatter(key, value, client):
                keys = await r.scatter(
                    data={key: to_serialize(value)},
                    workers=None,
                    client=client,
                    broadcast=False,
                    timeout=30,
                )
                assert list(keys) == [key], keys

            # 1. Rust scatters under its own id: a bare Future stays pending.
            await rust_scatter("from-rust", b"hello", RUST)
            assert s.tasks["from-rust"].state == "memory"
            f = Future("from-rust", client=c)
            assert f.status == "pending", f.status
            try:
                await f.result(timeout=1)
                raise AssertionError("a bare Future got a result")
            except TimeoutError:
                pass
            # state="memory" makes it finished, and result() gathers it...
            g = Future("from-rust", client=c, state="memory")
            assert g.status == "finished", g.status
            assert await g.result(timeout=5) == b"hello"
            # ...but the scheduler does not count the Python reference: once
            # Rust releases the key it is forgotten, and the future fails.
            assert {cs.client_key for cs in s.tasks["from-rust"].who_wants} == {RUST}
            stream.send({"op": "client-releases-keys", "keys": ["from-rust"], "client": RUST})
            await until(lambda: "from-rust" not in s.tasks, "from-rust forgotten")
            try:
                await g.result(timeout=5)
                raise AssertionError("a forgotten key gave a result")
            except Exception as e:
                assert type(e).__name__ == "FutureCancelledError", repr(e)
            del f, g

            # 2. Rust scatters under the Python client's id: Python owns it,
            # and dropping the future releases it.
            await rust_scatter("for-python", b"owned", c.id)
            h = Future("for-python", client=c, state="memory")
            assert await h.result(timeout=5) == b"owned"
            del h
            await until(lambda: "for-python" not in s.tasks, "for-python forgotten")

            # 3. Rust scatters under its id and declares, on its stream, that
            # the Python client wants it too: both hold it; it lives until
            # both release it.
            await rust_scatter("shared", b"shared", RUST)
            stream.send({"op": "client-desires-keys", "keys": ["shared"], "client": c.id})
            await until(lambda: wanted_by(s, "shared") == {RUST, c.id}, "both want shared")
            k = Future("shared", client=c, state="memory")
            stream.send({"op": "client-releases-keys", "keys": ["shared"], "client": RUST})
            # Rust's release is processed, and the key stays for Python.
            await until(lambda: wanted_by(s, "shared") == {c.id}, "Rust's release of shared")
            assert s.tasks["shared"].state == "memory"
            assert await k.result(timeout=5) == b"shared"
            del k
            await until(lambda: "shared" not in s.tasks, "shared forgotten")

            # 4. Python -> Rust: keys (str or tuple) read by key from the
            # scheduler, kept after Python drops them once Rust desires them.
            x = await c.scatter(b"from python")
            y = c.submit(len, x, key=("len", 0))
            await y
            who_has = await r.who_has(keys=[x.key, list(y.key)])
            assert set(who_has) == {x.key, ("len", 0)}, who_has
            reply = await r.gather(keys=[x.key, list(y.key)])
            assert reply["status"] == "OK", reply
            assert reply["data"] == {x.key: b"from python", ("len", 0): 11}, reply
            stream.send({"op": "client-desires-keys", "keys": [x.key], "client": RUST})
            xk = x.key
            await until(lambda: RUST in wanted_by(s, xk), "Rust's desire of x")
            del x, y
            # Python's release of both is processed: its key is forgotten,
            # and x stays, for Rust alone.
            await until(lambda: ("len", 0) not in s.tasks, "nobody else wanted it")
            await until(lambda: c.id not in wanted_by(s, xk), "Python's release of x")
            assert wanted_by(s, xk) == {RUST}, "Rust's desire keeps it"
            reply = await r.gather(keys=[xk])
            assert reply["data"] == {xk: b"from python"}, reply

            await stream.close()
            await r.close_rpc()
    print("ok")


asyncio.run(main())
