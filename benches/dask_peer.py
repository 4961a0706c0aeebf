#!/usr/bin/env python3
"""Python Dask's side of scripts/bench-compare: the same requests as
benches/compare.rs (framewire's side), answered with distributed 2026.8.0.

    dask_peer.py serve             JSON requests on stdin, one JSON result per line on stdout
    dask_peer.py rss-recv MODE     receives one message over distributed.comm and prints its
                                   VmRSS before and VmHWM after (peak-RSS row)
    dask_peer.py wire-recv SCHEME CERTS
                                   the receiving process of the wire rows (see `wire`)
    dask_peer.py peer-recv KIND SIZE COUNT
                                   the receiving process of a `peer` measurement: receives
                                   1 + COUNT messages (deserialize=True) and answers "ok"
                                   after the first and after the last
    dask_peer.py peer-pong         the server process of a `peer_rt` measurement: answers
                                   every "ping" with "pong" until the client closes

Requests ("op"): serde {struct, mode, n, min_time, serializers} (serializers: absent
for Dask's default ("dask", "pickle"), "msgpack" for serializers=["msgpack"]), dumps
{size, min_time}, peer {kind, size, count} (two processes: this one writes, a fresh
`peer-recv` process reads; kind "ndarray" or "small"), peer_rt {count} (two processes:
this one asks, a fresh `peer-pong` answers), and the same in this one process (both
ends on one event loop): transport {size, count}, small_one_way {count}, round_trip
{count}; rss {size},
wire {scheme, size, count, certs} (this process sends over SCHEME://, a fresh
`wire-recv` process receives with deserialize=True, as two Dask processes do),
client_setup {address, size}, client_gather {address, key, count}, client_small
{address, n, size} (a distributed.Client, connected once and kept, beside
framewire::dask::Client: see those methods), connect {address, certs, count} (connect + TLS and Dask handshakes + one identity
round trip to a running server, timed, then close), typed {case, path: loads | loads_keep_pickled | dumps} (a captured message of
tests/captures/conversation: protocol.loads of its frames with deserialize=True, as a
worker reads its stream; protocol.loads with deserialize=False and every __Pickled__
block kept as its pickled bytes, not unpickled; or protocol.dumps of what loads gives), reset (drop cached values), quit.

Method: serialize/deserialize and dumps are timed with time.perf_counter (and
time.thread_time for the CPU figure), gc collected before and disabled inside the
timed loop (a lower bound for Python); a loop runs until min_time has passed (at
least one call). The comm rows use distributed.comm over tcp://127.0.0.1 with
deserialize=True on both ends: `peer` and `peer_rt` with one process per end (as
Dask peers run), `transport`, `small_one_way` and `round_trip` with both ends in
this one process on one asyncio event loop (the old set-up, kept as an extra). A
`peer` measurement connects to a fresh receiver, writes one warm-up message and
waits for its "ok", then times `count` messages until the "ok" after the last.
Dask's comm hands `dumps`/`loads` of a message over 10 MiB
(distributed.comm.offload) to its one "Dask-Offload" thread; the socket reads and
writes stay on the event loop.
Modes: never = iterate_collection=False, auto = None, always = True.
"""
import asyncio
import gc
import json
import os
import subprocess
import sys
import time

import numpy as np
from distributed.comm import connect, listen
from distributed.comm.core import CommClosedError
from distributed.protocol import deserialize, dumps, serialize, to_serialize

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = {"never": False, "auto": None, "always": True}


def collection(name, n):
    """The collections of benches/common/mod.rs, element for element."""
    if name in ("tuple_small_ints", "tuple_small_ints_packed"):
        return tuple(i % 100 for i in range(n))
    if name == "list_bytes8":
        return [i.to_bytes(8, "little") for i in range(n)]
    if name == "dict_str_int":
        return {f"k{i}": i % 100 for i in range(n)}
    if name == "nested_small_ints":
        return [[i % 100 for i in range(s, min(s + 10, n))] for s in range(0, n, 10)]
    raise ValueError(f"no Python peer for collection {name!r}")


def timed(fn, min_time):
    """Seconds per call of fn, calling it until min_time has passed."""
    per_call, _, calls = timed_cpu(fn, min_time)
    return per_call, calls


def timed_cpu(fn, min_time):
    """timed(), with this thread's CPU seconds per call too. The clock is read
    after each batch of calls (a batch doubles while it takes under 1 ms), as
    compare.rs reads it."""
    gc.collect()
    gc.disable()
    try:
        calls, batch, last = 0, 1, 0.0
        t0, c0 = time.perf_counter(), time.thread_time()
        while True:
            for _ in range(batch):
                fn()
            calls += batch
            elapsed = time.perf_counter() - t0
            if elapsed >= min_time:
                return elapsed / calls, (time.thread_time() - c0) / calls, calls
            if elapsed - last < 0.001:
                batch *= 2
            last = elapsed
    finally:
        gc.enable()


def rss_and_hwm():
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key = line.split(":", 1)[0]
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(line.split()[1]) * 1024
    return out.get("VmRSS", 0), out.get("VmHWM", 0)


class Peer:
    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.cached = None  # (key, value)
        self.dumps_msgs = {}
        self.warmed = set()
        self.client = None  # (address, distributed.Client): the client_* rows'
        self.held = {}  # key -> Future: the arrays client_setup scattered
        self.small_round = 0
        self.compute_round = 0  # the client_compute / client_tiny inputs, new each call

    def cache(self, key, make):
        if self.cached is None or self.cached[0] != key:
            self.cached = None  # free the previous value first
            gc.collect()
            self.cached = (key, make())
        return self.cached[1]

    # ---- serialize --------------------------------------------------------------------

    def serde(self, req):
        n, mode = req["n"], req["mode"]
        x = self.cache(("serde", req["struct"], n), lambda: collection(req["struct"], n))
        flag = MODES[mode]
        # None: Dask's default ("dask", "pickle"); else e.g. ["msgpack"].
        sers = [req["serializers"]] if req.get("serializers") else None
        if (req["struct"], mode, req.get("serializers")) not in self.warmed:
            # Untimed warm-up, once per collection and mode: first-use costs (imports).
            h, f = serialize(x, serializers=sers, iterate_collection=flag)
            deserialize(h, f)
            del h, f
            self.warmed.add((req["struct"], mode, req.get("serializers")))
        frames = []

        def call():
            h, f = serialize(x, serializers=sers, iterate_collection=flag)
            frames[:] = [len(f)]
            deserialize(h, f)

        per_call, cpu, calls = timed_cpu(call, req.get("min_time", 0.1))
        return {"per_call_s": per_call, "cpu_per_call_s": cpu, "calls": calls, "frames": frames[0]}

    def dumps(self, req):
        size = req["size"]
        if size not in self.dumps_msgs:
            payload = b"\x01" * size
            self.dumps_msgs[size] = {"op": "compute-task", "key": ("x", 0), "data": to_serialize(payload)}
        msg = self.dumps_msgs[size]
        # A comm passes the negotiated compression in the context (False by default in
        # 2026.8.0); without one, dumps would try lz4 on every shard ("auto").
        ctx = {"compression": None}
        nframes = len(dumps(msg, context=ctx))
        per_call, cpu, calls = timed_cpu(lambda: dumps(msg, context=ctx), req.get("min_time", 0.1))
        return {"per_call_s": per_call, "cpu_per_call_s": cpu, "calls": calls, "frames": nframes}

    def msg_collection(self, req):
        """dumps + loads(deserialize=True) of a message carrying the collection in a
        Serialize: Dask iterates a list of bytes by inference."""
        from distributed.protocol import loads

        n = req["n"]
        x = self.cache(("msg_collection", req["struct"], n), lambda: collection(req["struct"], n))
        msg = {"op": "update-data", "data": to_serialize(x)}
        ctx = {"compression": None}
        nframes = len(dumps(msg, context=ctx))
        per_call, cpu, calls = timed_cpu(lambda: loads(dumps(msg, context=ctx), deserialize=True),
                                         req.get("min_time", 0.1))
        return {"per_call_s": per_call, "cpu_per_call_s": cpu, "calls": calls, "frames": nframes}

    def pickle_loads(self, req):
        """Python's C pickle.loads of the pickle at `path`, its result freed, per call
        (the collector on, as in a program; framewire's side drops its value per call)."""
        import pickle

        with open(req["path"], "rb") as fh:
            data = fh.read()
        pickle.loads(data)
        calls = 0
        t0 = time.perf_counter()
        while True:
            value = pickle.loads(data)
            del value
            calls += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= req.get("min_time", 0.3):
                return {"per_call_s": elapsed / calls, "calls": calls, "bytes": len(data)}

    def typed(self, req):
        from distributed.protocol import loads

        case_dir = os.path.join(os.path.dirname(HERE), "tests", "captures", "conversation", req["case"])
        frames, i = [], 0
        while os.path.exists(os.path.join(case_dir, f"frame_{i:03}.bin")):
            with open(os.path.join(case_dir, f"frame_{i:03}.bin"), "rb") as fh:
                frames.append(fh.read())
            i += 1
        if not frames:
            raise ValueError(f"no capture {req['case']}")
        min_time = req.get("min_time", 0.1)
        if req["path"] == "loads":
            per_call, calls = timed(lambda: loads(frames, deserialize=True), min_time)
        elif req["path"] == "loads_keep_pickled":
            # protocol.loads(deserialize=False) with the run_spec kept as a
            # block, as framewire's typed decode keeps it: Dask's own loads,
            # whose one step that unpickles a __Pickled__ block (2026.8.0
            # does it whatever `deserialize` says) keeps the pickled bytes
            # and buffers instead.
            import distributed.protocol.core as core

            class KeepPickled:
                @staticmethod
                def loads(data, buffers=()):
                    return ("pickled", data, list(buffers))

            saved = core.pickle
            core.pickle = KeepPickled
            try:
                kept = [v for m in loads(frames, deserialize=False) for v in m.values()
                        if isinstance(v, tuple) and v[:1] == ("pickled",)]
                if not kept:
                    raise ValueError(f"{req['case']}: no __Pickled__ block kept (Dask's loads changed?)")
                per_call, calls = timed(lambda: loads(frames, deserialize=False), min_time)
            finally:
                core.pickle = saved
        elif req["path"] == "dumps":
            msg = loads(frames, deserialize=True)
            ctx = {"compression": None}
            if dumps(msg, context=ctx) != frames:
                raise ValueError(f"{req['case']}: dumps does not give the captured frames")
            per_call, calls = timed(lambda: dumps(msg, context=ctx), min_time)
        else:
            raise ValueError(f"no path {req['path']!r}")
        return {"per_call_s": per_call, "calls": calls, "frames": len(frames)}

    def reset(self, req):
        self.cached = None
        self.dumps_msgs = {}
        gc.collect()
        return {"ok": True}

    # ---- comm -------------------------------------------------------------------------

    async def _one_way(self, msg, count):
        state = {"n": 0, "target": 1, "done": asyncio.Event()}

        async def handle(comm):
            try:
                while True:
                    m = await comm.read()
                    del m
                    state["n"] += 1
                    if state["n"] == state["target"]:
                        state["done"].set()
            except CommClosedError:
                pass

        listener = listen("tcp://127.0.0.1:0", handle, deserialize=True)
        await listener.start()
        comm = await connect(listener.contact_address, deserialize=True)
        await comm.write(msg)  # warm-up
        await state["done"].wait()
        state.update(n=0, target=count, done=asyncio.Event())
        t0 = time.perf_counter()
        for _ in range(count):
            await comm.write(msg)
        await state["done"].wait()
        secs = time.perf_counter() - t0
        await comm.close()
        listener.stop()
        return secs

    async def _round_trip(self, count):
        async def handle(comm):
            try:
                while True:
                    m = await comm.read()
                    if m == "ping":
                        await comm.write("pong")
            except CommClosedError:
                pass

        listener = listen("tcp://127.0.0.1:0", handle, deserialize=True)
        await listener.start()
        comm = await connect(listener.contact_address, deserialize=True)
        for _ in range(10):  # warm-up
            await comm.write("ping")
            await comm.read()
        t0 = time.perf_counter()
        for _ in range(count):
            await comm.write("ping")
            assert await comm.read() == "pong"
        secs = time.perf_counter() - t0
        await comm.close()
        listener.stop()
        return secs

    def _message(self, kind, size):
        """framewire's `ndarray_message` / `small_task` (benches/common/mod.rs)."""
        if kind == "small":
            return {"op": "compute-task", "key": ("x", 1),
                    "run_spec": ("f", to_serialize(b"\x00" * 1024)), "priority": (0, 1)}
        arr = self.cache(("array", size), lambda: (np.arange(size) % 251).astype(np.uint8))
        return {"op": "send", "data": to_serialize(arr)}

    def transport(self, req):
        size, count = req["size"], req["count"]
        secs = self.loop.run_until_complete(self._one_way(self._message("ndarray", size), count))
        return {"secs": secs, "bytes": size * count, "count": count}

    def small_one_way(self, req):
        secs = self.loop.run_until_complete(self._one_way(self._message("small", 0), req["count"]))
        return {"secs": secs, "count": req["count"]}

    def round_trip(self, req):
        secs = self.loop.run_until_complete(self._round_trip(req["count"]))
        return {"secs": secs, "count": req["count"]}

    # ---- two processes ----------------------------------------------------------------

    def _child(self, *args):
        """A child process of this script; returns it and the address it prints first."""
        child = subprocess.Popen([sys.executable, os.path.abspath(__file__), *map(str, args)],
                                 stdout=subprocess.PIPE, text=True)
        return child, child.stdout.readline().strip()

    def peer(self, req):
        """`count` messages to a fresh `peer-recv` process: the same message as
        `transport` (kind "ndarray", `size` bytes) or `small_one_way` (kind "small")."""
        size, count, kind = req["size"], req["count"], req.get("kind", "ndarray")
        child, addr = self._child("peer-recv", kind, size, count)
        msg = self._message(kind, size)

        async def send():
            comm = await connect(addr, deserialize=True)
            await comm.write(msg)  # warm-up
            await comm.read()
            t0 = time.perf_counter()
            for _ in range(count):
                await comm.write(msg)
            await comm.read()
            secs = time.perf_counter() - t0
            await comm.close()
            return secs

        secs = self.loop.run_until_complete(send())
        child.wait(timeout=120)
        return {"secs": secs, "bytes": size * count, "count": count}

    def peer_rt(self, req):
        """`count` round trips ("ping" / "pong") with a fresh `peer-pong` process."""
        count = req["count"]
        child, addr = self._child("peer-pong")

        async def ask():
            comm = await connect(addr, deserialize=True)
            for _ in range(10):  # warm-up
                await comm.write("ping")
                await comm.read()
            t0 = time.perf_counter()
            for _ in range(count):
                await comm.write("ping")
                assert await comm.read() == "pong"
            secs = time.perf_counter() - t0
            await comm.close()
            return secs

        secs = self.loop.run_until_complete(ask())
        child.wait(timeout=120)
        return {"secs": secs, "count": count}

    def wire(self, req):
        """Sends `count` messages of a `size`-byte ndarray to a fresh `wire-recv` process."""
        size, count, certs = req["size"], req["count"], req.get("certs") or "-"
        child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "wire-recv",
                                  req["scheme"], certs], stdout=subprocess.PIPE, text=True)
        addr = child.stdout.readline().strip()
        arr = self.cache(("array", size), lambda: (np.arange(size) % 251).astype(np.uint8))
        more = {"op": "send", "data": to_serialize(arr), "last": False}
        last = {"op": "send", "data": to_serialize(arr), "last": True}
        _, conn_args = security_args(certs)

        async def send():
            comm = await connect(addr, deserialize=True, **conn_args)
            cipher = comm.extra_info.get("cipher")
            await comm.write(last)
            await comm.read()
            t0 = time.perf_counter()
            for i in range(count):
                await comm.write(last if i + 1 == count else more)
            await comm.read()
            secs = time.perf_counter() - t0
            await comm.close()
            return secs, cipher

        secs, cipher = self.loop.run_until_complete(send())
        child.wait(timeout=120)
        return {"secs": secs, "bytes": size * count, "count": count,
                "cipher": cipher[0] if cipher else None}

    def connect(self, req):
        _, conn_args = security_args(req.get("certs") or "-")

        async def calls():
            times = []
            for _ in range(req["count"]):
                t0 = time.perf_counter()
                comm = await connect(req["address"], **conn_args)
                await comm.write({"op": "identity", "reply": True})
                reply = await comm.read()
                times.append(time.perf_counter() - t0)
                assert "type" in reply, reply
                await comm.close()
            return times

        return {"times": self.loop.run_until_complete(calls())}

    # ---- the client (distributed.Client beside framewire::dask::Client) ---------------

    def _client(self, address):
        """A Client connected to `address` once and kept warm (its connection pool too)."""
        if self.client is None or self.client[0] != address:
            from distributed import Client
            if self.client is not None:
                self.client[1].close()
            self.client = (address, Client(address, set_as_default=False))
        return self.client[1]

    def client_setup(self, req):
        """Scatters a float64 array of `size` bytes to the cluster's worker and holds it
        (for both sides' client_gather); returns its key."""
        c = self._client(req["address"])
        fut = c.scatter(np.ones(req["size"] // 8, dtype=np.float64))
        self.held[fut.key] = fut
        return {"key": fut.key}

    def client_gather(self, req):
        """Client.gather of a held key, `count` times after one untimed gather; with
        `direct`, straight from the worker (`direct=True`, as framewire's gather), else
        as by default (through the scheduler)."""
        c = self._client(req["address"])
        fut = self.held[req["key"]]
        del c  # only the future's client is used
        direct = bool(req.get("direct", False))
        fut.client.gather(fut, direct=direct)  # warm-up, untimed
        times, nbytes = [], 0
        for _ in range(req["count"]):
            t0 = time.perf_counter()
            x = fut.client.gather(fut, direct=direct)
            times.append(time.perf_counter() - t0)
            nbytes = x.nbytes
            del x
        return {"times": times, "bytes": nbytes}

    def client_small(self, req):
        """Client.scatter of a dict of `n` bytes values of `size` bytes under new keys, then
        Client.gather of the futures (checked equal), timed apart; then released, and
        who_has polled until the scheduler has forgotten them (then 0.5 s more for the
        worker), untimed."""
        c = self._client(req["address"])
        self.small_round += 1
        n, size = req["n"], req["size"]
        values = {f"py-small-{self.small_round}-{i}": bytes([i % 251]) * size for i in range(n)}
        t0 = time.perf_counter()
        futs = c.scatter(values)
        t1 = time.perf_counter()
        got = c.gather(futs)
        t2 = time.perf_counter()
        assert got == values, "gathered back as sent"
        del futs, got
        # Untimed: the cluster forgets the keys before the next measure (the
        # other side's), so that no freeing overlaps it.
        keys = list(values)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(c.sync(c.scheduler.who_has, keys=keys).values()):
            time.sleep(0.05)
        time.sleep(0.5)
        return {"scatter_s": t1 - t0, "gather_s": t2 - t1, "secs": t2 - t0, "n": n}

    def _forget(self, c, keys):
        """Untimed: polls the scheduler until it has forgotten `keys` (then 0.5 s)."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(
                s is not None for s in c.sync(c.scheduler.get_task_status, keys=keys).values()):
            time.sleep(0.05)
        time.sleep(0.5)

    def client_compute(self, req):
        """Client.map of operator.add over (i, round) for i in range(n), then wait (as
        `distributed.wait` does, on this client): the
        wall seconds and this process's CPU seconds (every thread: the client's event
        loop runs in one of its own); then released and forgotten, untimed."""
        import operator
        from distributed.client import _wait
        c = self._client(req["address"])
        self.compute_round += 1
        n, r = req["n"], self.compute_round
        t0, cpu0 = time.perf_counter(), time.process_time()
        futs = c.map(operator.add, range(n), [r] * n)
        # `distributed.wait` on this client (not the default one: the peer's
        # client is not set as default).
        c.sync(_wait, futs)
        secs, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        keys = [f.key for f in futs]
        del futs
        self._forget(c, keys)
        return {"secs": secs, "cpu_s": cpu, "n": n}

    def client_tiny(self, req):
        """Client.submit of one operator.add(round, 1) and .result(), `count` times."""
        import operator
        c = self._client(req["address"])
        times, keys = [], []
        for _ in range(req["count"]):
            self.compute_round += 1
            r = self.compute_round
            t0 = time.perf_counter()
            f = c.submit(operator.add, r, 1)
            got = f.result()
            times.append(time.perf_counter() - t0)
            assert got == r + 1
            keys.append(f.key)
            del f
        self._forget(c, keys)
        return {"times": times}

    # ---- peak RSS ---------------------------------------------------------------------

    def rss(self, req):
        """Sends one message with a size-byte ndarray to a fresh receiver process."""
        size = req["size"]
        self.cached = None
        gc.collect()
        child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "rss-recv"],
                                 stdout=subprocess.PIPE, text=True)
        addr = child.stdout.readline().strip()
        arr = np.ones(size, dtype=np.uint8)
        msg = {"op": "send", "data": to_serialize(arr)}

        async def send():
            comm = await connect(addr, deserialize=True)
            await comm.write(msg)
            await comm.read()  # the receiver's "ok", once it has measured
            await comm.close()

        self.loop.run_until_complete(send())
        report = json.loads(child.stdout.readline())
        child.wait(timeout=120)
        return report


def serve_one_comm(handle, address="tcp://127.0.0.1:0", **listen_args):
    """The receiving process of a two-process row: listens on `address`,
    prints its contact address, runs `handle` on the first comm and returns
    once it is done."""
    async def main():
        done = asyncio.Event()

        async def handle_then_stop(comm):
            try:
                await handle(comm)
            finally:
                done.set()

        listener = listen(address, handle_then_stop, deserialize=True, **listen_args)
        await listener.start()
        print(listener.contact_address, flush=True)
        await done.wait()
        listener.stop()

    asyncio.run(main())


def rss_recv():
    async def handle(comm):
        rss_before, hwm_before = rss_and_hwm()
        msg = await comm.read()
        payload = int(msg["data"].nbytes)
        rss_after, hwm_after = rss_and_hwm()
        print(json.dumps({"rss_before": rss_before, "hwm_before": hwm_before,
                          "rss_after": rss_after, "hwm_after": hwm_after,
                          "payload": payload, "deserialized": True}), flush=True)
        del msg
        await comm.write("ok")
        await comm.close()

    serve_one_comm(handle)


def peer_recv(count):
    """Receives 1 + count messages on one comm, "ok" after the first and the last."""
    async def handle(comm):
        await comm.read()
        await comm.write("ok")
        for _ in range(count):
            await comm.read()
        await comm.write("ok")
        await comm.close()

    serve_one_comm(handle)


def peer_pong():
    """Answers every "ping" with "pong" on one comm until it closes."""
    async def handle(comm):
        try:
            while True:
                if await comm.read() == "ping":
                    await comm.write("pong")
        except CommClosedError:
            pass

    serve_one_comm(handle)


def security_args(certs):
    """(listen args, connection args) for the files of `compare make-certs` (`-`: none)."""
    if certs == "-":
        return {}, {}
    from distributed.security import Security

    ca, cert, key = (os.path.join(certs, f) for f in ("ca.pem", "node.pem", "node.key"))
    sec = Security(tls_ca_file=ca, tls_client_cert=cert, tls_client_key=key,
                   tls_scheduler_cert=cert, tls_scheduler_key=key, require_encryption=True)
    return sec.get_listen_args("scheduler"), sec.get_connection_args("client")


def wire_recv(scheme, certs):
    listen_args, _ = security_args(certs)

    async def handle(comm):
        try:
            while True:
                msg = await comm.read()
                assert isinstance(msg["data"], np.ndarray)
                if msg["last"]:
                    await comm.write("ok")
        except CommClosedError:
            pass

    serve_one_comm(handle, f"{scheme}://127.0.0.1:0", **listen_args)


def serve():
    peer = Peer()
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        req = json.loads(line)
        op = req.get("op")
        if op == "quit":
            break
        handler = getattr(peer, op, None)
        try:
            result = handler(req) if handler else {"error": f"unknown op {op!r}"}
        except ValueError as e:
            result = {"error": str(e)}
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "rss-recv":
        rss_recv()
    elif len(sys.argv) == 4 and sys.argv[1] == "wire-recv":
        wire_recv(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 5 and sys.argv[1] == "peer-recv":
        peer_recv(int(sys.argv[4]))
    elif len(sys.argv) == 2 and sys.argv[1] == "peer-pong":
        peer_pong()
    else:
        serve()
