"""Benchmark (not a test): a day-long run read by ``ruler attach``, ``status``, ``report``,
``compare`` and ``validate --explain``, with the fold's snapshot and without it, at several sizes.

    .venv/bin/python bench/journal_bench.py [--times 1,10,100] [--rounds 3] [--flood 30] [--keep DIR]
                                            [--commands attach,judged,status,...]

For each size it builds a run directory whose journal is the recorded demo run
(tests/fixtures/runs/demo-smollm2, a real headless run of campaigns/demo-smollm2.yaml on the
testbed: 1,057 events, 28 rows) with its sessions repeated ``--times`` times: each repeat renames
the sessions (s1 -> s1r7), shifts the times and renumbers the events, so the journal stays one
gapless run (at 100 times: 105,501 events, 200 sessions, 800 windows, 2,800 rows);
throughput.csv repeats its rows the same way, and each repeated window's receipts are links to
the recorded window's. The last ``run_finished`` is left out: the run is still going, as a
console attached to a day-long campaign sees it (its engine is gone: the console says so). A copy
of the run directory is what ``ruler compare`` compares it with.

Each command runs in a process of its own as an operator runs it, ``--rounds`` times, twice:
- with the snapshot of the fold (``state.snapshot.json``) the engine leaves when it stops
  (written here by the journal's writer, opened and closed as a resume does);
- without it: deleted before each command, as a run an older ruler wrote, a copied one or one
  whose snapshot was refused reads; the command folds the whole journal and leaves the snapshot
  for the next reader (its cost is in the figure).
The figures: ``ruler attach`` to its first full screen on a pseudo-terminal (the status line says
"attached:", or, the engine being gone, the run's outcome counting every row: the whole journal
on screen) and the console's CPU then; the same to the windows' calls on screen too (the run is
judged behind the first screen, which says "…" for them); ``ruler status --json``; ``ruler
report`` with no chart drawn before (each chart drawn) and again (the charts kept, their values
unchanged); ``ruler compare RUN COPY``; ``ruler validate --explain RUN/campaign.yaml`` from
another directory. ``--commands`` takes some of them only.
Each is the best wall time of the rounds with the command's CPU time beside it, then a table of
every size side by side, each command's goal last (issue 47), and the load average: every figure
is wall time on whatever box runs it, a busy one makes it longer (CPU time less so). With
``--flood``, the console's RSS under bench/ui_bench.py's flood on the largest run.

Each command runs with its bytecode cached, as an installed ruler runs: PYTHONDONTWRITEBYTECODE,
if set, is dropped for them (with it, every module of the tree is compiled again at each start:
0.05-0.1 s of attach), and the console is opened once before it is timed. Nothing is asserted.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import ui_bench  # noqa: E402
from engine.method.verdict import Call  # noqa: E402
from engine.record import results, snapshot  # noqa: E402
from engine.record.snapshot import fold_journal  # noqa: E402
from engine.record.writer import JournalWriter  # noqa: E402
from engine.words import plural  # noqa: E402

RECORDED = ROOT / "tests" / "fixtures" / "runs" / "demo-smollm2"
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # see the docstring
# Each figure's command and its goal (issue 47): seconds, validate's its exit code; the calls
# filled in behind the first screen have none of their own.
COMMANDS = {"attach": "< 1 s", "judged": "", "status": "< 0.3 s", "report": "< 5 s",
            "report again": "< 5 s", "compare": "< 5 s", "validate": "exit 0"}
LABELS = {"attach": "ruler attach, first full screen", "judged": "ruler attach, the calls in too",
          "status": "ruler status --json",
          "report": "ruler report (charts drawn)", "report again": "ruler report (charts kept)",
          "compare": "ruler compare RUN COPY", "validate": "ruler validate --explain (frozen)"}
FROZEN = ("campaign.yaml", "env.json", "prompts.json", "quality.json", "drift.json")


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
    for name in FROZEN:
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


def ruler(*args: str, cwd: Path = ROOT) -> tuple[float, float, str]:
    """Wall and CPU seconds of one ``ruler`` command, in a process of its own, and its output."""
    t0, c0 = time.perf_counter(), children_cpu()
    out = subprocess.run([sys.executable, "-m", "engine", *args], cwd=cwd, env=ENV,
                         capture_output=True, text=True, check=False)
    took, cpu = time.perf_counter() - t0, children_cpu() - c0
    if out.returncode != 0:
        raise SystemExit(f"ruler {' '.join(args)} exited {out.returncode}:\n{out.stderr[-2000:]}")
    return took, cpu, out.stdout


def wait_any(screen: ui_bench.Screen, needles: tuple[str, ...], timeout: float) -> bool:
    """True once any of ``needles`` has arrived."""
    deadline = time.monotonic() + timeout
    with screen.cond:
        while not any(n in screen.text for n in needles):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            screen.cond.wait(left)
    return True


def attach(run: Path, size: tuple[int, int], rows: int, calls: bool = False
           ) -> tuple[float, float, float, subprocess.Popen[bytes], int]:
    """Seconds from ``ruler attach`` to its first full screen (the status line says "attached:",
    the journal and the shown log read to their end; or, its engine gone, the run's outcome
    counting every one of its ``rows``), the CPU seconds it took (``ruler attach`` becomes the
    console: one process), its RSS (MiB) then, and the console with its terminal, left running.
    With ``calls``, to the windows' calls on screen too (judged behind the first screen, which
    says "…" for them: the demo's windows each have one)."""
    cols, lines = size
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", lines, cols, 0, 0))
    env = {k: v for k, v in ENV.items() if k not in ("COLORTERM", "NO_COLOR", "TEXTUAL")}
    env["TERM"] = "xterm-256color"
    t0 = time.perf_counter()
    ui = subprocess.Popen([sys.executable, "-m", "engine", "attach", str(run)], cwd=ROOT, env=env,
                          stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    screen = ui_bench.Screen(master)
    if not wait_any(screen, ("attached:", f"{plural(rows, 'row')}: "), timeout=300):
        ui.kill()
        raise SystemExit("the console never showed the whole run; output tail:\n" + screen.text[-2000:])
    if calls and not wait_any(screen, tuple(Call), timeout=300):
        ui.kill()
        raise SystemExit("the console never showed the calls; output tail:\n" + screen.text[-2000:])
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


Figure = tuple[float, float]  # best wall seconds of the rounds, the CPU seconds of that round


@dataclass
class Sized:
    """One size's run directory, its copy and what they hold."""

    times: int
    run: Path
    copy: Path
    events: int
    rows: int
    windows: int
    load: float = 0.0  # the load average when its figures were taken
    figures: dict[tuple[str, bool], Figure] = field(default_factory=dict)  # (command, snapshot)
    behind: list[float] = field(default_factory=list)  # seconds until a snapshot written behind


def snapshots(sized: Sized, keep: bool) -> None:
    """Each journal with the snapshot its engine leaves when it stops, or none."""
    for d in (sized.run, sized.copy):
        path = snapshot.path_of(d / results.JOURNAL)
        if keep and not path.exists():
            JournalWriter(d / results.JOURNAL).close()
        elif not keep:
            path.unlink(missing_ok=True)


def command(sized: Sized, what: str, size: tuple[int, int]) -> tuple[float, float]:
    run = sized.run
    if what in ("attach", "judged"):
        took, cpu, _, ui, master = attach(run, size, sized.rows, calls=what == "judged")
        quit_console(ui, master)
        return took, cpu
    if what == "report":
        for chart in run.glob("report-*.png"):  # a first report: every chart drawn
            chart.unlink()
    args = {"status": ("status", "--json", str(run)), "report": ("report", str(run)),
            "report again": ("report", str(run)), "compare": ("compare", str(run), str(sized.copy)),
            "validate": ("validate", "--explain", str(run / "campaign.yaml"))}[what]
    kept = snapshot.path_of(run / results.JOURNAL)
    before = kept.exists()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as elsewhere:  # validate: not from the campaign's folder
        figure = ruler(*args, cwd=Path(elsewhere) if what == "validate" else ROOT)[:2]
    if what == "status" and not before:
        # status answers first and its child writes the snapshot after: waited for (the next
        # round must not find it), and said, so that no work hides behind the figure.
        behind = wait_file(kept, 30)
        sized.behind.append(behind - t0 if behind is not None else float("nan"))
    return figure


def wait_file(path: Path, timeout: float) -> float | None:
    """perf_counter() once ``path`` exists (a rename made by another process: polled), or None."""
    deadline = time.perf_counter() + timeout
    while not path.exists():
        if time.perf_counter() > deadline:
            return None
        time.sleep(0.005)
    return time.perf_counter()


def measure(sized: Sized, rounds: int, size: tuple[int, int], commands: list[str]) -> None:
    sized.load = os.getloadavg()[0]
    quit_console(*attach(sized.run, size, sized.rows)[3:])  # its bytecode written, as after an install
    for keep in (True, False):
        for what in commands:
            runs = []
            for _ in range(rounds):
                snapshots(sized, keep)
                runs.append(command(sized, what, size))
            sized.figures[what, keep] = min(runs)
            print(f"  {sized.times}x {LABELS[what]}, {'with the snapshot' if keep else 'without it'}: "
                  f"best {min(runs)[0]:.2f} s (CPU {min(runs)[1]:.2f} s), worst {max(runs)[0]:.2f} s "
                  f"of {rounds}", flush=True)
            if sized.behind:
                print(f"    its snapshot written behind it, in place {min(sized.behind):.2f}-"
                      f"{max(sized.behind):.2f} s after the command began", flush=True)
                sized.behind.clear()


def table(sizes: list[Sized], commands: list[str]) -> list[str]:
    """Every figure side by side: each size with the snapshot and without it, the goal last."""
    cols = [(s, keep) for s in sizes for keep in (True, False)]
    head = ["command", *(f"{s.times}x {'snapshot' if keep else 'no snapshot'}" for s, keep in cols),
            "goal"]
    body = []
    for what in commands:
        goal = COMMANDS[what]
        cells = [f"{s.figures[what, keep][0]:.2f} s ({s.figures[what, keep][1]:.2f})" for s, keep in cols]
        body.append([LABELS[what], *cells, goal])
    body.append(["(events / rows; load average)"] + [
        f"{s.events:,} / {s.rows:,}; {s.load:.1f}" for s, _ in cols] + [""])
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    return ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |"
            for r in [head, ["-" * w for w in widths], *body]]


def flooded(sized: Sized, seconds: float, rate: int, size: tuple[int, int]) -> None:
    snapshots(sized, True)
    ui, master = attach(sized.run, size, sized.rows)[3:]
    try:
        rss = flood(sized.run, ui, seconds, rate)
    finally:
        quit_console(ui, master)
    half = len(rss) // 2
    print(f"  console RSS under the flood, MiB every {max(1, len(rss) // 10)} s: "
          + " ".join(f"{x / 1024:.1f}" for x in rss[:: max(1, len(rss) // 10)]))
    print(f"  console RSS start {rss[0] / 1024:.1f} MiB, end {rss[-1] / 1024:.1f} MiB, "
          f"max {max(rss) / 1024:.1f} MiB; first-half mean {statistics.fmean(rss[:half]) / 1024:.1f}, "
          f"second-half mean {statistics.fmean(rss[half:]) / 1024:.1f}  (target: flat)")


def pace() -> str:
    """How fast the box runs now, best of five: a bare interpreter's start and a fixed loop. The
    same box has run a figure 1.5 times apart an hour apart, idle both times: read each figure
    against the pace said beside it."""
    starts, loops = [], []
    for _ in range(5):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        starts.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        sum(range(10**7))
        loops.append(time.perf_counter() - t0)
    return f"a bare interpreter starts in {min(starts):.3f} s, 10**7 additions take {min(loops):.3f} s"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--times", default="1,10,100", help="sizes: repeats of the recorded run's sessions")
    ap.add_argument("--rounds", type=int, default=3, help="runs of each command")
    ap.add_argument("--flood", type=float, default=30.0,
                    help="seconds of flood on the largest run (0: none)")
    ap.add_argument("--rate", type=int, default=10_000, help="boot.log lines per second")
    ap.add_argument("--size", default="120x40", help="the console's terminal, COLSxROWS")
    ap.add_argument("--keep", metavar="DIR", help="build the run directories in DIR and keep them")
    ap.add_argument("--commands", default=",".join(COMMANDS),
                    help=f"which figures, comma-separated (default: all of {', '.join(COMMANDS)})")
    args = ap.parse_args()
    commands = args.commands.split(",")
    if not set(commands) <= set(COMMANDS):
        ap.error(f"--commands: not a figure: {', '.join(sorted(set(commands) - set(COMMANDS)))}")
    cols, lines = (int(x) for x in args.size.split("x"))
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="ruler-journal-bench-"))
    print(f"box: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start "
          "(every figure is wall time: a busy box makes it longer; CPU seconds in parentheses); "
          f"{pace()}", flush=True)
    sizes: list[Sized] = []
    try:
        for times in (int(x) for x in args.times.split(",")):
            run, copy = tmp / f"run-{times}x", tmp / f"copy-{times}x"
            t0 = time.perf_counter()
            events = build(run, times)
            shutil.copytree(run, copy, symlinks=True)
            s = json.loads(ruler("status", "--json", str(run))[2])
            sized = Sized(times, run, copy, events, s["rows"]["total"], len(s["windows"]))
            print(f"{times}x: {events:,} events, {(run / results.JOURNAL).stat().st_size / 2**20:.1f} MiB "
                  f"of journal, {sized.rows:,} rows, {sized.windows:,} windows: the sessions of "
                  f"{RECORDED.relative_to(ROOT)} x {times}; built in {time.perf_counter() - t0:.1f} s",
                  flush=True)
            measure(sized, args.rounds, (cols, lines), commands)
            sizes.append(sized)
        print()
        print("\n".join(table(sizes, commands)))
        if args.flood:
            print(f"flood on the {sizes[-1].times}x run:")
            flooded(sizes[-1], args.flood, args.rate, (cols, lines))
        print(f"box: load average {os.getloadavg()[0]:.1f} at the end; {pace()}")
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
