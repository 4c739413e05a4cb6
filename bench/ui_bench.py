"""Benchmark (not a test): the console under a boot log growing at 10,000 lines/s while reps land.

    .venv/bin/python bench/ui_bench.py [--seconds 30] [--rate 10000] [--size 80x24]

The console runs as it does for an operator: its own process (``python -m tui.app RUN_DIR``) on a
pseudo-terminal with TERM=xterm-256color, real driver, real frames. This process plays the
rest of the world: it appends to ``boot.log`` and ``journal.jsonl`` of a run directory copied from
the recorded ``measuring`` run, serves a real control socket (a stand-in engine, as in the tests),
presses keys on the terminal and reads the frames back.

Key-to-screen latency is from writing the key to the terminal until a frame carrying its effect
has been read back: ``f`` (follow toggle, answered by the UI alone) and ``w`` (rewarm: a command
over the socket and the engine's reply on screen). UI CPU is the console process's user+system
time over the wall time; memory is its RSS, sampled every second. Targets: p99 < 100 ms, memory flat.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.control import ControlServer  # noqa: E402
from engine.record.journal import read_events  # noqa: E402
from engine.record.writer import JournalWriter  # noqa: E402

RECORDED = ROOT / "tests" / "fixtures" / "journals" / "measuring"
ANSI = re.compile(rb"\x1b\[[0-9;?<=>$]*[ -/]*[@-~]"  # CSI: colours, cursor moves, modes
                  rb"|\x1b[\]P_^][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC/DCS strings
                  rb"|\x1b[()][0-9A-Za-z]|\x1b[=>78]")
LOG_LINE = ("{t} I slot print_timing: id  1 | task {n} | prompt eval time =      87.94 ms /"
            "     1 tokens (   87.94 ms per token,    11.37 tokens per second)\n")


class Screen:
    """Reads the terminal's output, keeps its recent plain text; positions count from the start."""

    def __init__(self, fd: int) -> None:
        self.fd, self.text, self.cond = fd, "", threading.Condition()
        self.total = 0  # characters ever received; text holds the last ones
        self.bytes = 0
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except OSError:
                return
            if not data:
                return
            plain = ANSI.sub(b"", data).decode("utf-8", "replace")
            with self.cond:
                self.bytes += len(data)
                self.total += len(plain)
                self.text = (self.text + plain)[-200_000:]
                self.cond.notify_all()

    def mark(self) -> int:
        with self.cond:
            return self.total

    def since(self, pos: int) -> str:
        with self.cond:
            return self.text[max(0, pos - (self.total - len(self.text))):]

    def wait_for(self, needle: str, since: int, timeout: float) -> bool:
        """True once ``needle`` arrives after position ``since``."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                start = max(0, since - (self.total - len(self.text)) - len(needle))
                if needle in self.text[start:]:
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(left)


class StandIn:
    """The engine's side of the socket: answers and journals like engine.run.runner's command()."""

    def __init__(self, run: Path, journal: JournalWriter, lock: threading.Lock) -> None:
        self.n, self.journal, self.lock = 0, journal, lock
        self.handling_ms: list[float] = []  # the engine's share of a command's latency
        self.server = ControlServer(run, self.handle)

    def handle(self, cmd: str, args: list[str], who: dict[str, Any]) -> str:
        if cmd == "status":
            return "bench stand-in: running"
        t0 = time.perf_counter()
        self.n += 1
        reply = f"a warm pass runs before the next rep (#{self.n})"
        with self.lock:
            self.journal.append("command", cmd=cmd, args=args, who=who, reply=reply)  # fsync'd
        self.handling_ms.append((time.perf_counter() - t0) * 1000)
        return reply


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def grow_log(path: Path, rate: int, stop: threading.Event, counter: list[int]) -> None:
    """Append ``rate`` lines a second in 10 ms slices, as a chatty server does."""
    with open(path, "a", buffering=1 << 20) as f:
        t0, n = time.monotonic(), 0
        while not stop.is_set():
            due = int((time.monotonic() - t0) * rate)
            if due > n:
                stamp = time.strftime("%M.%S.000.000")
                f.write("".join(LOG_LINE.format(t=stamp, n=i) for i in range(n, due)))
                f.flush()
                n = due
            time.sleep(0.01)
        counter[0] = n


def land_reps(journal: JournalWriter, lock: threading.Lock, stop: threading.Event, counter: list[int],
              every: float) -> None:
    """A rep every ``every`` s (real event shapes): warm, 3 reps, a leak on the second, the row. Four
    shapes take turns, so the campaign's state stays the size of a window and memory growth is
    the console's own."""
    k = 0
    while not stop.is_set():
        where = {"session": "s2", "window": "control", "class": "bench", "concurrency": 3 + k % 4}
        steps: list[tuple[str, dict[str, Any]]] = [
            ("shape_started", {"attempt": 1, "rerun": False}),
            ("warm_done", {"attempt": 1, "label": "warm", "agg_tok_s": 9.0, "failed": 0})]
        reps = [10.0 + k, 6.0 + k, 10.5 + k]
        for rep, tok in enumerate(reps, 1):
            steps.append(("rep_done", {"attempt": 1, "rep": rep, "agg_tok_s": tok, "per_user_tok_s": tok,
                                       "file": f"windows/s2-control/reps/bench-{k}-{rep}.jsonl"}))
            if rep == 2:
                steps.append(("leak_suspected", {"attempt": 1, "rep": 2, "agg_tok_s": tok, "median": 8.0}))
        steps.append(("row_done", {"axis": "control", "attempts": 1, "reason": "", "reps": 3,
                                   "rep_tok_s": reps, "agg_tok_s": statistics.median(reps),
                                   "per_user_tok_s": statistics.median(reps), "spread": 0.45,
                                   "status": "noisy", "accept_len": None, "accept_rate": None}))
        for kind, data in steps:
            if stop.wait(every if kind in ("rep_done", "warm_done") else 0.0):
                return
            with lock:
                journal.append(kind, **where, **data)
            counter[0] += kind == "rep_done"
        k += 1


def wakeups(stop: threading.Event, late_ms: list[float]) -> None:
    """How late a thread that sleeps 5 ms wakes up: the box's scheduling delay, for context."""
    while not stop.is_set():
        t0 = time.perf_counter()
        time.sleep(0.005)
        late_ms.append((time.perf_counter() - t0) * 1000 - 5)


def press(master: int, screen: Screen, key: bytes, needle: str) -> float | None:
    since = screen.mark()
    t0 = time.perf_counter()
    os.write(master, key)
    if not screen.wait_for(needle, since, timeout=5.0):
        if os.environ.get("BENCH_DEBUG"):
            print(f"lost {key!r} waiting for {needle!r}; since then:\n{screen.since(since)[-1500:]!r}")
        return None
    return (time.perf_counter() - t0) * 1000


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def probe_keys(master: int, screen: Screen, seconds: float, stand_in: StandIn) -> dict[str, list[float]]:
    lat: dict[str, list[float]] = {"f": [], "w": [], "lost": []}
    follow_on = True
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        follow_on = not follow_on
        ms = press(master, screen, b"f", "follow on" if follow_on else "follow off")
        lat["f" if ms is not None else "lost"].append(ms or 0.0)
        time.sleep(0.15)
        ms = press(master, screen, b"w", f"(#{stand_in.n + 1})")
        lat["w" if ms is not None else "lost"].append(ms or 0.0)
        time.sleep(0.15)
    if not follow_on:
        press(master, screen, b"f", "follow on")
    return lat


def report(name: str, lat: dict[str, list[float]]) -> None:
    for key, what in (("f", "f (UI only)"), ("w", "w (socket + reply)")):
        xs = lat[key]
        if xs:
            print(f"  {name:5} key-to-screen {what:19} n={len(xs):3}  p50 {pct(xs, 50):6.1f} ms  "
                  f"p99 {pct(xs, 99):6.1f} ms  max {max(xs):6.1f} ms")
    if lat["lost"]:
        print(f"  {name:5} {len(lat['lost'])} key(s) never reached the screen within 5 s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--rate", type=int, default=10_000, help="boot.log lines per second")
    ap.add_argument("--size", default="80x24")
    ap.add_argument("--rep-every", type=float, default=0.5, help="seconds between reps landing")
    ap.add_argument("--idle", type=float, default=5.0, help="seconds of key probes before the load")
    ap.add_argument("--profile", metavar="FILE", help="run the console under cProfile, stats to FILE")
    ap.add_argument("--nice", type=int, default=0, help="run the console at this nice level (root: <0)")
    args = ap.parse_args()
    cols, rows = (int(x) for x in args.size.split("x"))

    tmp = Path(tempfile.mkdtemp(prefix="ruler-bench-"))
    run = tmp / "run"
    shutil.copytree(RECORDED, run)
    lock = threading.Lock()
    journal = JournalWriter(run / "journal.jsonl")
    stand_in = StandIn(run, journal, lock)

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLORTERM", "NO_COLOR", "TEXTUAL")}
    env["TERM"] = "xterm-256color"
    prof = ["-m", "cProfile", "-o", args.profile] if args.profile else []
    nice = ["nice", "-n", str(args.nice)] if args.nice else []
    ui = subprocess.Popen([*nice, sys.executable, *prof, "-m", "tui.app", str(run)], cwd=ROOT, env=env,
                          stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    screen = Screen(master)
    try:
        if not screen.wait_for("engine connected", 0, timeout=30):
            print("the console never showed 'engine connected'; output tail:\n" + screen.text[-2000:])
            return 1
        time.sleep(1.0)
        print(f"console pid {ui.pid} on a {cols}x{rows} pty (TERM=xterm-256color), "
              f"run {run}, {len(read_events(run / 'journal.jsonl'))} journal events")
        idle = probe_keys(master, screen, args.idle, stand_in)

        stop = threading.Event()
        lines, reps = [0], [0]
        late: list[float] = []
        threads = [threading.Thread(target=grow_log, args=(run / "windows/s2-control/boot.log",
                                                           args.rate, stop, lines)),
                   threading.Thread(target=land_reps, args=(journal, lock, stop, reps, args.rep_every)),
                   threading.Thread(target=wakeups, args=(stop, late))]
        for t in threads:
            t.start()
        time.sleep(2.0)  # let the flood reach a steady state before measuring
        cpu0, wall0, out0 = cpu_s(ui.pid), time.monotonic(), screen.bytes
        rss: list[int] = [rss_kib(ui.pid)]
        sampling = threading.Event()

        def sample() -> None:
            while not sampling.wait(1.0):
                rss.append(rss_kib(ui.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        handled = len(stand_in.handling_ms)
        loaded = probe_keys(master, screen, args.seconds, stand_in)
        engine_ms = stand_in.handling_ms[handled:]
        sampling.set()
        wall, cpu = time.monotonic() - wall0, cpu_s(ui.pid) - cpu0
        out_rate = (screen.bytes - out0) / wall
        stop.set()
        for t in threads:
            t.join()
        rss.append(rss_kib(ui.pid))

        print(f"load: boot.log +{lines[0]:,} lines ({lines[0] / (wall + 2):,.0f}/s), "
              f"{reps[0]} reps landed, terminal output {out_rate / 1024:,.0f} KiB/s")
        report("idle", idle)
        report("load", loaded)
        if engine_ms:
            print(f"  load  of which the stand-in engine (journal append + fsync): "
                  f"p50 {pct(engine_ms, 50):.1f} ms  p99 {pct(engine_ms, 99):.1f} ms")
        xs = loaded["f"] + loaded["w"]
        print(f"  load  all keys p50 {pct(xs, 50):.1f} ms  p99 {pct(xs, 99):.1f} ms  "
              f"(target p99 < 100 ms: {'met' if pct(xs, 99) < 100 else 'NOT met'})")
        print(f"  UI CPU {cpu / wall * 100:.1f} % of one core over {wall:.1f} s")
        busy = os.getloadavg()[0]
        print(f"  box: {os.cpu_count()} CPUs, load average {busy:.1f}; a thread sleeping 5 ms wakes "
              f"p50 {pct(late, 50):.1f} ms / p99 {pct(late, 99):.1f} ms late (scheduling delay)")
        step = max(1, len(rss) // 10)
        samples = " ".join(f"{x / 1024:.1f}" for x in rss[::step])
        print(f"  UI RSS MiB every {step} s: {samples}")
        half = len(rss) // 2
        print(f"  UI RSS start {rss[0] / 1024:.1f} MiB, end {rss[-1] / 1024:.1f} MiB, "
              f"max {max(rss) / 1024:.1f} MiB; first-half mean {statistics.fmean(rss[:half]) / 1024:.1f}"
              f" MiB, second-half mean {statistics.fmean(rss[half:]) / 1024:.1f} MiB")
        os.write(master, b"q")
        ui.wait(timeout=20)
        return 0
    finally:
        if ui.poll() is None:
            ui.terminate()
            ui.wait(timeout=10)
        stand_in.server.close()
        journal.close()
        os.close(master)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
