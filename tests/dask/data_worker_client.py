"""The Python side of tests/data_worker.rs: a real Dask Client checks the Rust
data worker (examples/data_worker.rs) in a cluster of an unmodified
`dask scheduler`, one Python `dask worker` and the Rust worker.

    python data_worker_client.py SCHEDULER RUST_WORKER MODE [CA CERT KEY]

MODE `cluster` runs every check of a working cluster; `retire` scatters keys
to the Rust worker and retires it; `tls` (with the cluster's CA, a
certificate and its key: the Client's `Security`) scatters to the Rust worker
of a tls:// cluster, gathers through the scheduler and directly, and has a
task on the Python worker read its data. Each check prints one JSON line
`{"check": name, ...facts}`, which the Rust test reads and asserts on; a
check that fails here raises (exit status 1, the traceback on stderr).
Values are compared with what this process scattered or computed itself.
"""

import asyncio
import decimal
import fractions
import hashlib
import json
import os
import socket
import sys
import time

import numpy as np
from distributed import Client
from distributed.worker import get_data_from_worker


def emit(check, **facts):
    print(json.dumps({"check": check, **facts}), flush=True)


def same(a, b):
    """Whether b is a faithful copy of a (type, dtype, shape, layout, values)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.flags.f_contiguous and not a.flags.c_contiguous and not b.flags.f_contiguous:
            return False
        if a.dtype.kind == "O":
            return all(same(x, y) for x, y in zip(a.ravel(), b.ravel()))
        return a.tobytes() == b.tobytes()
    return a == b


def digest(x):
    """sha256 of an array's dtype, shape and bytes (run on the Python worker)."""
    h = hashlib.sha256(str((x.dtype.str, x.shape)).encode())
    h.update(np.ascontiguousarray(x).tobytes())
    return h.hexdigest()


def wait_until(what, predicate, timeout=30.0):
    deadline = time.time() + timeout
    while not predicate():
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def objects():
    """Values of many kinds: bytes, numpy arrays of many dtypes and layouts,
    and other Python objects (pickled blocks to the Rust worker)."""
    rng = np.random.default_rng(15)
    m = rng.random((6, 5))
    out = [
        b"plain bytes \x00\xff",
        bytes(range(256)) * 300,
        np.arange(10, dtype="i1"),
        np.arange(10, dtype=">u2"),
        np.arange(-5, 5, dtype="i4"),
        np.arange(7, dtype="<i8"),
        rng.random(9).astype("f2"),
        rng.random(9).astype("f4"),
        m,
        np.asfortranarray(m),
        m[::2, 1::2],
        m.T,
        rng.random((2, 3, 4)).transpose(2, 0, 1),
        (rng.random(4) + 1j * rng.random(4)).astype("c16"),
        np.array([True, False, True]),
        np.array(["2026-01-01", "2026-08-15"], dtype="datetime64[ns]"),
        np.array([1, 2, 3], dtype="timedelta64[s]"),
        np.array(["ab", "cde"], dtype="U4"),
        np.array([b"ab", b"cde"], dtype="S3"),
        np.array([(1, 2.5), (3, 4.5)], dtype=[("a", "i4"), ("b", "f8")]),
        np.array(3.5),
        np.zeros((0, 3)),
        np.array([1, "two", None], dtype=object),
        {"a": 1, "b": [1, 2, (3, 4)], "c": {"nested": None}},
        {1, 2, 3},
        fractions.Fraction(3, 7),
        decimal.Decimal("1.25"),
        "a str",
        12345678901234567890,
        (1, "x", 2.5),
    ]
    return out


def check_cluster(client, rust):
    started = time.time()
    info = client.scheduler_info()["workers"]
    ws = info[rust]
    python_workers = [a for a in info if a != rust]
    assert len(python_workers) == 1, info.keys()
    py = python_workers[0]
    emit(
        "registered",
        name=ws["name"],
        nthreads=ws["nthreads"],
        memory_limit=ws["memory_limit"],
        status=ws["status"],
        python_worker=py,
    )

    # 3 + 4: scatter lands on the Rust worker, gather (via the scheduler and
    # straight from the worker) returns the original objects.
    values = objects()
    futures = client.scatter(values, workers=[rust], hash=False)
    who_has = client.who_has(futures)
    holders = sorted({h for f in futures for h in who_has[f.key]})
    back = client.gather(futures)
    direct = client.gather(futures, direct=True)
    emit(
        "scatter",
        n=len(values),
        holders=holders,
        gathered_equal=sum(same(a, b) for a, b in zip(values, back)),
        direct_equal=sum(same(a, b) for a, b in zip(values, direct)),
    )

    # 4 + 6: tasks whose only dependency lives on the Rust worker, and tasks
    # without dependencies, all complete on the Python worker.
    arrays = [v for v in values if isinstance(v, np.ndarray) and v.dtype.kind != "O"]
    array_futures = [f for v, f in zip(values, futures) if isinstance(v, np.ndarray) and v.dtype.kind != "O"]
    digests = client.map(digest, array_futures, pure=False)
    incs = client.map(lambda i: i + 1, range(40), pure=False)
    pair = client.submit(lambda a, b: a + b, futures[0], futures[1], pure=False)
    got_digests = client.gather(digests)
    got_incs = client.gather(incs)
    results = digests + incs + [pair]
    result_holders = client.who_has(results)

    def bounced(key):
        story = client.run_on_scheduler(
            lambda dask_scheduler, key=key: [(s[1], s[2]) for s in dask_scheduler.story(key)]
        )
        return ["processing", "released"] in [list(s) for s in story]

    emit(
        "compute",
        n=len(results),
        correct=sum(g == digest(a) for g, a in zip(got_digests, arrays))
        + sum(g == i + 1 for i, g in enumerate(got_incs))
        + int(pair.result() == values[0] + values[1]),
        holders=sorted({h for k in result_holders.values() for h in k}),
        bounced=sum(bounced(f.key) for f in digests),
        with_rust_dependency=len(digests),
    )
    del digests, incs, pair, results

    # 4: an array above the shard size, both ways, and its bytes counted.
    big_mib = int(os.environ.get("FRAMEWIRE_DATA_WORKER_BIG_MIB", "80"))
    big = np.random.default_rng(1).random(big_mib * (1 << 20) // 8)

    def counters():
        return client.scheduler_info()["workers"][rust]["metrics"]["framewire"]

    before = counters()
    fbig = client.scatter(big, workers=[rust])
    big_back = client.gather(fbig)
    big_digest = client.submit(digest, fbig, pure=False).result()
    size = big.nbytes
    wait_until("the worker's counters", lambda: counters()["bytes_sent"] - before["bytes_sent"] >= 2 * size)
    after = counters()
    emit(
        "big",
        size=size,
        shard=int(dask_config("distributed.comm.shard")),
        holders=list(client.who_has(fbig)[fbig.key]),
        gathered_equal=bool(same(big, big_back)),
        digest_equal=big_digest == digest(big),
        bytes_sent=after["bytes_sent"] - before["bytes_sent"],
        bytes_copied_on_send=after["bytes_copied_on_send"] - before["bytes_copied_on_send"],
    )
    del big_back, fbig

    def held_by_rust(key):
        reply = client.sync(get_data_from_worker, client.rpc, [key], rust)
        return reply["data"].get(key, None) if reply["status"] == "OK" else None

    def holders_of(f):
        return set(client.who_has([f])[f.key])

    # 5: the worker RPC `gather` (client.replicate), then `free_keys` (the
    # scheduler's delete_worker_data).
    made = client.submit(lambda: np.arange(1000) * 3, workers=[py], pure=False)
    made.result()
    client.replicate([made], n=2)
    replicated = holders_of(made)
    value_there = held_by_rust(made.key)
    sid = f"test-free-{time.time()}"

    async def delete(dask_scheduler, rust=rust, key=made.key, sid=sid):
        await dask_scheduler.delete_worker_data(rust, [key], stimulus_id=sid)

    client.run_on_scheduler(delete)
    wait_until("free_keys", lambda: rust not in holders_of(made))
    emit(
        "replicate",
        holders_after_replicate=sorted(replicated),
        equal_on_rust=bool(same(np.arange(1000) * 3, value_there)),
        held_after_free_keys=held_by_rust(made.key) is not None,
        holders_after_free_keys=sorted(holders_of(made)),
    )

    # 5: `acquire-replicas` (the Active Memory Manager's request), then
    # `remove-replicas`.
    made2 = client.submit(lambda: {"x": list(range(100))}, workers=[py], pure=False)
    made2.result()
    client.run_on_scheduler(
        lambda dask_scheduler, k=made2.key: dask_scheduler.request_acquire_replicas(
            rust, [k], stimulus_id=f"test-acquire-{time.time()}"
        )
    )
    wait_until("add-keys", lambda: rust in holders_of(made2))
    acquired_equal = held_by_rust(made2.key) == {"x": list(range(100))}
    client.run_on_scheduler(
        lambda dask_scheduler, k=made2.key: dask_scheduler.request_remove_replicas(
            rust, [k], stimulus_id=f"test-remove-{time.time()}"
        )
    )
    wait_until("remove-replicas", lambda: rust not in holders_of(made2))
    wait_until("the replica dropped", lambda: held_by_rust(made2.key) is None)
    emit("acquire_remove", acquired_equal=acquired_equal, holders_after_remove=sorted(holders_of(made2)))

    # 5: `free-keys` on the stream when the client lets go of a key.
    only = client.scatter(np.arange(77), workers=[rust])
    key = only.key
    assert held_by_rust(key) is not None
    del only
    wait_until("free-keys", lambda: held_by_rust(key) is None)
    emit("free_keys_stream", dropped=True)

    # 7: malformed and unexpected messages, on RPC connections and on the
    # scheduler's stream; the worker goes on.
    host, port = rust.removeprefix("tcp://").rsplit(":", 1)
    with socket.create_connection((host, int(port))) as s:
        s.sendall(b"\xff" * 64 + b"garbage that is no Dask message")
        s.settimeout(10)
        try:
            closed_garbage = s.recv(1 << 16) is not None
        except OSError:
            closed_garbage = True
    errors = {}
    for name, call in {
        "unknown_op": lambda: client.rpc(rust).frobnicate(),
        "bad_fields": lambda: client.rpc(rust).get_data(keys=5),
    }.items():
        try:
            client.sync(call)
            errors[name] = None
        except Exception as e:  # the worker's error reply, raised
            errors[name] = repr(e)

    def poke(dask_scheduler, rust=rust):
        comm = dask_scheduler.stream_comms[rust]
        comm.send({"op": "compute-task", "key": "no-such-task"})
        comm.send({"op": "no-such-op", "x": 1})

    client.run_on_scheduler(poke)
    survivor = client.scatter(b"still here", workers=[rust])
    emit(
        "malformed",
        garbage_connection_closed=closed_garbage,
        errors=errors,
        still_serves=client.gather(survivor) == b"still here",
        still_registered=rust in client.scheduler_info()["workers"],
    )

    # 2: heartbeats under a short worker TTL.
    hold = float(os.environ.get("FRAMEWIRE_DATA_WORKER_HOLD_S", "10"))
    time.sleep(max(0.0, hold - (time.time() - started)))
    ttl = client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.worker_ttl)
    ws = client.scheduler_info()["workers"].get(rust)
    emit(
        "ttl",
        worker_ttl=ttl,
        held_for=time.time() - started,
        still_registered=ws is not None,
        last_seen_age=time.time() - ws["last_seen"] if ws else None,
    )


def dask_config(key):
    import dask
    from dask.utils import parse_bytes

    return parse_bytes(dask.config.get(key))


def check_retire(client, rust):
    info = client.scheduler_info()["workers"]
    py = [a for a in info if a != rust][0]
    values = [np.arange(n, dtype="f8") * n for n in (10, 1000, 200_000)] + [b"bytes" * 1000, {"k": "v"}]
    futures = client.scatter(values, workers=[rust], hash=False)
    before = client.who_has(futures)
    retired = client.retire_workers([rust])
    after = client.who_has(futures)
    back = client.gather(futures)
    emit(
        "retire",
        holders_before=sorted({h for k in before.values() for h in k}),
        retired=sorted(retired),
        holders_after=sorted({h for k in after.values() for h in k}),
        python_worker=py,
        equal=sum(same(a, b) for a, b in zip(values, back)),
        n=len(values),
        still_registered=rust in client.scheduler_info()["workers"],
    )


def check_tls(client, rust):
    info = client.scheduler_info()["workers"]
    py = [a for a in info if a != rust][0]
    values = objects()
    futures = client.scatter(values, workers=[rust], hash=False)
    holders = sorted({h for k in client.who_has(futures).values() for h in k})
    via_scheduler = client.gather(futures)
    direct = client.gather(futures, direct=True)
    big = np.arange(3_000_000, dtype="f8")  # 24 MB: a large frame over TLS
    [big_future] = client.scatter([big], workers=[rust], hash=False)
    # Asked before the fetch: once the Python worker has a copy, the
    # scheduler's active memory manager may drop either replica (it runs
    # every 2 s), so who holds it afterwards is a race.
    rust_holds_big = list(client.who_has([big_future])[big_future.key]) == [rust]
    # Runs on the Python worker (the Rust one never computes), which fetches
    # the array from the Rust worker (its only holder) over tls://.
    remote = client.submit(digest, big_future, pure=False).result()
    emit(
        "tls",
        rust=rust,
        python_worker=py,
        holders=holders,
        equal_via_scheduler=sum(same(a, b) for a, b in zip(values, via_scheduler)),
        equal_direct=sum(same(a, b) for a, b in zip(values, direct)),
        n=len(values),
        digest_matches=remote == digest(big),
        rust_holds_big=rust_holds_big,
    )


def main():
    scheduler, rust, mode = sys.argv[1:4]
    security = None
    if len(sys.argv) == 7:
        from distributed.security import Security

        ca, cert, key = sys.argv[4:7]
        security = Security(tls_ca_file=ca, tls_client_cert=cert, tls_client_key=key,
                            require_encryption=True)
    with Client(scheduler, timeout=60, security=security) as client:
        {"cluster": check_cluster, "retire": check_retire, "tls": check_tls}[mode](client, rust)


if __name__ == "__main__":
    main()
