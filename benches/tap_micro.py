#!/usr/bin/env python3
"""Micro-benchmarks of `framewire tap` alone, over loopback TCP, without Dask
(scripts/tap-micro runs this):

* throughput: a sender writes COUNT messages of one SIZE-byte frame (Dask's
  framing) to a receiver that reads and drops them; wall time from the first
  byte sent to the last byte received, and the tap's CPU time (user + system);
* round trip: a client sends a 100-byte message and waits for it to come back
  from an echo server, N times; the median time of one round trip.

Modes: `direct` (no tap) and one per `LABEL=PATH [TAP OPTION...]` given
(e.g. `taps=target/release/framewire`, `copy=target/release/framewire
--no-splice`). With `--certs DIR` (ca.pem, node.pem, node.key), a label
that starts with `tls` runs TLS on both sides: the sender and the receiver
are Python `ssl` sockets (OpenSSL), the tap ends TLS on each side
(`tls://` listener and upstream, `--tls-*`); `tls-direct=` (no path) is
TLS without a tap. Rounds are interleaved, the order reversed every other
round; medians and min/max are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import ssl
import statistics
import struct
import subprocess
import threading
import time

LOOPBACK = "127.0.0.1"
CERTS: str | None = None  # --certs


def contexts() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server, client) contexts as Dask's Security makes them: mutual, no host name check."""
    ca, cert, key = (os.path.join(CERTS, f) for f in ("ca.pem", "node.pem", "node.key"))
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    server.load_verify_locations(ca)
    server.verify_mode = ssl.CERT_REQUIRED
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname = False
    client.load_cert_chain(cert, key)
    client.load_verify_locations(ca)
    return server, client


def tls_flags() -> list[str]:
    return ["--tls-ca-file", os.path.join(CERTS, "ca.pem"), "--tls-cert", os.path.join(CERTS, "node.pem"),
            "--tls-key", os.path.join(CERTS, "node.key")]


def message(size: int) -> bytes:
    frames = [b"\x81\xa2op\xa4data", b"x" * size]
    head = struct.pack("<Q", len(frames)) + b"".join(struct.pack("<Q", len(f)) for f in frames)
    body = b"".join(frames)
    return struct.pack("<Q", len(head) + len(body)) + head + body


class Tap:
    def __init__(self, spec: list[str], upstream: int, tls: bool = False):
        binary, *options = spec
        scheme = "tls://" if tls else ""
        self.p = subprocess.Popen(
            [binary, "tap", *options, *(tls_flags() if tls else []), "--listen", f"{scheme}{LOOPBACK}:0",
             "--upstream", f"{scheme}{LOOPBACK}:{upstream}", "--log", os.devnull],
            stderr=subprocess.PIPE,
        )
        line = self.p.stderr.readline().decode()
        host, port = line.split("listening on ")[1].split(",")[0].split()[0].rsplit(":", 1)
        self.address = (host.split("://")[-1], int(port))

    def cpu(self) -> float:
        with open(f"/proc/{self.p.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        self.p.kill()
        self.p.wait()


def throughput(spec: list[str] | None, size: int, count: int, tls: bool = False) -> tuple[float, float]:
    listener = socket.socket()
    listener.bind((LOOPBACK, 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    tap = Tap(spec, port, tls) if spec else None
    server_ctx, client_ctx = contexts() if tls else (None, None)
    msg = message(size)
    total = len(msg) * count
    done: list[float] = []

    def sink():
        conn, _ = listener.accept()
        if tls:
            conn = server_ctx.wrap_socket(conn, server_side=True)
        buf = memoryview(bytearray(1 << 20))
        got = 0
        while got < total:
            n = conn.recv_into(buf)
            if n == 0:
                break
            got += n
        done.append(time.perf_counter())
        conn.close()

    t = threading.Thread(target=sink)
    t.start()
    s = socket.create_connection(tap.address if tap else (LOOPBACK, port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if tls:
        s = client_ctx.wrap_socket(s)
        s.do_handshake()
    cpu0 = tap.cpu() if tap else 0.0
    t0 = time.perf_counter()
    for _ in range(count):
        s.sendall(msg)
    t.join()
    cpu = tap.cpu() - cpu0 if tap else 0.0
    s.close()
    listener.close()
    if tap:
        tap.close()
    return done[0] - t0, cpu


def round_trip(spec: list[str] | None, n: int, tls: bool = False) -> tuple[float, float]:
    listener = socket.socket()
    listener.bind((LOOPBACK, 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    server_ctx, client_ctx = contexts() if tls else (None, None)

    def echo():
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls:
            conn = server_ctx.wrap_socket(conn, server_side=True)
        while True:
            data = conn.recv(65536)
            if not data:
                break
            conn.sendall(data)
        conn.close()

    t = threading.Thread(target=echo, daemon=True)
    t.start()
    tap = Tap(spec, port, tls) if spec else None
    s = socket.create_connection(tap.address if tap else (LOOPBACK, port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if tls:
        s = client_ctx.wrap_socket(s)
        s.do_handshake()
    msg = message(100)
    times = []
    cpu0 = tap.cpu() if tap else 0.0
    for _ in range(n):
        t0 = time.perf_counter()
        s.sendall(msg)
        got = 0
        while got < len(msg):
            got += len(s.recv(65536))
        times.append(time.perf_counter() - t0)
    cpu = tap.cpu() - cpu0 if tap else 0.0
    s.close()
    t.join(timeout=5)
    listener.close()
    if tap:
        tap.close()
    return statistics.median(times), cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", action="append", default=[], help="LABEL=PATH [TAP OPTION...]")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--size", type=int, default=64 << 20)
    ap.add_argument("--count", type=int, default=8)
    ap.add_argument("--trips", type=int, default=2000)
    ap.add_argument("--certs", metavar="DIR", help="ca.pem, node.pem, node.key: for the tls* modes")
    ap.add_argument("--json", metavar="FILE", help="also write every round here (benches/figures.py renders it)")
    a = ap.parse_args()
    global CERTS
    CERTS = a.certs
    modes: list[tuple[str, list[str] | None]] = [("direct", None)]
    for m in a.mode:
        label, _, spec = m.partition("=")
        modes.append((label, spec.split() or None))
    thr: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in modes}
    rtt: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in modes}
    for r in range(a.rounds):
        for label, spec in modes if r % 2 == 0 else modes[::-1]:
            tls = label.startswith("tls")
            thr[label].append(throughput(spec, a.size, a.count, tls))
            rtt[label].append(round_trip(spec, a.trips, tls))
    gb = a.size * a.count / 1e9
    print(f"throughput: {a.count} messages of {a.size} bytes, {a.rounds} rounds")
    print(f"{'mode':8} {'median s':>9} {'min s':>7} {'max s':>7} {'GB/s':>6} {'tap cpu s':>9}")
    if "taps" in thr and "tls-taps" in thr:
        ratios = [(a_ / b_) for (a_, _), (b_, _) in zip(thr["taps"], thr["tls-taps"])]
        print(f"tls-taps / taps throughput, per round: median {statistics.median(ratios):.2f}x "
              f"({min(ratios):.2f}x - {max(ratios):.2f}x)")
    for label, _ in modes:
        ws = [w for w, _ in thr[label]]
        med = statistics.median(ws)
        cpu = statistics.median(c for _, c in thr[label])
        print(f"{label:8} {med:9.3f} {min(ws):7.3f} {max(ws):7.3f} {gb / med:6.2f} {cpu:9.3f}")
    print(f"round trip of a 100-byte message ({a.trips} per round, median per round), {a.rounds} rounds;")
    print("tap cpu: the tap's CPU time per round trip (two messages relayed)")
    print(f"{'mode':8} {'median us':>9} {'min us':>7} {'max us':>7} {'tap cpu us':>10}")
    for label, _ in modes:
        us = [x * 1e6 for x, _ in rtt[label]]
        cpu = statistics.median(c for _, c in rtt[label]) / a.trips * 1e6
        print(f"{label:8} {statistics.median(us):9.1f} {min(us):7.1f} {max(us):7.1f} {cpu:10.1f}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"size": a.size, "count": a.count, "trips": a.trips, "rounds": a.rounds, "modes": {
                label: {"throughput_s": [w for w, _ in thr[label]], "throughput_cpu_s": [c for _, c in thr[label]],
                        "round_trip_s": [x for x, _ in rtt[label]], "round_trip_cpu_s": [c for _, c in rtt[label]]}
                for label, _ in modes}}, fh)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
