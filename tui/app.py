"""The ruler console: a thin client of a run directory.

It learns everything from ``journal.jsonl`` and acts only through ``control.sock``. This App holds
the I/O: thread workers (harlequin's rule: they never touch a widget) that follow the journal and
the log, probe the engine, send its commands and write the report; each posts what it got to the
run screen (tui.screens.run), which folds it, draws it and owns every change of the screen. Quitting
leaves the engine running; reattaching takes the journal's snapshot (engine.record.snapshot), folds
the events after it and follows it.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from textual import work
from textual.app import App, SystemCommand
from textual.screen import Screen
from textual.worker import get_current_worker

from engine import control
from tui.core.follow import Follower, Link, out_of_sight, probe
from tui.core.verbs import VERBS
from tui.plain import farewell, follow_plain
from tui.screens.messages import CaughtUp, Followed, Linked, Replied, Report, Reported, Send
from tui.screens.run import RunScreen

Probe = Callable[[Path, "int | None"], Link]
Sender = Callable[..., dict[str, Any]]
GC_EVERY = 1.0  # seconds between the console's full collections (tui.core.follow.out_of_sight)


class RulerConsole(App[None]):
    """The console on one run directory.

    ``clock`` gives the wall time for elapsed/remaining (tests freeze it); ``probe`` checks the
    engine (None: never, the header says "engine ?"); ``send`` is ``engine.control.send``;
    ``pager`` runs a pager's argv (by default in the terminal, the console suspended meanwhile).
    """

    CSS_PATH = Path(__file__).with_name("app.tcss")
    TITLE = "ruler"
    ENABLE_COMMAND_PALETTE = True
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (36, "-tall")]

    def __init__(self, run_dir: Path, *, clock: Callable[[], float] = time.time,
                 probe: Probe | None = probe, probe_interval: float = 2.0,
                 send: Sender = control.send, max_log_lines: int = 5000,
                 follow_interval: float = 0.1, pager: Callable[[list[str]], None] | None = None) -> None:
        super().__init__()
        self.run_dir = Path(run_dir)
        self.probe, self.probe_interval, self.send = probe, probe_interval, send
        self.follower = Follower(self.run_dir, lambda b: self.main.post_message(Followed(b)),
                                 interval=follow_interval, max_log_lines=max_log_lines)
        self.main = RunScreen(self.run_dir, self.follower, clock=clock, pager=pager or self._run_pager,
                              max_log_lines=max_log_lines)
        self._frozen = False  # out of the collector's sight once caught up

    def get_default_screen(self) -> Screen[Any]:
        return self.main

    def on_mount(self) -> None:
        self._follow()
        if self.probe is not None:
            self._probe_loop()

    # ------------------------------------------------------------ workers (no widgets in here)

    @work(thread=True, exclusive=True, group="follow", exit_on_error=False)
    def _follow(self) -> None:
        worker = get_current_worker()
        self.follower.run(lambda: worker.is_cancelled)

    @work(thread=True, exclusive=True, group="probe", exit_on_error=False)
    def _probe_loop(self) -> None:
        worker = get_current_worker()
        assert self.probe is not None
        while not worker.is_cancelled:
            link = self.probe(self.run_dir, self.main.state.pid)
            self.main.post_message(Linked(link))
            # Retry a lost engine every second; a healthy one is asked less often.
            deadline = time.monotonic() + (self.probe_interval if link.connected else 1.0)
            while time.monotonic() < deadline and not worker.is_cancelled:
                time.sleep(0.05)

    def on_send(self, message: Send) -> None:
        self._send(message.cmd, message.args)

    @work(thread=True, group="command", exit_on_error=False)
    def _send(self, cmd: str, args: list[str]) -> None:
        try:
            reply = self.send(self.run_dir, cmd, args, timeout=5.0)
        except (OSError, ValueError) as e:
            reply = {"ok": False, "error": f"no engine answers on {control.SOCKET} "
                                           f"({getattr(e, 'strerror', None) or e})"}
        self.main.post_message(Replied(cmd, args, reply))

    def on_report(self, message: Report) -> None:
        self._report(message.args)

    @work(thread=True, exclusive=True, group="report", exit_on_error=False)
    def _report(self, args: list[str]) -> None:
        """``ruler report`` on this run, as its own process (matplotlib stays out of the console)."""
        proc = subprocess.run([sys.executable, "-m", "engine", "report", str(self.run_dir), *args],
                              capture_output=True, text=True, check=False)
        self.main.post_message(Reported(proc.returncode, proc.stdout, proc.stderr))

    def _run_pager(self, argv: list[str]) -> None:
        with self.suspend():
            subprocess.run(argv, check=False)

    def on_caught_up(self, message: CaughtUp) -> None:
        if not self._frozen:
            self._frozen = True
            out_of_sight()
            self.set_interval(GC_EVERY, lambda: gc.collect())  # Textual takes no builtin

    # ------------------------------------------------------------ the command palette

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        # Textual's own, less those ruler has (quit, keys) or does its own way (the screenshot).
        for c in super().get_system_commands(screen):
            if c.title not in ("Quit", "Keys", "Screenshot"):
                yield c
        for verb in VERBS:
            if verb.title:
                yield SystemCommand(verb.entry, verb.about, getattr(self.main, f"action_{verb.name}"))


BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def one_blas_thread(env: dict[str, str] | os._Environ[str] = os.environ) -> None:
    """The console's maths (the judgement's fit of every boot) is on small matrices, where a BLAS's
    thread pool costs more than it gives: a day-long run's first judgement took 0.9 s of CPU with
    OpenBLAS's threads on two busy cores, 0.4 s with one. The BLAS reads it once, as numpy is
    first imported (the console imports it only to judge); an operator's own setting is kept."""
    for var in BLAS_THREADS:
        env.setdefault(var, "1")


def run_console(run_dir: Path) -> int:
    """Open the console on ``run_dir``; returns when the operator quits. The engine is left alone."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        return follow_plain(Path(run_dir))
    one_blas_thread()
    app = RulerConsole(Path(run_dir))
    app.run()
    print(farewell(Path(run_dir), app.main.state))
    return app.return_code or 0


if __name__ == "__main__":
    sys.exit(run_console(Path(sys.argv[1])))
