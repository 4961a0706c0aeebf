"""The Python side of tests/client.rs: an unmodified Dask 2026.8.0 Client
working with keys the Rust client (framewire::dask::Client) holds.

    python client_peer.py SCHEDULER MODE ARGS...

MODE `sum KEY`: the Rust client scattered a 1000x1000 float64 array under
KEY; compute its sum here, through `Future(KEY, client=c, state="memory")`.
First checks that `Future(KEY, client=c)` alone stays pending (2026.8.0
never asks the scheduler about it), in a client of its own.

MODE `compute DONE_FILE`: compute under known keys a numpy array, an int,
a dict of str -> float and a list of numpy arrays, and a key whose task
raises (each task sleeps, so the
Rust client waits for them), print the expected values once the scheduler
knows the keys, hold the futures until DONE_FILE exists, then check that
the Rust client wanted the keys (it waited on them).

MODE `client CLIENT_ID KEY`: what the scheduler knows of that client and
key (registered, last heartbeat, the key's state and who wants it).

MODE `heartbeats CLIENT_ID SECONDS`: the client's heartbeats as the
scheduler records them (`ClientState.last_seen`, looked at every 50 ms for
SECONDS): each distinct time, and whether the client stayed registered.

Each check prints one JSON line `{"check": name, ...facts}`; the Rust test
asserts on them, and this script raises (exit status 1) when a check it
makes itself fails.
"""

import json
import os
import sys
import time

import numpy as np
from distributed import Client, Future


def emit(check, **facts):
    print(json.dumps({"check": check, **facts}), flush=True)


def sum_mode(addr, key, bytes_key=None):
    with Client(addr, timeout=30) as other:
        plain = Future(key, client=other)
        try:
            plain.result(timeout=3)
            plain_pending = False
        except TimeoutError:
            plain_pending = True
        emit("plain-future", pending=plain_pending, status=plain.status)
    with Client(addr, timeout=30) as c:
        f = Future(key, client=c, state="memory")
        who_has = c.who_has([f])
        x = f.result(timeout=30)
        assert isinstance(x, np.ndarray), type(x)
        total = c.submit(lambda a: float(a.sum()), f, key="sum-of-" + key).result(
            timeout=60
        )
        emit(
            "sum",
            status=f.status,
            dtype=str(x.dtype),
            shape=list(x.shape),
            corner=[float(x[0, 0]), float(x[0, 1]), float(x[999, 999])],
            sum=total,
            local_sum=float(x.sum()),
            who_has=sorted(who_has.get(key, [])),
        )
        if bytes_key is not None:
            y = Future(bytes_key, client=c, state="memory").result(timeout=30)
            emit("bytes", type=type(y).__name__, value=y.decode())


def slow(value):
    time.sleep(1.5)
    return value


def make_array():
    time.sleep(1.5)
    return np.arange(12, dtype="float64").reshape(3, 4) * 1.5


def fail():
    time.sleep(0.5)
    raise ValueError("py-bad fails")


def make_list():
    time.sleep(1.5)
    return [np.arange(5, dtype="int64"), np.linspace(0.0, 1.0, 3)]


def compute_mode(addr, done_file):
    with Client(addr, timeout=30) as c:
        futures = {
            "py-array": c.submit(make_array, key="py-array", pure=False),
            "py-int": c.submit(slow, 1234567, key="py-int", pure=False),
            "py-dict": c.submit(slow, {"a": 1.5, "b": -2.25, "c": 1e300}, key="py-dict", pure=False),
            "py-list": c.submit(make_list, key="py-list", pure=False),
        }
        keys = list(futures)
        bad = c.submit(fail, key="py-bad", pure=False)
        # The Rust client can ask for a key once the scheduler knows it.
        deadline = time.time() + 30
        while not c.run_on_scheduler(
            lambda dask_scheduler, keys=keys: all(
                k in dask_scheduler.tasks for k in keys + ["py-bad"]
            )
        ):
            assert time.time() < deadline, "the scheduler never learned the keys"
            time.sleep(0.05)
        emit(
            "submitted",
            states=c.run_on_scheduler(
                lambda dask_scheduler, keys=keys: [dask_scheduler.tasks[k].state for k in keys]
            ),
            array={"shape": [3, 4], "values": (np.arange(12) * 1.5).tolist()},
            int=1234567,
            dict={"a": 1.5, "b": -2.25, "c": 1e300},
            list=[list(range(5)), [0.0, 0.5, 1.0]],
        )
        deadline = time.time() + 120
        while not os.path.exists(done_file):
            assert time.time() < deadline, "the Rust side never finished"
            time.sleep(0.05)
        wanted = c.run_on_scheduler(
            lambda dask_scheduler, keys=keys: {
                k: sorted(cs.client_key for cs in (dask_scheduler.tasks[k].who_wants or ()))
                for k in keys
            }
        )
        results = c.gather(list(futures.values()))
        emit(
            "held",
            wanted=wanted,
            results_ok=len(results) == 4,
            bad=bad.status,
            me=c.id,
        )


def client_mode(addr, client_id, key):
    with Client(addr, timeout=30) as c:

        def look(dask_scheduler, client_id=client_id, key=key):
            cs = dask_scheduler.clients.get(client_id)
            ts = dask_scheduler.tasks.get(key)
            return {
                "registered": cs is not None,
                "last_seen_age": (time.time() - cs.last_seen) if cs is not None else None,
                "last_seen": cs.last_seen if cs is not None else None,
                "wants": sorted(str(t.key) for t in cs.wants_what) if cs is not None else [],
                "key_state": ts.state if ts is not None else None,
                "who_wants": sorted(x.client_key for x in (ts.who_wants or ()))
                if ts is not None
                else [],
                "who_has": sorted(ws.address for ws in (ts.who_has or ()))
                if ts is not None
                else [],
            }

        emit("client", **c.run_on_scheduler(look))


def heartbeats_mode(addr, client_id, seconds):
    with Client(addr, timeout=30) as c:

        def last_seen(dask_scheduler, client_id=client_id):
            cs = dask_scheduler.clients.get(client_id)
            return cs.last_seen if cs is not None else None

        beats = []
        registered = True
        end = time.monotonic() + float(seconds)
        while time.monotonic() < end:
            seen = c.run_on_scheduler(last_seen)
            if seen is None:
                registered = False
            elif not beats or seen != beats[-1]:
                beats.append(seen)
            time.sleep(0.05)
        emit("heartbeats", beats=beats, registered=registered)


if __name__ == "__main__":
    addr, mode, *args = sys.argv[1:]
    {
        "sum": sum_mode,
        "compute": compute_mode,
        "client": client_mode,
        "heartbeats": heartbeats_mode,
    }[mode](addr, *args)
