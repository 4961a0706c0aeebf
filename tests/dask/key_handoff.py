"""Handing keys between a Rust client and a Python `Client` (README, "Keys
between Rust and Python"): what distributed 2026.8.0 does with each way of
doing it, asserted.

The Rust side is played here by the messages a framewire program sends
(`Scatter`, `GatherKeys`, `WhoHas` as RPCs to the scheduler; `RegisterClient`,
`ClientDesiresKeys`, `ClientReleasesKeys` on its client stream), written with
Dask's own `rpc`/`connect`: the same ops, fields and values.

Run by tests/dask_python.rs (`key_handoff_between_rust_and_python`); prints
`ok` and exits 0 when every behaviour is as the README says.
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


async def settle():
    await asyncio.sleep(0.3)


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
            await settle()
            assert "from-rust" not in s.tasks
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
            await settle()
            assert "for-python" not in s.tasks

            # 3. Rust scatters under its id and declares, on its stream, that
            # the Python client wants it too: both hold it; it lives until
            # both release it.
            await rust_scatter("shared", b"shared", RUST)
            stream.send({"op": "client-desires-keys", "keys": ["shared"], "client": c.id})
            await settle()
            k = Future("shared", client=c, state="memory")
            stream.send({"op": "client-releases-keys", "keys": ["shared"], "client": RUST})
            await settle()
            assert "shared" in s.tasks
            assert await k.result(timeout=5) == b"shared"
            del k
            await settle()
            assert "shared" not in s.tasks

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
            await settle()
            xk = x.key
            del x, y
            await settle()
            assert xk in s.tasks, "Rust's desire keeps it"
            assert ("len", 0) not in s.tasks, "nobody else wanted it"
            reply = await r.gather(keys=[xk])
            assert reply["data"] == {xk: b"from python"}, reply

            await stream.close()
            await r.close_rpc()
    print("ok")


asyncio.run(main())
