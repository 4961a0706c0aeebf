#!/usr/bin/env python3
"""A Dask `Client` for framewire's partition tests (cli/tests/partition.rs).

    python partition_client.py ADDRESS

Connects to ADDRESS (a `framewire tap` in front of the scheduler), prints
{"connected": <time>}, then watches its own status and, once it is no longer
"running" (Dask's client lost its scheduler stream and is reconnecting),
prints {"lost": <time>, "status": <status>} and exits at once.
"""

import json
import os
import sys
import time

from distributed import Client


def main() -> None:
    client = Client(sys.argv[1], timeout=60)
    print(json.dumps({"connected": time.time()}), flush=True)
    while client.status == "running":
        time.sleep(0.05)
    print(json.dumps({"lost": time.time(), "status": client.status}), flush=True)
    os._exit(0)  # closing would wait for the scheduler it lost


if __name__ == "__main__":
    main()
