#!/usr/bin/env python3
"""What a real Python `distributed.Client` sees of a worker framewire registered
(tests/dask_python.rs).

    python typed_client.py SCHEDULER_ADDRESS WORKER_ADDRESS

Connects a synchronous `Client` to the scheduler, waits (up to 20 s) until the
worker at WORKER_ADDRESS shows up in `client.scheduler_info()["workers"]` with
status "running", then prints one JSON line:

    {"found": bool, "worker": {name, nthreads, memory_limit, status, resources,
     services, nanny, local_directory, metrics_keys}, "n_workers": int,
     "running": [addresses the scheduler can run tasks on]}

and closes the client (the scheduler keeps running).
"""

import json
import sys
import time

from distributed import Client


def main() -> None:
    scheduler, worker = sys.argv[1], sys.argv[2]
    with Client(scheduler, timeout="20s") as client:
        deadline = time.monotonic() + 20
        while True:
            info = client.scheduler_info()
            entry = info["workers"].get(worker)
            if (entry and entry["status"] == "running") or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        running = client.run_on_scheduler(
            lambda dask_scheduler: sorted(ws.address for ws in dask_scheduler.running)
        )
    out = {"found": entry is not None, "n_workers": len(info["workers"]), "running": running}
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
