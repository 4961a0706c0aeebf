"""The Python side of tests/primitives.rs: an unmodified Dask Client using
the coordination primitives (datasets, Variable, Event, Lock) the Rust
client (framewire::dask::Client) uses in the same cluster.

    python primitives_peer.py SCHEDULER MODE ARGS...

MODE `dataset-get NAME`: `get_dataset(NAME).result()`, and the dataset names.
MODE `dataset-put NAME VALUE`: scatter the int VALUE and publish its future
    under NAME (the dataset keeps it after this client closes).
MODE `dataset-put-plain NAME`: publish {"from": "python", "n": [1, 2]} (no
    future) under NAME.
MODE `dataset-get-plain NAME`: `get_dataset(NAME)`, a plain object.
MODE `variable-get NAME`: `Variable(NAME).get(timeout=10)`, its result when
    a future.
MODE `variable-set NAME VALUE`: set Variable(NAME) to a future of the int
    VALUE (scattered here; the variable keeps it after this client closes).
MODE `variable-set-plain NAME`: set Variable(NAME) to {"from": "python"}.
MODE `event-wait NAME TIMEOUT`: print "waiting", then `Event(NAME).wait`.
MODE `event-set NAME`: `Event(NAME).set()`.
MODE `lock-try NAME TIMEOUT`: `Lock(NAME).acquire(timeout=TIMEOUT)` (and a
    release when acquired).
MODE `lock-hold NAME SECONDS`: acquire Lock(NAME), print "held", hold it
    SECONDS, release it.
MODE `queue-put NAME VALUE`: put a future of the int VALUE (scattered here)
    and the str "plain" in Queue(NAME).
MODE `queue-get NAME N`: get N items of Queue(NAME) (each waited for up to
    10 s), futures as their results.
MODE `log-event TOPIC`: `log_event(TOPIC, {"from": "python"})`.
MODE `events TOPIC`: `get_events(TOPIC)`, the messages.
MODE `tasks`: the keys the scheduler knows, and who wants each.
MODE `subscribers TOPIC`: the clients the scheduler sends TOPIC's events to.
MODE `subscribe TOPIC N`: `subscribe_topic(TOPIC, handler)`, logs "ping"
    under TOPIC until the handler saw one (the subscription is in place),
    prints "subscribed", then waits (up to 30 s) for N events that are not
    "ping", and prints their messages.
MODE `adopt IDFILE GOFILE KEY...`: writes this client's id to IDFILE, prints
    "ready", waits (up to 60 s) for GOFILE to exist, then who wants each KEY
    and `Future(KEY, client=c, state="memory").result()` of each.

Each check prints one JSON line `{"check": name, ...facts}`.
"""

import json
import os
import sys
import threading
import time

from distributed import Client, Event, Future, Lock, Queue, Variable


def emit(check, **facts):
    print(json.dumps({"check": check, **facts}), flush=True)


def main():
    addr, mode, *args = sys.argv[1:]
    with Client(addr, timeout=30) as c:
        if mode == "dataset-get":
            (name,) = args
            names = [str(n) for n in c.list_datasets()]
            fut = c.get_dataset(name)
            emit(
                "dataset-get",
                names=names,
                type=type(fut).__name__,
                key=str(fut.key),
                value=fut.result(timeout=30),
            )
        elif mode == "dataset-put":
            name, value = args
            fut = c.scatter(int(value))
            c.publish_dataset(fut, name=name)
            emit("dataset-put", key=str(fut.key))
        elif mode == "dataset-put-plain":
            (name,) = args
            c.publish_dataset({"from": "python", "n": [1, 2]}, name=name)
            emit("dataset-put-plain")
        elif mode == "dataset-get-plain":
            (name,) = args
            got = c.get_dataset(name)
            emit("dataset-get-plain", type=type(got).__name__, value=got)
        elif mode == "variable-get":
            (name,) = args
            v = Variable(name).get(timeout=10)
            if hasattr(v, "result"):
                emit(
                    "variable-get",
                    type="Future",
                    key=str(v.key),
                    value=v.result(timeout=30),
                )
            else:
                emit("variable-get", type=type(v).__name__, value=v)
        elif mode == "variable-set":
            name, value = args
            fut = c.scatter(int(value))
            Variable(name).set(fut)
            emit("variable-set", key=str(fut.key))
        elif mode == "variable-set-plain":
            (name,) = args
            Variable(name).set({"from": "python"})
            emit("variable-set-plain")
        elif mode == "event-wait":
            name, timeout = args
            ev = Event(name)
            print("waiting", flush=True)
            start = time.monotonic()
            woke = ev.wait(timeout=float(timeout))
            emit("event-wait", woke=woke, waited=time.monotonic() - start)
        elif mode == "event-set":
            (name,) = args
            Event(name).set()
            emit("event-set", is_set=Event(name).is_set())
        elif mode == "lock-try":
            name, timeout = args
            lock = Lock(name)
            start = time.monotonic()
            got = lock.acquire(timeout=float(timeout))
            waited = time.monotonic() - start
            if got:
                lock.release()
            emit("lock-try", acquired=got, waited=waited)
        elif mode == "lock-hold":
            name, seconds = args
            lock = Lock(name)
            assert lock.acquire(timeout=30)
            print("held", flush=True)
            time.sleep(float(seconds))
            lock.release()
            emit("lock-hold", released=True)
        elif mode == "queue-put":
            name, value = args
            q = Queue(name)
            fut = c.scatter(int(value))
            q.put(fut)
            q.put("plain")
            emit("queue-put", key=str(fut.key), qsize=q.qsize())
        elif mode == "queue-get":
            name, n = args
            q = Queue(name)
            items = []
            for _ in range(int(n)):
                item = q.get(timeout=10)
                if hasattr(item, "result"):
                    items.append(
                        {"future": str(item.key), "value": item.result(timeout=30)}
                    )
                else:
                    items.append({"value": item})
            emit("queue-get", items=items, qsize=q.qsize())
        elif mode == "log-event":
            (topic,) = args
            c.log_event(topic, {"from": "python"})
            emit("log-event")
        elif mode == "events":
            (topic,) = args
            emit("events", msgs=[msg for _, msg in c.get_events(topic)])
        elif mode == "subscribers":
            (topic,) = args

            def subscribers(dask_scheduler, topic=topic):
                topics = dask_scheduler._broker._topics
                return sorted(topics[topic].subscribers) if topic in topics else []

            emit("subscribers", clients=c.run_on_scheduler(subscribers))
        elif mode == "subscribe":
            topic, n = args
            got = []
            pinged = threading.Event()
            enough = threading.Event()

            def handler(event):
                _, msg = event
                if msg == "ping":
                    pinged.set()
                else:
                    got.append(msg)
                    if len(got) >= int(n):
                        enough.set()

            c.subscribe_topic(topic, handler)
            deadline = time.monotonic() + 30
            while not pinged.wait(0.2):
                assert time.monotonic() < deadline, "no ping came back"
                c.log_event(topic, "ping")
            print("subscribed", flush=True)
            assert enough.wait(30), f"only {got}"
            emit("subscribe", msgs=got, client=c.id)
        elif mode == "adopt":
            idfile, gofile, *keys = args
            with open(idfile, "w") as f:
                f.write(c.id)
            print("ready", flush=True)
            deadline = time.monotonic() + 60
            while not os.path.exists(gofile):
                assert time.monotonic() < deadline, "no go"
                time.sleep(0.1)

            def wants(dask_scheduler, keys=keys):
                return {
                    k: sorted(str(cs.client_key) for cs in dask_scheduler.tasks[k].who_wants)
                    if k in dask_scheduler.tasks
                    else None
                    for k in keys
                }

            who = c.run_on_scheduler(wants)
            futures = [Future(k, client=c, state="memory") for k in keys]
            values = {f.key: f.result(timeout=30) for f in futures}
            emit("adopt", client=c.id, wants=who, values=values)
        elif mode == "tasks":

            def tasks(dask_scheduler):
                return {
                    str(k): sorted(str(w.client_key) for w in ts.who_wants)
                    for k, ts in dask_scheduler.tasks.items()
                }

            emit("tasks", tasks=c.run_on_scheduler(tasks))
        else:
            raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
