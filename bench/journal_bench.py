"""Benchmark (not a test): a day-long journal read by ``ruler attach``, ``status`` and ``report``.

    .venv/bin/python bench/journal_bench.py [--times 100] [--flood 30] [--keep DIR]

It builds a run directory whose journal is the recorded demo run (tests/fixtures/runs/demo-smollm2,
a real headless run of campaigns/demo-smollm2.yaml on the testbed: 1,057 events, 28 rows) with its
sessions repeated ``--times`` times: each repeat renames the sessions (s1 -> s1r7), shifts the
times and renumbers the events, so the journal stays one gapless run of 200 sessions and 2,800
rows; throughput.csv repeats its rows the same way, and each repeated window's receipts are links
to the recorded window's. The last ``run_finished`` is left out: the run is still going, as a
console attached to a day-long campaign sees it.

It prints, each command in a process of its own as an operator runs it:
- ``ruler attach``: seconds from the command to the first full screen (the status line says
  "attached"), on a pseudo-terminal, and the console's RSS then;
- ``ruler status --json``, ``ruler report``: wall seconds (best and worst of ``--rounds``);
  ``ruler report`` twice a round: with no chart drawn before (a first report: every chart drawn),
  then again (each chart's values unchanged: kept, see results/README.md);
- the console's RSS under the flood of bench/ui_bench.py (a boot log growing at 10,000 lines/s,
  reps landing every 0.5 s) for ``--flood`` seconds, on this journal: start and end.

Each command runs with its bytecode cached, as an installed ruler runs: PYTHONDONTWRITEBYTECODE,
if set, is dropped for them (with it, every module of the tree is compiled again at each start:
0.05-0.1 s of attach), and the console is opened once before it is timed.

Each figure is printed beside its target; nothing is asserted. The readers find the snapshot of
the fold (``state.snapshot.json``) the engine leaves when it stops (written here by the journal's
writer, opened and closed as a resume does); ``--full-fold`` first times them without it, each
folding the whole journal. Every figure is wall time on whatever box runs it: the load average
is printed beside them.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import resource
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
sys.path.insert(0, str(ROOT / "bench"))

import ui_bench  # noqa: E402

from engine.record import results, snapshot  # noqa: E402
from engine.record.snapshot import fold_journal  # noqa: E402
from engine.record.writer import JournalWriter  # noqa: E402

RECORDED = ROOT / "tests" / "fixtures" / "runs" / "demo-smollm2"
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # see the docstring
TARGETS = {"attach": 1.0, "status": 0.3, "report": 5.0}


def renamed(text: str, sessions: dict[str, str]) -> str:
    """A receipt path of a recorded window (``windows/s1-ctx/...``) as the repeat's window's."""
    for old, new in sessions.items():
        text = text.replace(f"windows/{old}-", f"windows/{new}-")
    return text


def build(run: Path, times: int) -> int:
    """The repeated run directory; returns its journal's events."""
    events = [json.loads(x) for x in (RECORDED / results.JOURNAL).read_text().splitlines()]
    head, body = events[0], [e for e in events[1:] if e["kind"] != "run_finished"]
    span = body[-1]["ts"] - head["ts"] + 1.0
    run.mkdir(parents=True)
    for name in ("campaign.yaml", "env.json", "prompts.json", "drift.json"):
        shutil.copy(RECORDED / name, run / name)
    (run / "windows").mkdir()
    csv_lines = (RECORDED / results.THROUGHPUT).read_text().splitlines(keepends=True)
    out_csv = [csv_lines[0]]
    sessions: dict[str, list[str]] = {}
    lines: list[str] = []
    for k in range(times):
        names = {s: f"{s}r{k + 1}" for s in head["sessions"]}
        for old, new in names.items():
            sessions[new] = head["sessions"][old]
            for w in head["sessions"][old]:
                if (RECORDED / "windows" / f"{old}-{w}").exists():
                    os.symlink(RECORDED / "windows" / f"{old}-{w}", run / "windows" / f"{new}-{w}")
        for e in body:
            e = dict(e, ts=round(e["ts"] + k * span, 3))
            if "session" in e:
                e["session"] = names[e["session"]]
            for key in ("file", "log", "source"):
                if isinstance(e.get(key), str):
                    e[key] = renamed(e[key], names)
            lines.append(json.dumps(e, separators=(",", ":")))
        for line in csv_lines[1:]:
            session, rest = line.split(",", 1)
            out_csv.append(names[session] + "," + renamed(rest, names))
    first = dict(head, sessions=sessions)
    lines.insert(0, json.dumps(first, separators=(",", ":")))
    # Renumbered after the repeats are laid out: one gapless run.
    with open(run / results.JOURNAL, "w") as f:
        for seq, line in enumerate(lines, 1):
            f.write('{"seq":' + str(seq) + "," + line.split(",", 1)[1] + "\n")
    (run / results.THROUGHPUT).write_text("".join(out_csv))
    return len(lines)


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def ruler(*args: str) -> tuple[float, float, str]:
    """Wall and CPU seconds of one ``ruler`` command, in a process of its own, and its output."""
    t0, c0 = time.perf_counter(), children_cpu()
    out = subprocess.run([sys.executable, "-m", "engine", *args], cwd=ROOT, env=ENV,
                         capture_output=True, text=True, check=False)
    took, cpu = time.perf_counter() - t0, children_cpu() - c0
    if out.returncode != 0:
        raise SystemExit(f"ruler {' '.join(args)} exited {out.returncode}:\n{out.stderr[-2000:]}")
    return took, cpu, out.stdout


def attach(run: Path, size: tuple[int, int]
           ) -> tuple[float, float, float, subprocess.Popen[bytes], int]:
    """Seconds from ``ruler attach`` to its first full screen (the status line says "attached":
    the journal and the shown log read to their end, the screen drawn), the CPU seconds it took
    (``ruler attach`` becomes the console: one process), its RSS (MiB) then, and the console with
    its terminal, left running."""
    cols, rows = size
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    env = {k: v for k, v in ENV.items() if k not in ("COLORTERM", "NO_COLOR", "TEXTUAL")}
    env["TERM"] = "xterm-256color"
    t0 = time.perf_counter()
    ui = subprocess.Popen([sys.executable, "-m", "engine", "attach", str(run)], cwd=ROOT, env=env,
                          stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    screen = ui_bench.Screen(master)
    if not screen.wait_for("attached:", 0, timeout=120):
        ui.kill()
        raise SystemExit("the console never said 'attached:'; output tail:\n" + screen.text[-2000:])
    took = time.perf_counter() - t0
    return took, ui_bench.cpu_s(ui.pid), ui_bench.rss_kib(ui.pid) / 1024, ui, master


def quit_console(ui: subprocess.Popen[bytes], master: int) -> None:
    os.write(master, b"q")
    try:
        ui.wait(timeout=20)
    except subprocess.TimeoutExpired:
        ui.kill()
        ui.wait()
    os.close(master)


def flood(run: Path, ui: subprocess.Popen[bytes], seconds: float, rate: int) -> list[int]:
    """The console's RSS (KiB) every second of ``seconds``, after 2 s of warm-up, while the
    followed window's boot log grows at ``rate`` lines a second and a rep lands every 0.5 s:
    bench/ui_bench.py's load, on this run's last window (booted again for it)."""
    st = fold_journal(run / results.JOURNAL)
    ws = st.windows[st.order[-1]]
    (run / "windows" / ws.key).unlink()  # a link to the recorded window: this one grows its own
    log = run / "windows" / ws.key / "boot.log"
    log.parent.mkdir()
    lock = threading.Lock()
    journal = JournalWriter(run / results.JOURNAL)
    journal.append("window_started", session=ws.session, window=ws.window, axis=ws.axis,
                   runtime="process", plan={}, tag="", log=f"windows/{ws.key}/boot.log")
    stop = threading.Event()
    lines, reps = [0], [0]

    class Here:  # ui_bench's reps, on the followed window (its s2-control is the 1x run's)
        def append(self, kind: str, **data: Any) -> None:
            journal.append(kind, **{**data, "session": ws.session, "window": ws.window})

    threads = [threading.Thread(target=ui_bench.grow_log, args=(log, rate, stop, lines)),
               threading.Thread(target=ui_bench.land_reps, args=(Here(), lock, stop, reps, 0.5))]
    for t in threads:
        t.start()
    time.sleep(2.0)
    rss = [ui_bench.rss_kib(ui.pid)]
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(1.0)
        rss.append(ui_bench.rss_kib(ui.pid))
    stop.set()
    for t in threads:
        t.join()
    journal.close()
    print(f"  flood: boot.log +{lines[0]:,} lines ({lines[0] / (seconds + 2):,.0f}/s), "
          f"{reps[0]} reps landed, on {ws.key}")
    return rss


def figures(label: str, run: Path, rounds: int, size: tuple[int, int]) -> None:
    def line(what: str, runs: list[tuple[float, float]], target: float) -> str:
        best = min(runs)
        return (f"  {what}: best {best[0]:.2f} s (CPU {best[1]:.2f} s), worst {max(runs)[0]:.2f} s "
                f"of {len(runs)}  (target < {target} s)")

    quit_console(*attach(run, size)[3:])  # its modules' bytecode written, as after an install
    status = [ruler("status", "--json", str(run))[:2] for _ in range(rounds)]
    report, again = [], []
    for _ in range(rounds):
        for chart in run.glob("report-*.png"):  # each round draws them: a first report
            chart.unlink()
        report.append(ruler("report", str(run))[:2])
        again.append(ruler("report", str(run))[:2])  # the charts' values unchanged: kept
    attached = []
    for _ in range(rounds):
        took, cpu, rss, ui, master = attach(run, size)
        quit_console(ui, master)
        attached.append((took, cpu, rss))
    print(f"{label}:")
    print(line(f"ruler attach, to the first full screen ({size[0]}x{size[1]})",
               [a[:2] for a in attached], TARGETS["attach"])
          + f"; RSS then {min(attached)[2]:.1f} MiB")
    print(line("ruler status --json", status, TARGETS["status"]))
    print(line("ruler report, its charts drawn", report, TARGETS["report"]))
    print(line("ruler report again, the charts kept (their values unchanged)", again,
               TARGETS["report"]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--times", type=int, default=100, help="repeats of the recorded run's sessions")
    ap.add_argument("--rounds", type=int, default=3, help="runs of each command")
    ap.add_argument("--flood", type=float, default=30.0, help="seconds of flood (0: none)")
    ap.add_argument("--rate", type=int, default=10_000, help="boot.log lines per second")
    ap.add_argument("--size", default="120x40", help="the console's terminal, COLSxROWS")
    ap.add_argument("--full-fold", action="store_true",
                    help="also time each command with the snapshot deleted (the whole journal folded)")
    ap.add_argument("--keep", metavar="DIR", help="build the run directory in DIR and keep it")
    args = ap.parse_args()
    cols, rows = (int(x) for x in args.size.split("x"))

    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="ruler-journal-bench-"))
    run = tmp / "run"
    try:
        t0 = time.perf_counter()
        n = build(run, args.times)
        print(f"journal: {n:,} events, {(run / results.JOURNAL).stat().st_size / 2**20:.1f} MiB: the "
              f"sessions of {RECORDED.relative_to(ROOT)} x {args.times}; built in "
              f"{time.perf_counter() - t0:.1f} s")
        print(f"box: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start "
              "(every figure is wall time: a busy box makes it longer)")
        s = json.loads(ruler("status", "--json", str(run))[2])
        print(f"run: {s['rows']['total']:,} rows, {len(s['windows'])} windows")
        if args.full_fold:
            figures("full fold (no snapshot)", run, args.rounds, (cols, rows))
        JournalWriter(run / results.JOURNAL).close()  # the snapshot the engine leaves when it stops
        snap = snapshot.path_of(run / results.JOURNAL)
        print(f"snapshot: {snap.stat().st_size / 2**20:.1f} MiB, covering "
              f"{snapshot.load(run / results.JOURNAL)[0].lines:,} lines")  # type: ignore[union-attr]  # just written
        figures("with the engine's snapshot", run, args.rounds, (cols, rows))
        if args.flood:
            ui, master = attach(run, (cols, rows))[3:]
            try:
                rss = flood(run, ui, args.flood, args.rate)
            finally:
                quit_console(ui, master)
            half = len(rss) // 2
            print(f"  console RSS under the flood, MiB every {max(1, len(rss) // 10)} s: "
                  + " ".join(f"{x / 1024:.1f}" for x in rss[:: max(1, len(rss) // 10)]))
            print(f"  console RSS start {rss[0] / 1024:.1f} MiB, end {rss[-1] / 1024:.1f} MiB, "
                  f"max {max(rss) / 1024:.1f} MiB; first-half mean "
                  f"{statistics.fmean(rss[:half]) / 1024:.1f}, second-half mean "
                  f"{statistics.fmean(rss[half:]) / 1024:.1f}  (target: flat)")
        print(f"box: load average {os.getloadavg()[0]:.1f} at the end")
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
