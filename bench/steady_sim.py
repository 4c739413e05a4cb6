"""Simulation (not a test): the steady window's bias against a closed-loop server model.

    .venv/bin/python bench/steady_sim.py [--long 48] [--seed 1]

The server: each request is a prefill, then a decode. Prefills share one prefill throughput
(``PREFILL_TOK_S``: a prefill lasts its prompt over that, times the prefills running beside it)
and stall every decode while any runs (a server without chunked prefill); a decoding request makes
``DECODE_TOK_S / (1 + SLOWDOWN * (n - 1))`` tokens a second with n decoding. Each item has its
prompt length (about 1k tokens) and its output length (64 to 192 tokens, so workers drift out of
phase); every rep sends the same items, as ruler's reps do. C workers in a closed loop share one
queue of ``N x C`` requests (ruler's default sizing of a rep by requests), all starting together.

The records it writes are the receipt's (``engine.record.request``): worker, start, first token,
end, completion tokens and the gaps between chunks. Every figure is ruler's own code on them:
``engine.method.steady`` (the steady window and its tok/s) and ``engine.method.stats`` (the whole
rep's tok/s). The true sustained tok/s is the long run's: ``--long`` requests per worker, its
tokens over the middle half of the run (the ramp long forgotten, the tail not begun).

It prints per C and requests per worker: the bias of the old window (every worker's first token to
the first worker's last end), of ruler's window (send to send: whole request cycles), the cycles
per worker it holds, and the bias of the whole rep, against the true figure; then, for a decode
twice as fast, the delta each reads against the true delta. The old window is built here from
``steady.Window`` and counted by ``steady.tokens_in``, the functions ruler counts its own with.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.method import stats, steady

PREFILL_TOK_S = 7000.0  # prompt tokens a second, shared by the prefills running at once
DECODE_TOK_S = 60.0  # one request alone decodes this many tokens a second
SLOWDOWN = 0.03  # ... and each other decoding request slows it by this share
PROMPT = (768, 1280)  # an item's prompt tokens, uniform
OUTPUT = (64, 192)  # an item's output tokens, uniform
ITEMS = 200


@dataclass(frozen=True)
class Server:
    prefill_tok_s: float = PREFILL_TOK_S
    decode_tok_s: float = DECODE_TOK_S
    slowdown: float = SLOWDOWN

    def decode_rate(self, n: int) -> float:
        return self.decode_tok_s / (1 + self.slowdown * (n - 1))


def items(seed: int) -> list[tuple[int, int]]:
    rng = random.Random(f"items:{seed}")
    return [(rng.randint(*PROMPT), rng.randint(*OUTPUT)) for _ in range(ITEMS)]


@dataclass
class Req:
    worker: int
    index: int
    prompt: float  # prompt tokens still to prefill
    output: int
    start: float
    done: float = 0.0  # tokens emitted, the first at the prefill's end
    first: float | None = None
    times: list[float] | None = None


def simulate(server: Server, data: list[tuple[int, int]], c: int, n: int) -> list[dict[str, Any]]:
    """One rep: ``n`` requests from one queue over ``c`` workers; the receipt's records."""
    queue = iter(range(n))
    active: list[Req] = []
    out: list[dict[str, Any]] = []
    now = 0.0

    def send(worker: int) -> None:
        i = next(queue, None)
        if i is not None:
            p, o = data[i % len(data)]
            active.append(Req(worker, i, float(p), o, now))

    for w in range(c):
        send(w)
    while active:
        prefilling = [r for r in active if r.first is None]
        decoding = [r for r in active if r.first is not None]
        p_rate = server.prefill_tok_s / len(prefilling) if prefilling else 0.0
        d_rate = 0.0 if prefilling else server.decode_rate(len(decoding))
        steps = [r.prompt / p_rate for r in prefilling]
        if d_rate:
            steps += [(r.output - r.done) / d_rate for r in decoding]
        dt = min(steps)
        for r in prefilling:
            r.prompt -= p_rate * dt
        if d_rate:
            for r in decoding:
                assert r.times is not None
                k = math.floor(r.done) + 1
                target = r.done + d_rate * dt
                while k <= target + 1e-9 and k <= r.output:
                    r.times.append(now + (k - r.done) / d_rate)
                    k += 1
                r.done = min(target, float(r.output))
        now += dt
        ended = []
        for r in active:
            if r.first is None and r.prompt <= 1e-9:
                r.first, r.times, r.done = now, [now], 1.0
            if r.times is not None and len(r.times) >= r.output:
                ended.append(r)
        for r in ended:
            active.remove(r)
            assert r.times is not None and r.first is not None
            gaps = [(b - a) * 1000 for a, b in zip(r.times, r.times[1:], strict=False)]
            out.append({"worker": r.worker, "index": r.index, "prompt_index": r.index % len(data),
                        "start": r.start, "first_token": r.first, "end": r.times[-1],
                        "completion_tokens": r.output, "chunks": r.output, "gaps_ms": gaps,
                        "error": None})
            send(r.worker)
    return out


def true_tok_s(server: Server, data: list[tuple[int, int]], c: int, long: int) -> float:
    recs = simulate(server, data, c, long * c)
    first = min(r["start"] for r in recs)
    # The middle half of the time every worker is busy: long after the ramp, before the tail.
    busy_end = min(max(r["end"] for r in recs if r["worker"] == w) for w in range(c))
    span = busy_end - first
    w = steady.Window(first + span / 4, first + 3 * span / 4)
    return steady.tokens_in(recs, w) / w.seconds


def old_tok_s(recs: list[dict[str, Any]], c: int) -> float | None:
    """The window ruler had before: every worker's first token to the first worker's last end."""
    by_worker: dict[int, list[dict[str, Any]]] = {}
    for r in recs:
        by_worker.setdefault(r["worker"], []).append(r)
    start = max(min(r["first_token"] for r in rs) for rs in by_worker.values())
    end = min(max(r["end"] for r in rs) for rs in by_worker.values())
    w = steady.Window(start, end)
    return steady.tokens_in(recs, w) / w.seconds if end > start else None


def new_tok_s(recs: list[dict[str, Any]], c: int) -> tuple[float | None, float | None]:
    """ruler's steady tok/s now and the request cycles per worker its window holds."""
    f = steady.figures(recs, c)
    return f["steady_tok_s"], f["steady_cycles"]


def whole_tok_s(recs: list[dict[str, Any]], c: int) -> float:
    return float(stats.rep_figures(recs, c)["agg_tok_s"])


def pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1%}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--long", type=int, default=48, help="requests per worker of the true run")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--concurrency", type=int, nargs="*", default=[1, 8, 64])
    ap.add_argument("--per-worker", type=int, nargs="*", default=[2, 4, 8, 16])
    args = ap.parse_args()
    t0 = time.monotonic()
    data = items(args.seed)
    base, fast = Server(), Server(decode_tok_s=2 * DECODE_TOK_S)
    print(f"server: prefill {PREFILL_TOK_S:g} tok/s shared, decode {DECODE_TOK_S:g} tok/s alone, "
          f"-{SLOWDOWN:.0%} per other decoding request, prefill stalls decode; prompts "
          f"{PROMPT[0]}-{PROMPT[1]}, outputs {OUTPUT[0]}-{OUTPUT[1]} tokens; fast: decode x2")
    print(f"{'C':>3} {'req/worker':>10} | {'true tok/s':>10} {'old bias':>9} {'new bias':>9} "
          f"{'cycles':>6} {'whole bias':>10} | {'true delta':>10} {'old reads':>9} {'new reads':>9} "
          f"{'whole reads':>11}")
    for c in args.concurrency:
        truth = {s: true_tok_s(s, data, c, args.long) for s in (base, fast)}
        true_delta = truth[fast] / truth[base] - 1
        for n in args.per_worker:
            reps = {s: simulate(s, data, c, n * c) for s in (base, fast)}
            cycles = new_tok_s(reps[base], c)[1]
            row: dict[str, list[float | None]] = {}
            for name, fn in (("old", old_tok_s), ("new", lambda r, c: new_tok_s(r, c)[0]),
                             ("whole", whole_tok_s)):
                got = {s: fn(reps[s], c) for s in (base, fast)}
                b, f = got[base], got[fast]
                row[name] = [None if b is None else b / truth[base] - 1,
                             None if b is None or f is None else f / b - 1]
            short = "*" if steady.too_short(1.0, None, None, cycles) else " "
            print(f"{c:>3} {n:>10} | {truth[base]:>10.1f} {pct(row['old'][0]):>9} "
                  f"{pct(row['new'][0]):>9} {'-' if cycles is None else f'{cycles:.2f}':>5}{short} "
                  f"{pct(row['whole'][0]):>10} | {pct(true_delta):>10} "
                  f"{pct(row['old'][1]):>9} {pct(row['new'][1]):>9} {pct(row['whole'][1]):>11}")
    print(f"*: under steady.MIN_CYCLES ({steady.MIN_CYCLES:g}) request cycles per worker, the row "
          "is over the whole reps")
    print(f"({time.monotonic() - t0:.0f} s)")


if __name__ == "__main__":
    main()
