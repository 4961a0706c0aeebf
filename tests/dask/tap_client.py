"""A Dask client for tests/tap_e2e.rs: connects to the scheduler address it is
given (the `framewire tap` relay), runs a small graph that moves numpy arrays
both ways (scatter, submit, map, gather), checks every result here, and
prints one JSON line:

    {"ok": true, "checks": {...}, "workers": 1, "scattered_bytes": 8000000}

Usage: tap_client.py tcp://HOST:PORT
       tap_client.py tls://HOST:PORT --tls-ca-file CA --tls-cert CERT --tls-key KEY
(a `distributed.security.Security` with those files, encryption required).
"""

import argparse
import json
import math
import sys

import numpy as np
from distributed import Client
from distributed.security import Security


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("address")
    parser.add_argument("--tls-ca-file")
    parser.add_argument("--tls-cert")
    parser.add_argument("--tls-key")
    args = parser.parse_args()
    address = args.address
    security = None
    if args.tls_ca_file:
        security = Security(
            tls_ca_file=args.tls_ca_file,
            tls_client_cert=args.tls_cert,
            tls_client_key=args.tls_key,
            require_encryption=True,
        )
    checks = {}
    with Client(address, timeout="30s", security=security) as client:
        client.wait_for_workers(1, timeout=60)
        workers = len(client.scheduler_info()["workers"])

        rng = np.random.default_rng(2026)
        big = rng.random(1_000_000)  # 8 MB: a frame of its own, both ways

        # scatter: the array travels client -> tap -> scheduler -> worker.
        # (hash=False, and pure=False below: keys of this client's own, so
        # that two clients on one cluster never share, and release, each
        # other's data.)
        [remote_big] = client.scatter([big], hash=False)
        # (np.mean's pairwise sum depends on alignment: equal to ~1 ulp.)
        mean = client.submit(np.mean, remote_big).result(timeout=60)
        checks["scatter_mean"] = math.isclose(mean, big.mean(), rel_tol=1e-12)

        # submit + gather (through the scheduler, hence the tap): 8 MB back.
        doubled = client.submit(np.multiply, remote_big, 2.0).result(timeout=60)
        checks["gather_doubled"] = bool(np.array_equal(doubled, big * 2.0))

        # map, then gather a list of arrays, then reduce on the cluster.
        sizes = [10, 1_000, 100_000]
        arrays = client.map(np.arange, sizes, pure=False)
        sums = client.map(np.sum, arrays, pure=False)
        total = client.submit(sum, sums, pure=False).result(timeout=60)
        checks["map_sum"] = int(total) == sum(n * (n - 1) // 2 for n in sizes)
        gathered = client.gather(arrays)
        checks["gather_map"] = all(
            np.array_equal(a, np.arange(n)) for a, n in zip(gathered, sizes)
        )

        # A structured dtype and a 2-D Fortran-ordered array.
        grid = np.asfortranarray(np.arange(12, dtype="<i4").reshape(3, 4))
        [remote_grid] = client.scatter([grid], hash=False)
        checks["transpose"] = bool(
            np.array_equal(client.submit(np.transpose, remote_grid).result(60), grid.T)
        )

    result = {
        "ok": all(checks.values()),
        "checks": checks,
        "workers": workers,
        "scattered_bytes": int(big.nbytes),
    }
    print(json.dumps(result), flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
