#!/usr/bin/env python3
"""What a real Python `distributed.Client` sees of a worker framewire registered
(tests/dask_python.rs).

    python typed_client.py SCHEDULER_ADDRESS WORKER_ADDRESS

Connects a synchronous `Client` to the scheduler, waits (up to 20 s) until the
worker at WORKER_ADDRESS shows up in `client.scheduler_info()["workers"]` with
status "running", then submits `inc(1)` with `resources={"GPU": 1}` (as Dask's
documentation writes resources: an int) and waits until the scheduler has sent
it to that worker (the only one with a GPU), then prints one JSON line:

    {"found": bool, "worker": {name, nthreads, memory_limit, status, resources,
     services, nanny, local_directory, metrics_keys}, "n_workers": int,
     "running": [addresses the scheduler can run tasks on],
     "task": {"key": str, "state": str, "processing_on": address | null}}

and closes the client (the scheduler keeps running; it releases the task).
"""

import inspect
import json
import sys
import time

from distributed import Client


def inc(x):
    return x + 1


def task_state(key, dask_scheduler=None):
    ts = dask_scheduler.tasks.get(key)
    if ts is None:
        return {"key": key, "state": None, "processing_on": None}
    on = ts.processing_on.address if ts.processing_on else None
    return {"key": key, "state": ts.state, "processing_on": on}


def scheduler_info(client):
    """client.scheduler_info() with every worker: 2025.5.1 to 2026.3.0 describe five
    unless asked for all (n_workers=-1, 2026.8.0's default); 2024.12.1 takes no
    n_workers and describes all."""
    if "n_workers" in inspect.signature(client.scheduler_info).parameters:
        return client.scheduler_info(n_workers=-1)
    return client.scheduler_info()


def main() -> None:
    scheduler, worker = sys.argv[1], sys.argv[2]
    with Client(scheduler, timeout="20s") as client:
        deadline = time.monotonic() + 20
        while True:
            info = scheduler_info(client)
            entry = info["workers"].get(worker)
            if (entry and entry["status"] == "running") or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        running = client.run_on_scheduler(
            lambda dask_scheduler: sorted(ws.address for ws in dask_scheduler.running)
        )
        future = client.submit(inc, 1, key="inc-framewire-1", resources={"GPU": 1}, pure=False)
        deadline = time.monotonic() + 20
        while True:
            task = client.run_on_scheduler(task_state, key=future.key)
            if task["state"] == "processing" or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    out = {
        "found": entry is not None,
        "n_workers": len(info["workers"]),
        "running": running,
        "task": task,
    }
    if entry is not None:
        out["worker"] = {
            "name": entry["name"],
            "nthreads": entry["nthreads"],
            "memory_limit": entry["memory_limit"],
            "status": entry["status"],
            "resources": entry["resources"],
            "services": entry["services"],
            "nanny": entry["nanny"],
            "local_directory": entry["local_directory"],
            "metrics_keys": sorted(entry["metrics"]),
        }
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
