"""Benchmark (not a test): what a key costs the console on a day-long run, in CPU.

    .venv/bin/python bench/key_bench.py [--times 100] [--size 200x50] [--keys 30] [--run DIR]

It builds bench/journal_bench.py's day-long run (the recorded demo's sessions ``--times`` times:
at 100, 105,501 events, 2,800 rows, 800 windows; or takes ``--run``), opens the console on it as
an operator does (``python -m tui.app RUN`` on a pseudo-terminal, TERM=xterm-256color, real
driver), waits for the first full screen ("attached"), then presses keys one at a time: each is
written to the terminal and the console's output read until it has been quiet for 0.2 s (its
frame drawn). A key's CPU is the console process's user+system time over that span, less what
the console spends idle over as long (its clock redraws the header each second; measured before
the keys, over ``--idle`` seconds); its latency, from the key to the last byte of its frame.

Keys: up and down on the windows list (each shows another window: the reps table, the log, the
facts and the chart change), page up and down there, the same on the reps table (tab first),
``f`` (follow on and off: the log pane's title alone). The target is < 30 ms of CPU a key at
200x50 (issue 47). Every figure is CPU time on whatever box runs it: the load average is printed
beside them; nothing is asserted.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import journal_bench, ui_bench  # noqa: E402
from engine.record.writer import JournalWriter  # noqa: E402

DOWN, UP, TAB, PGDN, PGUP = b"\x1b[B", b"\x1b[A", b"\t", b"\x1b[6~", b"\x1b[5~"


def quiet(screen: ui_bench.Screen, since: int, gap: float, timeout: float) -> float:
    """Seconds from now until the output after ``since`` has been quiet for ``gap`` (the last
    byte's time), having seen at least one byte; ``timeout`` at most."""
    t0 = time.monotonic()
    last, seen = t0, since
    while time.monotonic() - t0 < timeout:
        time.sleep(0.01)
        now = screen.bytes  # a cursor's move may change colours alone
        if now != seen:
            seen, last = now, time.monotonic()
        elif seen != since and time.monotonic() - last >= gap:
            break
    return last - t0


def press(master: int, screen: ui_bench.Screen, pid: int, key: bytes, idle_rate: float
          ) -> tuple[float, float, float]:
    """(CPU ms less idle, raw CPU ms, ms to the frame's last byte) of one key."""
    since, c0, t0 = screen.bytes, ui_bench.cpu_s(pid), time.monotonic()
    os.write(master, key)
    took = quiet(screen, since, 0.2, 5.0)
    span = time.monotonic() - t0
    raw = (ui_bench.cpu_s(pid) - c0) * 1000
    return raw - idle_rate * span * 1000, raw, took * 1000


def line(name: str, xs: list[tuple[float, float, float]]) -> str:
    net, raw, ms = ([x[i] for x in xs] for i in range(3))
    return (f"  {name:28} n={len(xs):3}  CPU less idle: median {statistics.median(net):6.1f} ms, "
            f"max {max(net):6.1f} ms (raw median {statistics.median(raw):6.1f});  "
            f"to the frame: median {statistics.median(ms):6.1f} ms")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--times", type=int, default=100, help="repeats of the recorded run's sessions")
    ap.add_argument("--run", metavar="DIR", help="a run directory to open instead of building one")
    ap.add_argument("--size", default="200x50", help="the console's terminal, COLSxROWS")
    ap.add_argument("--keys", type=int, default=30, help="presses of each key")
    ap.add_argument("--idle", type=float, default=6.0, help="seconds the idle console is measured")
    ap.add_argument("--profile", metavar="FILE", help="run the console under cProfile, stats to FILE")
    args = ap.parse_args()
    cols, rows = (int(x) for x in args.size.split("x"))
    tmp = Path(tempfile.mkdtemp(prefix="ruler-key-bench-"))
    try:
        if args.run:
            run = Path(args.run)
        else:
            run = tmp / "run"
            n = journal_bench.build(run, args.times)
            JournalWriter(run / "journal.jsonl").close()  # the snapshot the engine leaves
            print(f"journal: {n:,} events (the demo's sessions x {args.times})")
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        env = {k: v for k, v in journal_bench.ENV.items() if k not in ("COLORTERM", "NO_COLOR", "TEXTUAL")}
        env["TERM"] = "xterm-256color"
        prof = ["-m", "cProfile", "-o", args.profile] if args.profile else []
        t0 = time.monotonic()
        ui = subprocess.Popen([sys.executable, *prof, "-m", "tui.app", str(run)], cwd=ROOT, env=env,
                              stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
        os.close(slave)
        screen = ui_bench.Screen(master)
        try:
            if not screen.wait_for("attached:", 0, timeout=300):
                print("the console never said 'attached:'; output tail:\n" + screen.text[-2000:])
                return 1
            print(f"console on a {cols}x{rows} pty: attached in {time.monotonic() - t0:.1f} s")
            quiet(screen, screen.bytes - 1, 1.0, 30.0)
            c0, w0 = ui_bench.cpu_s(ui.pid), time.monotonic()
            time.sleep(args.idle)
            idle_rate = (ui_bench.cpu_s(ui.pid) - c0) / (time.monotonic() - w0)
            load0 = os.getloadavg()[0]
            print(f"idle: {idle_rate * 100:.1f} % of a core (the clock's redraw, the probe, the "
                  f"collector); load average {load0:.1f}")
            got: dict[str, list[tuple[float, float, float]]] = {}

            def keys(name: str, seq: list[bytes]) -> None:
                for k in seq:
                    got.setdefault(name, []).append(press(master, screen, ui.pid, k, idle_rate))
                    time.sleep(0.05)

            # The cursors start on the live window and row, the last ones: up first.
            keys("windows list: up, down", [UP, DOWN] * (args.keys // 2))
            keys("windows list: page up, down", [PGUP, PGDN] * (args.keys // 4))
            keys("f (the log's follow)", [b"f"] * args.keys)
            for k in (UP, UP, TAB):  # a window with rows (the live one was rejected)
                press(master, screen, ui.pid, k, idle_rate)
            keys("reps table: up, down", [UP, DOWN] * (args.keys // 2))
            for name, xs in got.items():
                print(line(name, xs))
            every = [x for xs in got.values() for x in xs]
            worst = statistics.median(x[0] for x in every)
            print(f"  all keys: median {worst:.1f} ms of CPU less idle (target < 30 ms); load average "
                  f"{load0:.1f} before the keys, {os.getloadavg()[0]:.1f} after")
            os.write(master, b"q")
            ui.wait(timeout=30)
            return 0
        finally:
            if ui.poll() is None:
                ui.terminate()
                ui.wait(timeout=10)
            os.close(master)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
