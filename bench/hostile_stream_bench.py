"""Benchmark (not a test): the load generator's memory against a server whose every streamed answer
is one huge SSE line with no end (issue 39: +230 MB of engine memory a request, 3.6 GB after 16).

    .venv/bin/python bench/hostile_stream_bench.py [--mib 64] [--passes 8]

A server process answers every request with a 200 event stream whose body is ``data: `` and
``--mib`` MiB of ``x`` with no line end, then closes. A client process runs ``--passes`` passes of
``measure_pass`` (one request each, as a campaign's passes follow one another) and prints its RSS
after each pass and its peak RSS. It runs twice:

- ``ruler``: the client as it is: an SSE event over ``engine.run.client.record.MAX_EVENT`` fails
  its request with a recorded error, and a pass collects garbage before it freezes the GC;
- ``unbounded``: the same client with neither (no bound on an event, no collection before the
  freeze), as the client was before: each request's buffers, garbage of a reference cycle
  (the response and its parser), are frozen by the next pass and kept for good.

Each figure is printed; nothing is asserted. The unbounded client copies its unfinished event at
every parse (every 16 KiB read), so it is also slow: keep ``--mib`` modest on a small machine.
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing as mp
import resource
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def serve(port_out: Any, mib: int) -> None:
    """One server process: every request answered by one endless-looking SSE line, then closed."""
    sock = socket.create_server(("127.0.0.1", 0))
    port_out.put(sock.getsockname()[1])
    block = b"x" * (1 << 20)

    def answer(conn: socket.socket) -> None:
        with conn:
            conn.recv(1 << 16)  # the request (small, in one read on loopback)
            try:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Connection: close\r\n\r\ndata: ")
                for _ in range(mib):
                    conn.sendall(block)
            except OSError:  # the client gave up on the answer: what a bound does
                pass

    while True:
        conn, _ = sock.accept()
        threading.Thread(target=answer, args=(conn,), daemon=True).start()


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def client(port: int, passes: int, unbounded: bool) -> None:
    from engine.campaign.sources.item import plain_item
    from engine.run import loadgen
    from engine.run.client import record
    from engine.run.loadgen import PassPlan
    from engine.run.shards import measure_pass
    from engine.servers import get_adapter

    if unbounded:  # the client before the fix: no bound on an event, no collection before the freeze
        record.MAX_EVENT = 1 << 62

        class NoCollect:
            collect = staticmethod(lambda: 0)
            freeze = staticmethod(gc.freeze)
            unfreeze = staticmethod(gc.unfreeze)

        loadgen.gc = NoCollect  # type: ignore[attr-defined,assignment]  # the bench's stand-in for the module
    plan = PassPlan(f"http://127.0.0.1:{port}", get_adapter("llamacpp"), [plain_item("hi")], 1, 1, 16,
                    {"temperature": 0}, {}, 600.0)
    start = rss_mib()
    print(f"  start: RSS {start:.0f} MiB", flush=True)
    for i in range(passes):
        t = time.monotonic()
        res = measure_pass(plan)
        error = res.records[0]["error"] or "none"
        print(f"  pass {i + 1}: RSS {rss_mib():.0f} MiB, {time.monotonic() - t:.1f} s, "
              f"error: {error[:100]}", flush=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"  peak RSS {peak:.0f} MiB; after {passes} passes {rss_mib():.0f} MiB "
          f"(+{rss_mib() - start:.0f} MiB)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=64, help="MiB of the one line each answer sends")
    ap.add_argument("--passes", type=int, default=8)
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    ports: Any = ctx.Queue()
    server = ctx.Process(target=serve, args=(ports, args.mib), daemon=True)
    server.start()
    port = ports.get()
    try:
        for name, unbounded in (("ruler", False), ("unbounded", True)):
            print(f"{name}: {args.passes} passes of one request, each answered by a {args.mib} MiB "
                  "SSE line with no end", flush=True)
            proc = ctx.Process(target=client, args=(port, args.passes, unbounded))
            proc.start()
            proc.join()
    finally:
        server.kill()


if __name__ == "__main__":
    main()
