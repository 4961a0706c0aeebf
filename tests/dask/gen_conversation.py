#!/usr/bin/env python3
"""Real Dask conversations, recorded on the wire, cut into one folder per op.

    python gen_conversation.py --out DIR     (re)create DIR (tests/captures/conversation)
    python gen_conversation.py --check DIR   regenerate into a temp dir and compare with DIR
    python gen_conversation.py --session DIR (re)create DIR with the whole session
                                             (tests/captures/sessions/<release>), any release

A real ``distributed.Scheduler`` (its own process), two real ``distributed.Worker``
processes (``w0``, ``w1``, one thread each) and a ``Client`` (this process) talk over
127.0.0.1. Every TCP connection goes through a recording proxy that this script runs:
one proxy in front of the scheduler and one in front of each worker. The workers are
started with ``contact_address=<their proxy>``, so the address they register with, and
that the scheduler, the client and the other worker use to reach them, is the proxy's.
Each accepted connection is attributed to the process that opened it (psutil looks up
the connecting socket), so every recorded byte stream has a known sender and receiver.

A fixed workload makes every op of ``REQUIRED`` appear (scatter, submit, a task that
raises, a task that raises ``Reschedule``, a dependency fetched from the other worker,
gathers through the scheduler and directly from the workers, ``replicate`` up and down,
an AMM ``run_once`` (ReduceReplicas), work stealing, a pause, ``client.map``, a
dask.array sum, ``client.run``, releases, an ``rpc`` to a worker, a bad RPC call,
``retire_workers`` and the shutdown). The recorded streams are
split into messages (``u64 first-read | u64 n | n x u64 len | frames``), labelled, and
up to two examples per op are stored as ``<op>_<n>/``:

  frame_NNN.bin   the frames of that one message
  wire.bin        that one message's bytes, as recorded
  case.json       name, op, ops (every op in a batched list message), description,
                  deterministic (false), channel, direction, sender, receiver,
                  n_frames, frame_nbytes, wire (framing), message (frame 0 in
                  framewire JSON, placeholders as {"$serialized": i}/{"$pickled": i}),
                  blocks, orphans, structure (keys and value kinds of the op's dict),
                  and, for replies, the request op.

Case names: ``<op>_<n>`` for requests and stream messages, ``<op>-reply_<n>`` for the
reply of an RPC, ``get_data-ok_<n>`` for the "OK" the caller of ``get_data`` writes back,
``close-reply_<n>`` for the "OK" that answers ``{op: close, reply: true}``,
``uncaught-error-reply_<n>`` for an error reply of ``Server._handle_comm``, and
``handshake_<n>`` for the two handshake messages of the w0 -> scheduler connection.
The JSON conventions are the ones of gen_captures.py (``fw_json``).

``--session DIR`` runs the same workload and stores every message of it, in the order of
the recorded connections (each connection's messages from its opener, then those to it):

  session.bin     the messages' bytes, one after the other
  session.json    versions, config, and per message: offset and nbytes in session.bin,
                  conn, index (position in its direction of its connection), channel,
                  direction, sender, receiver, ops (every op of a batched list), labels
                  (as for the cases), request_op for replies, failed: true for a
                  request whose reply is an error; the inventory, and notes.

It runs with whatever release of ``distributed`` the interpreter has (scripts/setup-python
RELEASE makes a venv per release); --out and --check are for 2026.8.0's examples.

The content is not deterministic (times, ports, ids, pids, uuids). ``--check`` checks
that a fresh run produces the same set of case names and that the structure of every
stored case (keys and value kinds of frame 0; for a batched list, of the op's own dict)
is one that the fresh run produced for that op and direction.

Test-only tweak: a worker sends ``{"op": "keep-alive"}`` from a 60 s PeriodicCallback;
the worker processes restart that callback with a 2 s period so the run stays short.
Internal: ``--role scheduler|worker`` runs one of the Dask processes.
"""

from __future__ import annotations

import os
import sys

if os.environ.get("PYTHONHASHSEED") != "0":
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0"})

import argparse  # noqa: E402
import asyncio  # noqa: E402
import inspect  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import struct  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402

LOOPBACK = "127.0.0.1"
# the release of tests/captures/conversation (--out, --check); --session takes any
REQUIRED_DISTRIBUTED = "2026.8.0"

# dask.config used by every process of the conversation
CONFIG = {
    # steal quickly (default 1s)
    "distributed.scheduler.work-stealing-interval": "100ms",
    # the AMM runs only when the workload asks (client.amm.run_once())
    "distributed.scheduler.active-memory-manager.start": False,
    "distributed.comm.compression": False,
}

# ============================================================================
# Roles: the scheduler and worker processes
# ============================================================================


def _role_logging(name: str) -> None:
    logging.basicConfig(level=logging.WARNING, format=f"[{name}] %(levelname)s %(name)s: %(message)s")
    logging.getLogger("distributed").setLevel(logging.ERROR)


async def _role_scheduler() -> None:
    import dask
    from distributed import Scheduler

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    with dask.config.set(CONFIG):
        async with Scheduler(host=LOOPBACK, port=0, dashboard=False) as sched:
            print(f"ADDRESS {sched.address}", flush=True)
            await stop.wait()
    print("CLOSED", flush=True)


async def _role_worker(scheduler: str, contact: str, name: str, local_directory: str) -> None:
    import dask
    from distributed import Worker
    from distributed.core import Status

    with dask.config.set(CONFIG):
        w = await Worker(
            scheduler, host=LOOPBACK, port=0, contact_address=contact, name=name,
            nthreads=1, dashboard=False, memory_limit="2GiB", local_directory=local_directory,
        )
        # keep-alive: same callback, 2 s period instead of 60 s
        pc = w.periodic_callbacks["keep-alive"]
        pc.stop()
        pc.callback_time = 2000
        pc.start()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGUSR1, lambda: setattr(w, "status", Status.paused))
        loop.add_signal_handler(signal.SIGUSR2, lambda: setattr(w, "status", Status.running))
        loop.add_signal_handler(signal.SIGTERM, lambda: asyncio.ensure_future(w.close(reason="sigterm")))
        print(f"LISTENING {w.listener.contact_address}", flush=True)
        await w.finished()
    print("CLOSED", flush=True)


def run_role(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", choices=["scheduler", "worker"], required=True)
    ap.add_argument("--scheduler")
    ap.add_argument("--contact")
    ap.add_argument("--name")
    ap.add_argument("--local-directory")
    a = ap.parse_args(argv)
    _role_logging(a.name or a.role)
    if a.role == "scheduler":
        asyncio.run(_role_scheduler())
    else:
        asyncio.run(_role_worker(a.scheduler, a.contact, a.name, a.local_directory))
    return 0


if __name__ == "__main__" and "--role" in sys.argv:
    sys.exit(run_role(sys.argv[1:]))

# ---- main process only below ------------------------------------------------

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_captures as gc  # noqa: E402  (refuses to run on a wrong distributed / host)

import cloudpickle  # noqa: E402
import dask  # noqa: E402
import dask.array as da  # noqa: E402
import distributed  # noqa: E402
import lz4  # noqa: E402
import msgpack  # noqa: E402
import numpy as np  # noqa: E402
import psutil  # noqa: E402
import tornado  # noqa: E402
import zstandard  # noqa: E402
from distributed import Client, Reschedule, Scheduler, wait  # noqa: E402
from distributed.core import rpc  # noqa: E402
from distributed.protocol import loads  # noqa: E402

MsgMap = gc.MsgMap

# ============================================================================
# What is stored
# ============================================================================

# op -> (number of examples to store, description)
REQUIRED: dict[str, tuple[int, str]] = {
    "handshake": (2, "First message on a new TCP connection, written by both sides before anything"
                     " else (distributed/comm/core.py connect() / Listener.on_connection):"
                     " {compression, python, pickle-protocol}. Both directions of the w0 -> scheduler"
                     " connection."),
    "register-worker": (1, "Worker -> scheduler, first message on the connection that becomes the"
                           " worker's batched stream (Worker._register_with_scheduler), reply=False;"
                           " handled by Scheduler.add_worker."),
    "register-worker-reply": (1, "Scheduler.add_worker's reply, written with comm.write on the same"
                                 " connection: {status, time, heartbeat-interval, worker-plugins}."),
    "heartbeat_worker": (2, "Worker -> scheduler RPC (Worker.heartbeat); handled by Scheduler.heartbeat_worker."),
    "heartbeat_worker-reply": (2, "Scheduler.heartbeat_worker's reply: {status, time, heartbeat-interval}."),
    "compute-task": (2, "Scheduler -> worker batched stream (Scheduler._task_to_msg); run_spec is a"
                        " ToPickle block ({__Pickled__: i})."),
    "task-finished": (2, "Worker -> scheduler batched stream (TaskFinishedMsg.to_dict)."),
    "task-erred": (2, "Worker -> scheduler batched stream (TaskErredMsg.to_dict), and the scheduler's"
                      " report of the same name to the client (_task_to_report_msg)."),
    "free-keys": (2, "Scheduler -> worker batched stream: forget these keys."),
    "free_keys": (1, "Scheduler -> worker RPC (Scheduler.delete_worker_data, used by replicate to drop"
                     " replicas); handled by Worker._handle_remote_stimulus(FreeKeysEvent), replies None."),
    "free_keys-reply": (1, "The worker's reply to the free_keys RPC: nil."),
    "release-worker-data": (2, "Worker -> scheduler batched stream (ReleaseWorkerDataMsg)."),
    "add-keys": (2, "Worker -> scheduler batched stream (AddKeysMsg), after a replica arrived from a peer."),
    "reschedule": (1, "Worker -> scheduler batched stream (RescheduleMsg) after a task raised"
                      " distributed.Reschedule."),
    "acquire-replicas": (1, "Scheduler -> worker batched stream (Scheduler.request_acquire_replicas, from"
                            " the AMM RetireWorker policy during retire_workers)."),
    "remove-replicas": (1, "Scheduler -> worker batched stream (Scheduler.request_remove_replicas, AMM"
                           " ReduceReplicas)."),
    "steal-request": (2, "Scheduler -> worker batched stream (WorkStealing.move_task_request)."),
    "steal-response": (2, "Worker -> scheduler batched stream (StealResponseMsg); handled by"
                          " WorkStealing.move_task_confirm."),
    "worker-status-change": (2, "Worker -> scheduler (Worker._send_worker_status_change) and scheduler ->"
                                " worker (retire_workers) batched streams."),
    "keep-alive": (1, "Worker -> scheduler batched stream, from a PeriodicCallback (60 s in Dask; 2 s here)."),
    "close": (2, "{op: close}: scheduler -> worker batched stream (remove_worker / close_worker), and an"
                 " RPC comm's goodbye {op: close, reply: false} (rpc.close_comms)."),
    "close-reply": (1, "'OK', written by Server._handle_comm for {op: close, reply: true}."),
    "close-stream": (2, "Last message of a batched stream: worker -> scheduler (Worker.close) and client ->"
                        " scheduler (Client._close)."),
    "stream-start": (1, "Scheduler -> client, first batched-stream message after register-client"
                        " (Scheduler.add_client)."),
    "get_data": (2, "Worker RPC (get_data_from_worker): a peer worker fetching a dependency, the scheduler"
                    " or the client gathering."),
    "get_data-reply": (2, "Worker.get_data's reply {status: OK, data: {key: Serialize}}."),
    "get_data-ok": (2, "The 'OK' the caller of get_data writes back after a status-OK reply."),
    "update_data": (2, "Worker RPC (scatter to workers) and scheduler RPC (client learns the scheduler"
                       " about directly scattered data)."),
    "update_data-reply": (2, "Reply of update_data: the worker's {nbytes, status} or the scheduler's nil."),
    "gather": (2, "Worker RPC gather (Scheduler.gather_on_worker during replicate) and scheduler RPC"
                  " gather (Client._gather_remote)."),
    "gather-reply": (2, "Reply of gather: the worker's {status} or the scheduler's {status, data}."),
    "scatter": (1, "Scheduler RPC scatter (Client._scatter without direct)."),
    "scatter-reply": (1, "Scheduler.scatter's reply: the list of keys."),
    "identity": (2, "Scheduler RPC and worker RPC identity."),
    "identity-reply": (2, "Reply of identity: Scheduler.identity / Worker.identity dicts."),
    "uncaught-error-reply": (1, "error_message(e, status='uncaught-error') written by Server._handle_comm"
                                " when a handler raises (here: identity called with an unknown keyword)."),
}

CHANNEL_ORDER = [
    "worker-scheduler stream", "client-scheduler stream", "worker-worker stream",
    "scheduler RPC", "worker RPC", "handshake",
]

# ============================================================================
# Task functions (pickled by value to the workers)
# ============================================================================


def inc(x):
    return x + 1


def nbytes_of(b):
    return len(b)


def boom(x):
    raise ValueError(f"boom {x}")


def resched(marker):
    import os as _os

    if not _os.path.exists(marker):
        with open(marker, "w"):
            pass
        raise Reschedule()
    return "rescheduled once"


def slow(i, delay):
    import time as _time

    _time.sleep(delay)
    return i


# ============================================================================
# Recording proxy
# ============================================================================


@dataclass
class Conn:
    cid: int
    server: str                 # proxied server role: scheduler / w0 / w1
    peer: tuple
    sender: str = "unknown"     # process that opened the connection
    up: bytearray = field(default_factory=bytearray)    # connector -> server
    down: bytearray = field(default_factory=bytearray)  # server -> connector


class Recorder:
    def __init__(self):
        self.conns: list[Conn] = []
        self.pids: dict[int, str] = {os.getpid(): "client"}

    def who(self, peer: tuple, proxy_port: int) -> str:
        for c in psutil.net_connections(kind="tcp4"):
            if c.laddr and c.raddr and tuple(c.laddr) == tuple(peer[:2]) and c.raddr[1] == proxy_port:
                return self.pids.get(c.pid, f"pid-{c.pid}")
        return "unknown"


class Proxy:
    def __init__(self, server: str, rec: Recorder):
        self.server = server
        self.rec = rec
        self.target: tuple | None = None
        self.ready = asyncio.Event()
        self.pumps: list[asyncio.Task] = []

    async def open(self) -> str:
        self._srv = await asyncio.start_server(self._accept, LOOPBACK, 0)
        self.port = self._srv.sockets[0].getsockname()[1]
        return f"tcp://{LOOPBACK}:{self.port}"

    def set_target(self, address: str) -> None:
        host, port = address.split("://", 1)[1].rsplit(":", 1)
        self.target = (host, int(port))
        self.ready.set()

    async def _accept(self, c_reader, c_writer):
        peer = c_writer.get_extra_info("peername")
        conn = Conn(len(self.rec.conns), self.server, peer)
        self.rec.conns.append(conn)
        conn.sender = await asyncio.get_running_loop().run_in_executor(None, self.rec.who, peer, self.port)
        await asyncio.wait_for(self.ready.wait(), 60)
        s_reader, s_writer = await asyncio.open_connection(*self.target)
        loop = asyncio.get_running_loop()
        self.pumps.append(loop.create_task(self._pump(c_reader, s_writer, conn.up)))
        self.pumps.append(loop.create_task(self._pump(s_reader, c_writer, conn.down)))

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
            try:
                writer.close()
            except Exception:
                pass

    async def shut(self):
        self._srv.close()
        if self.pumps:
            await asyncio.wait(self.pumps, timeout=10)


# ============================================================================
# The conversation
# ============================================================================


class Proc:
    def __init__(self, name: str, args: list[str], logdir: str):
        self.name = name
        self.log = open(os.path.join(logdir, f"{name}.log"), "w")
        self.p = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--role", *args],
            stdout=subprocess.PIPE, stderr=self.log, text=True,
        )

    async def line(self, prefix: str, timeout: float = 60) -> str:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            text = await asyncio.wait_for(loop.run_in_executor(None, self.p.stdout.readline), timeout)
            if not text:
                raise RuntimeError(f"{self.name} exited before printing {prefix}")
            if text.startswith(prefix):
                return text[len(prefix):].strip()
        raise TimeoutError(f"{self.name}: no {prefix} line")

    def signal(self, sig) -> None:
        self.p.send_signal(sig)

    async def wait(self, timeout: float = 30) -> int | None:
        loop = asyncio.get_running_loop()
        try:
            return await asyncio.wait_for(loop.run_in_executor(None, self.p.wait), timeout)
        except asyncio.TimeoutError:
            self.p.kill()  # our own child, by its handle
            return None


async def until(pred, timeout: float = 30, step: float = 0.05):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await pred():
        if loop.time() > deadline:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(step)


async def workload(client: Client, w0: str, w1: str, procs: dict, sched: str, tmp: str) -> None:
    arr = np.arange(512, dtype="<f8")            # 4 KiB
    blob = b"framewire-" + bytes(range(54))      # 64 bytes

    # identity (also sent by the client on connect with n_workers=0; 2024.12.1's
    # Scheduler.identity takes no n_workers)
    if "n_workers" in inspect.signature(Scheduler.identity).parameters:
        await client.scheduler.identity(n_workers=-1)
    else:
        await client.scheduler.identity()

    # scatter through the scheduler (scatter RPC -> update_data RPC to the worker)
    [f_blob] = await client.scatter([blob], workers=[w0])
    # scatter directly (ncores_running, update_data RPC to the worker, update_data RPC to the scheduler)
    [f_arr] = await client.scatter([arr], workers=[w1], direct=True)

    # compute-task / task-finished
    f_inc = client.submit(inc, 1, workers=[w0], key="inc-1")
    # a dependency on w0 computed on w1: w1 get_data from w0, then add-keys
    f_len = client.submit(nbytes_of, f_blob, workers=[w1], key="nbytes-of-blob")
    # task-erred
    f_boom = client.submit(boom, 1, key=("boom", 0))
    # reschedule
    f_res = client.submit(resched, os.path.join(tmp, "reschedule-marker"), key="resched-1")
    await wait([f_inc, f_len, f_boom, f_res])
    assert await f_res == "rescheduled once"

    # gather through the scheduler (gather RPC -> get_data to the workers)
    await client.gather([f_inc, f_len, f_arr])
    # gather directly from the workers (who_has, then get_data from the client)
    await client.gather([f_blob, f_arr], direct=True)

    # replicate up (worker RPC gather) and down (worker RPC free_keys)
    await client.replicate([f_arr], n=2)
    await client.replicate([f_arr], n=1)
    # replicate up again, then the AMM (ReduceReplicas) drops the extra replica: remove-replicas
    await client.replicate([f_blob], n=2)
    await client.amm.run_once()
    await asyncio.sleep(0.5)

    # work stealing: eight 0.5 s tasks pinned (loosely) to w0, w1 idle
    slow_futs = [
        client.submit(slow, i, 0.5, workers=[w0], allow_other_workers=True, key=f"slow-{i}")
        for i in range(8)
    ]
    await wait(slow_futs)

    # pause and resume w1: worker-status-change both ways
    procs["w1"].signal(signal.SIGUSR1)
    await asyncio.sleep(0.6)
    procs["w1"].signal(signal.SIGUSR2)
    await asyncio.sleep(0.6)

    # what a client session does most: map and gather, a dask.array reduction (a graph
    # of many tasks), and client.run (the scheduler's broadcast -> run on each worker)
    mapped = client.map(inc, range(4), key=[f"map-inc-{i}" for i in range(4)])
    assert await client.gather(mapped) == [1, 2, 3, 4]
    total = await client.compute(da.arange(64, chunks=16, dtype="<i8").sum())
    assert total == sum(range(64)), total
    ran = await client.run(nbytes_of, b"run")
    assert sorted(ran) == sorted([w0, w1]) and set(ran.values()) == {3}, ran
    for f in mapped:
        f.release()

    # release futures: client-releases-keys -> free-keys -> release-worker-data
    for f in [f_inc, f_len, f_boom, f_res, *slow_futs]:
        f.release()
    await asyncio.sleep(1.0)

    # a plain rpc to a worker: identity, {op: close, reply: true} -> "OK", then the
    # goodbye {op: close, reply: false} of rpc.close_comms on a second comm
    r = rpc(w0)
    await r.identity()
    await r.close()          # the worker answers "OK" and drops the comm
    await asyncio.sleep(0.1)
    await r.close_rpc()      # nothing left to say goodbye on
    r = rpc(w0)
    await r.identity()
    await r.close_rpc()      # writes {op: close, reply: false}
    # an RPC whose handler raises: uncaught-error reply
    async with rpc(sched) as rs:
        try:
            await rs.identity(not_a_parameter=1)
        except TypeError:
            pass
        else:
            raise AssertionError("identity(not_a_parameter=1) did not fail")

    # make sure at least one keep-alive went out (2 s period)
    await asyncio.sleep(2.5)

    # retire w1: worker-status-change closing_gracefully, acquire-replicas to w0 for
    # f_only (only on w1), w0 get_data from w1, add-keys, then close / close-stream
    f_only = client.submit(inc, 41, workers=[w1], key="only-on-w1")
    await wait([f_only])
    await client.retire_workers([w1], close_workers=True)
    await procs["w1"].wait(30)
    # w0 has the data now
    assert await f_only == 42
    for f in (f_blob, f_arr, f_only):
        f.release()
    await asyncio.sleep(0.3)


async def converse(tmp: str) -> tuple[Recorder, dict]:
    rec = Recorder()
    proxies = {n: Proxy(n, rec) for n in ("scheduler", "w0", "w1")}
    addrs = {n: await p.open() for n, p in proxies.items()}
    logdir = os.path.join(tmp, "logs")
    os.makedirs(logdir)
    procs = {"scheduler": Proc("scheduler", ["scheduler"], logdir)}
    rec.pids[procs["scheduler"].p.pid] = "scheduler"
    try:
        proxies["scheduler"].set_target(await procs["scheduler"].line("ADDRESS "))
        for n in ("w0", "w1"):
            procs[n] = Proc(n, ["worker", "--scheduler", addrs["scheduler"], "--contact", addrs[n],
                               "--name", n, "--local-directory", os.path.join(tmp, "scratch")], logdir)
            rec.pids[procs[n].p.pid] = n
        for n in ("w0", "w1"):
            proxies[n].set_target(await procs[n].line("LISTENING "))

        with dask.config.set(CONFIG):
            client = await Client(addrs["scheduler"], asynchronous=True, direct_to_workers=False)
            try:
                await client.wait_for_workers(2)
                await workload(client, addrs["w0"], addrs["w1"], procs, addrs["scheduler"], tmp)
            finally:
                await client.close()
        procs["scheduler"].signal(signal.SIGTERM)
        for n in ("scheduler", "w0", "w1"):
            await procs[n].wait(30)
    except BaseException:
        for pr in procs.values():
            if pr.p.poll() is None:
                pr.p.kill()
        for n in procs:
            with open(os.path.join(logdir, f"{n}.log")) as fh:
                sys.stderr.write(f"--- {n} log ---\n{fh.read()[-4000:]}\n")
        raise
    await asyncio.sleep(0.2)
    for p in proxies.values():
        await p.shut()
    return rec, addrs


# ============================================================================
# Cutting the streams into messages
# ============================================================================


@dataclass
class Msg:
    raw: bytes
    frames: list
    top: object
    conn: Conn
    direction: str          # e.g. worker->scheduler
    sender: str             # w0 / scheduler / client ...
    receiver: str
    channel: str
    index: int              # position in its direction of its connection
    labels: list = field(default_factory=list)   # case ops this message is an example of
    ops: list = field(default_factory=list)      # ops inside (batched lists)
    request: str | None = None                   # for replies / acks: the request op
    failed: bool = False                         # a request whose reply is an error


def split_stream(buf: bytes) -> tuple[list[bytes], int]:
    """Cut a recorded direction into whole messages; returns (messages, trailing bytes)."""
    out, pos = [], 0
    while pos + 16 <= len(buf):
        _first, count = struct.unpack_from("<QQ", buf, pos)
        if pos + 16 + 8 * count > len(buf):
            break
        lengths = struct.unpack_from(f"<{count}Q", buf, pos + 16)
        end = pos + 16 + 8 * count + sum(lengths)
        if end > len(buf):
            break
        out.append(bytes(buf[pos:end]))
        pos = end
    return out, len(buf) - pos


def kind_of(role: str) -> str:
    return "worker" if role.startswith("w") else role


def as_dict(v) -> dict | None:
    if isinstance(v, MsgMap) and all(type(k) is str for k, _ in v):
        return dict(v)
    return None


def op_of(v) -> str | None:
    d = as_dict(v)
    return d.get("op") if d else None


def parse(rec: Recorder) -> tuple[list[Msg], list[str]]:
    msgs: list[Msg] = []
    notes: list[str] = []
    for conn in rec.conns:
        a, b = conn.sender, conn.server
        dirs = {}
        for name, buf, s, r in (("up", conn.up, a, b), ("down", conn.down, b, a)):
            raws, rest = split_stream(bytes(buf))
            if rest:
                notes.append(f"connection {conn.cid} {s}->{r}: {rest} trailing bytes (cut message)")
            dirs[name] = []
            for i, raw in enumerate(raws):
                _info, frames = gc.split_wire(raw)
                top = gc.mp_decode(frames[0])
                dirs[name].append(Msg(raw, frames, top, conn, f"{kind_of(s)}->{kind_of(r)}", s, r, "", i))
        up, down = dirs["up"], dirs["down"]
        if not up or not down:
            msgs.extend(up + down)
            continue
        for m in (up[0], down[0]):
            m.channel = "handshake"
            m.labels.append("handshake")
        first = op_of(up[1].top) if len(up) > 1 else None
        if first == "register-worker":
            channel = "worker-scheduler stream"
        elif first == "register-client":
            channel = "client-scheduler stream"
        elif first == "connection_stream":
            channel = "worker-worker stream"
        else:
            channel = f"{kind_of(conn.server)} RPC"
        for m in up[1:] + down[1:]:
            m.channel = channel
        if channel.endswith("stream"):
            up[1].labels.append(first)
            up[1].ops = [first]
            rest_down = down[1:]
            if first == "register-worker" and rest_down:
                rest_down[0].labels.append("register-worker-reply")
                rest_down[0].request = "register-worker"
                rest_down = rest_down[1:]
            for m in up[2:] + rest_down:
                items = m.top if isinstance(m.top, list) else [m.top]
                m.ops = [op_of(x) or repr(x) for x in items]
                for o in dict.fromkeys(m.ops):
                    m.labels.append(o)
        else:
            j = 1
            last = None
            for m in up[1:]:
                if m.top == "OK":
                    m.labels.append(f"{last}-ok")
                    m.request = last
                    continue
                d = as_dict(m.top) or {}
                op = d.get("op", "?")
                last = op
                m.ops = [op]
                m.labels.append(op)
                wants_reply = d.get("reply", True)
                if wants_reply and j < len(down):
                    rep = down[j]
                    j += 1
                    rd = as_dict(rep.top) or {}
                    status = rd.get("status")
                    if status in ("uncaught-error", "error") and "exception" in rd:
                        rep.labels.append(f"{status}-reply")
                        m.failed = True
                    else:
                        rep.labels.append(f"{op}-reply")
                    rep.request = op
                    rep.ops = []
                if op == "close":
                    break
        msgs.extend(up + down)
    return msgs, notes


# ============================================================================
# Structure (what --check compares)
# ============================================================================


def kind(v) -> str:
    if v is None:
        return "nil"
    t = type(v)
    if t in (bool, int, float, str):
        return t.__name__
    if t is bytes:
        return "bin"
    if t is list:
        return "array"
    ph = gc._placeholder(v)
    if ph is not None:
        return f"${ph[0]}"
    return "map"


def structure(top, op: str | None):
    """Keys and value kinds of the op's dict (of every element with that op, for a batched list)."""
    def one(v):
        d = as_dict(v)
        if d is None or gc._placeholder(v) is not None:
            return kind(v)
        return {k: kind(x) for k, x in sorted(d.items())}

    if isinstance(top, list) and op and any(op_of(x) == op for x in top):
        shapes = {json.dumps(one(x), sort_keys=True) for x in top if op_of(x) == op}
        return ["batch", [json.loads(s) for s in sorted(shapes)]]
    return one(top)


def struct_key(s) -> str:
    return json.dumps(s, sort_keys=True)


# ============================================================================
# Selecting and writing the cases
# ============================================================================


# directions tried first for some ops (otherwise: CHANNEL_ORDER, then direction)
PREFER = {
    "get_data": ["worker->worker", "client->worker"],
    "get_data-reply": ["worker->worker", "worker->client"],
    "get_data-ok": ["worker->worker", "client->worker"],
    "close-stream": ["worker->scheduler", "client->scheduler"],
}


def deep_sig(v, depth: int = 4) -> str:
    """A deeper shape than structure(), only used to pick varied examples."""
    k = kind(v)
    if depth == 0 or k not in ("map", "array"):
        return k
    if k == "array":
        return "[" + "|".join(sorted({deep_sig(x, depth - 1) for x in v})) + "]"
    d = as_dict(v)
    if d is not None and depth >= 3:
        return "{" + ",".join(f"{key}:{deep_sig(x, depth - 1)}" for key, x in sorted(d.items())) + "}"
    return "{" + "|".join(sorted({f"{kind(a)}:{deep_sig(b, depth - 1)}" for a, b in v})) + "}"


def pick(cands: list[Msg], op: str, n: int, every: list[Msg]) -> list[Msg]:
    """Up to n examples: one per (channel, direction) first, in a fixed order; inside a
    group a request that did not fail, then the message with the fewest ops, then the
    richest shape, then the smallest;
    further examples from a group prefer a shape not chosen yet."""
    def rank(m: Msg):
        return (m.failed, len(m.ops), -len(deep_sig(op_dict(m.top, op))), len(m.raw), m.conn.cid, m.index)

    if op == "handshake":  # both directions of the w0 -> scheduler worker connection
        conns = {x.conn.cid for x in every if "register-worker" in x.labels and x.sender == "w0"}
        hs = [m for m in cands if m.conn.cid in conns]
        hs.sort(key=lambda m: (m.conn.cid, m.direction != "worker->scheduler"))
        return hs[:2]
    groups: dict[tuple, list[Msg]] = {}
    for m in cands:
        groups.setdefault((m.channel, m.direction), []).append(m)
    prefer = PREFER.get(op, [])

    def gkey(g):
        return (prefer.index(g[1]) if g[1] in prefer else len(prefer),
                CHANNEL_ORDER.index(g[0]) if g[0] in CHANNEL_ORDER else 99, g[1])

    order = sorted(groups, key=gkey)
    for g in order:
        groups[g].sort(key=rank)
    chosen = [groups[g][0] for g in order][:n]
    rest = [m for g in order for m in groups[g] if m not in chosen]
    while len(chosen) < n and rest:
        shapes = {deep_sig(op_dict(c.top, op)) for c in chosen}
        fresh = [m for m in rest if not m.failed and deep_sig(op_dict(m.top, op)) not in shapes]
        m = (fresh or rest)[0]
        chosen.append(m)
        rest.remove(m)
    return chosen


def op_dict(top, op: str):
    """The op's own dict inside a batched list, else the message."""
    if isinstance(top, list):
        for x in top:
            if op_of(x) == op:
                return x
    return top


def write_case(out: str, name: str, op: str, m: Msg, desc: str) -> dict:
    folder = os.path.join(out, name)
    os.makedirs(folder)
    for i, fr in enumerate(m.frames):
        gc.put(os.path.join(folder, f"frame_{i:03d}.bin"), fr)
    gc.put(os.path.join(folder, "wire.bin"), m.raw)
    info, frames = gc.split_wire(m.raw)
    loads([memoryview(bytearray(f)) for f in frames], deserialize=False)  # Python reads it back
    meta = {
        "name": name,
        "op": op,
        "ops": m.ops,
        "description": desc,
        "deterministic": False,
        "channel": m.channel,
        "direction": m.direction,
        "sender": m.sender,
        "receiver": m.receiver,
        "batched": isinstance(m.top, list) and m.channel.endswith("stream"),
    }
    if m.request:
        meta["request_op"] = m.request
    meta.update({
        "n_frames": len(frames),
        "frame_nbytes": [len(f) for f in frames],
        "wire": info,
        **gc.describe_frames(frames),
        "structure": structure(m.top, op),
    })
    gc.dump_json(os.path.join(folder, "case.json"), meta)
    return {"name": name, "op": op, "ops": m.ops, "channel": m.channel, "direction": m.direction,
            "n_frames": len(frames), "wire_nbytes": len(m.raw)}


@dataclass
class Result:
    cases: list
    missing: dict
    pool: dict            # (op, direction) -> set of structure keys seen in this run
    inventory: dict
    notes: list


async def record() -> tuple[list[Msg], list[str]]:
    """Runs the conversation; its messages, labelled, and notes on the recording."""
    with tempfile.TemporaryDirectory(prefix="framewire-conv-") as tmp:
        rec, _addrs = await converse(tmp)
    msgs, notes = parse(rec)
    for c in rec.conns:
        if c.sender not in rec.pids.values():
            notes.append(f"connection {c.cid} to {c.server}: opener not identified ({c.sender})")
    return msgs, notes


def versions() -> dict:
    return {
        "python": ".".join(map(str, sys.version_info[:3])),
        "distributed": distributed.__version__,
        "dask": dask.__version__,
        "msgpack": ".".join(map(str, msgpack.version)),
        "numpy": np.__version__,
        "lz4": lz4.__version__,
        "cloudpickle": cloudpickle.__version__,
        "zstandard": zstandard.__version__,
        "tornado": tornado.version,
        "psutil": psutil.__version__,
    }


def inventory_of(msgs: list[Msg]) -> dict:
    """Every label seen, counted per channel and direction."""
    inventory: dict = {}
    for m in msgs:
        key = f"{m.channel} {m.direction}"
        for lab in m.labels:
            inventory.setdefault(key, {}).setdefault(lab, 0)
            inventory[key][lab] += 1
    return {k: dict(sorted(v.items())) for k, v in sorted(inventory.items())}


async def generate(out: str) -> Result:
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    msgs, notes = await record()

    by_label: dict[str, list[Msg]] = {}
    for m in msgs:
        for lab in m.labels:
            by_label.setdefault(lab, []).append(m)

    pool: dict = {}
    for lab, ms in by_label.items():
        for m in ms:
            pool.setdefault((lab, m.direction), set()).add(struct_key(structure(m.top, lab)))

    inventory = inventory_of(msgs)

    cases, missing = [], {}
    for op, (n, desc) in REQUIRED.items():
        found = pick(by_label.get(op, []), op, n, msgs)
        if len(found) < n:
            missing[op] = f"wanted {n} example(s), the conversation produced {len(found)}"
        for i, m in enumerate(found, 1):
            cases.append(write_case(out, f"{op}_{i}", op, m, desc))

    gc.dump_json(os.path.join(out, "index.json"), {
        "generator": "tests/dask/gen_conversation.py",
        "deterministic": False,
        "versions": versions(),
        "byteorder": sys.byteorder,
        "config": CONFIG,
        "cases": cases,
        "missing": missing,
        "inventory": inventory,
    })
    return Result(cases, missing, pool, inventory, notes)


# ============================================================================
# --session
# ============================================================================


async def write_session(out: str) -> tuple[list[Msg], list[str]]:
    """Every message of one conversation: session.bin and session.json in out."""
    msgs, notes = await record()
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    entries, blob = [], bytearray()
    for m in msgs:
        _info, frames = gc.split_wire(m.raw)
        loads([memoryview(bytearray(f)) for f in frames], deserialize=False)  # Python reads it back
        entry = {"offset": len(blob), "nbytes": len(m.raw), "conn": m.conn.cid, "index": m.index,
                 "channel": m.channel, "direction": m.direction, "sender": m.sender,
                 "receiver": m.receiver, "ops": m.ops, "labels": m.labels}
        if m.request:
            entry["request_op"] = m.request
        if m.failed:
            entry["failed"] = True
        entries.append(entry)
        blob += m.raw
    gc.put(os.path.join(out, "session.bin"), blob)
    head = {
        "generator": "tests/dask/gen_conversation.py --session",
        "deterministic": False,
        "versions": versions(),
        "byteorder": sys.byteorder,
        "config": CONFIG,
        "notes": notes,
        "inventory": inventory_of(msgs),
    }
    # one line per message: the file stays readable and small
    text = json.dumps(head, indent=1, ensure_ascii=False)[:-2]
    text += ',\n "messages": [\n' + ",\n".join(
        "  " + json.dumps(e, ensure_ascii=False) for e in entries) + "\n ]\n}\n"
    json.loads(text)
    with open(os.path.join(out, "session.json"), "w", encoding="utf-8") as fh:
        fh.write(text)
    return msgs, notes


# ============================================================================
# --check
# ============================================================================


def check(stored: str, fresh: Result) -> list[str]:
    problems = []
    names_stored = sorted(d for d in os.listdir(stored) if os.path.isdir(os.path.join(stored, d)))
    names_fresh = sorted(c["name"] for c in fresh.cases)
    for n in sorted(set(names_stored) ^ set(names_fresh)):
        problems.append(f"{n}: only in {'fresh output' if n in names_fresh else 'stored captures'}")
    for n in sorted(set(names_stored) & set(names_fresh)):
        with open(os.path.join(stored, n, "case.json"), encoding="utf-8") as fh:
            meta = json.load(fh)
        with open(os.path.join(stored, n, "frame_000.bin"), "rb") as fh:
            top = gc.mp_decode(fh.read())
        s = struct_key(structure(top, meta["op"]))
        if s != struct_key(meta["structure"]):
            problems.append(f"{n}: case.json 'structure' does not match frame_000.bin")
        seen = fresh.pool.get((meta["op"], meta["direction"]), set())
        if s not in seen:
            problems.append(f"{n}: structure {s} not produced by the fresh run "
                            f"({len(seen)} shape(s) seen for {meta['op']} {meta['direction']})")
    return problems


def report(res: Result) -> None:
    for n in res.notes:
        print(f"note: {n}")
    ops = {}
    for c in res.cases:
        ops[c["op"]] = ops.get(c["op"], 0) + 1
    print("captured: " + ", ".join(f"{op} x{k}" for op, k in ops.items()))
    if res.missing:
        print("NOT produced as wanted:")
        for op, why in res.missing.items():
            print(f"  {op}: {why}")
    else:
        print("every required op was produced")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--out", metavar="DIR", help="write the captures into DIR (deleted and recreated)")
    mode.add_argument("--check", metavar="DIR", help="regenerate and compare case names and structures")
    mode.add_argument("--session", metavar="DIR", help="write every message of the session into DIR")
    args = ap.parse_args()
    logging.getLogger("distributed").setLevel(logging.CRITICAL + 10)

    if args.session:
        msgs, notes = asyncio.run(write_session(args.session))
        for n in notes:
            print(f"note: {n}")
        labels = {lab for m in msgs for lab in m.labels}
        missing = [op for op in REQUIRED if op not in labels]
        print(f"wrote {len(msgs)} messages of distributed {distributed.__version__} to {args.session}")
        if missing:
            print(f"not in this release's session: {', '.join(missing)}")
        return 1 if missing else 0
    if distributed.__version__ != REQUIRED_DISTRIBUTED:
        print(f"error: --out/--check are for distributed {REQUIRED_DISTRIBUTED} "
              f"(tests/captures/conversation); this is {distributed.__version__}", file=sys.stderr)
        return 2

    if args.out:
        res = asyncio.run(generate(args.out))
        report(res)
        print(f"wrote {len(res.cases)} cases to {args.out}")
        return 1 if res.missing else 0

    if not os.path.isdir(args.check):
        print(f"error: {args.check} is not a directory", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="framewire-conv-check-") as tmp:
        res = asyncio.run(generate(os.path.join(tmp, "conversation")))
    report(res)
    problems = check(args.check, res)
    if problems:
        print(f"FAIL: {len(problems)} difference(s):")
        for p in problems:
            print(f"  {p}")
        return 1
    print(f"ok: {args.check} has the same {len(res.cases)} cases and structures as a fresh run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
