"""report.md from the sections, the charts beside it, and ``ruler report``'s entry point."""

from __future__ import annotations

import contextlib
import importlib.util
import multiprocessing
import sys
import traceback
from multiprocessing.connection import Connection
from pathlib import Path

from engine.errors import EXIT_ENGINE
from engine.files import Unwritable, check_file
from engine.record import results
from engine.report import acceptance, capacity, charts, html, stacks, steady, sweeps
from engine.report.methods import files, methods
from engine.report.run import ReportError, RunView, load_run
from engine.report.sections import controls, header, summary
from engine.report.windows import windows
from engine.sanitize import terminal

REPORT = "report.md"
CHARTS_SKIPPED = "charts skipped: install ruler[report]"


CAPTIONS = {"delta": "Each window against its session's control, per class and load: the delta of "
            "tok/s with its 95 % interval (filled: called an observable effect; hollow: not called, "
            "whatever its interval: the call is the campaign's, its reason in the tables)",
            "latency": "TTFT and TPOT against the load, a line per window (p50 solid, p99 dashed)",
            "tok-s": "Aggregate tok/s per window and class (bars: median rep; whiskers: the rep "
            "range)", "accept-pos": "Acceptance per draft position per class and load, a line per window "
            "(the control in black)", "acceptance": "Acceptance length and rate per class",
            "control-drift": "The control across sessions (whiskers: the rep range)",
            "trade": "Each swept value's delta against the control per class and load (bars: the "
            "95 % interval; filled: the campaign's verdict calls an effect)"}


def charts_section(view: RunView, charts: list[Path], note: str) -> list[str]:
    out = ["## Charts", ""]
    if note:
        return out + [note, ""]
    if not charts:
        return out + ["No chart: no throughput rows to draw.", ""]
    for path in charts:
        cap = next((v for k, v in CAPTIONS.items() if k in path.name), path.stem)
        out += [f"![{cap}]({path.relative_to(view.dir)})", "", f"*{cap}.*", ""]
    return out


def tables(view: RunView) -> tuple[list[str], list[str], list[str]]:
    """The sections before the charts (the run and its windows at a glance: what a reader looks
    for first, with the delta chart right after), the tables after them, and the methods last."""
    return ([*header(view), *summary(view)],
            [*controls(view), *windows(view), *acceptance.section(view), *stacks.section(view),
             *steady.section(view), *sweeps.section(view), *capacity.section(view)],
            [*methods(view), *files(view)])


def assemble(view: RunView, parts: tuple[list[str], list[str], list[str]], charts: list[Path],
             note: str) -> str:
    top, figures, after = parts
    return "\n".join([*top, *charts_section(view, charts, note), *figures, *after]).rstrip() + "\n"


def render(view: RunView, charts: list[Path], note: str) -> str:
    return assemble(view, tables(view), charts, note)


def _drawer(conn: Connection) -> None:
    """The drawing process: matplotlib imported while the run is read, then the charts it is sent
    drawn; it answers ("drawn", ""), ("skipped", why) or ("failed", the traceback)."""
    try:
        charts.warm()
        for job in conn.recv():
            charts.draw(job)
        conn.send(("drawn", ""))
    except EOFError:  # the report stopped (bad input): nothing to draw, no one to tell
        pass
    except OSError as e:  # a full disk, a read-only one: the report says so in a line
        conn.send(("oserror", (e.errno, e.strerror or str(e), e.filename)))
    except ImportError as e:
        conn.send(("skipped", CHARTS_SKIPPED) if (e.name or "").startswith("matplotlib")
                  else ("failed", traceback.format_exc()))  # a broken install of ours: a bug to see
    except BaseException:  # noqa: BLE001 - said to the report, which raises it there
        conn.send(("failed", traceback.format_exc()))
    finally:
        conn.close()


class Drawing:
    """The charts, drawn by a process of their own: forked as the report starts, it imports
    matplotlib while the run is read, then draws while the tables are written (on a day-long run
    matplotlib's import and drawing took as long as everything else together). Forked, it has the
    run as read; what it is sent is each chart's values. One process: the box this was measured
    on has two cores, shared; a chart each would import matplotlib three times for little."""

    def __init__(self) -> None:
        ctx = multiprocessing.get_context("fork")
        self.conn, theirs = ctx.Pipe()
        self.proc = ctx.Process(target=_drawer, args=(theirs,), daemon=True)
        self.proc.start()
        theirs.close()

    def draw(self, todo: list[charts.Job]) -> None:
        with contextlib.suppress(OSError):  # it has ended already: ``wait`` reads why
            self.conn.send(todo)

    def wait(self) -> str:
        """"" once every chart sent is drawn, or why there are none (the extra is missing)."""
        what: str
        said: str
        try:
            what, said = self.conn.recv()
        except EOFError:
            what, said = "failed", "it ended without a word"
        self.conn.close()
        self.proc.join()
        if what == "oserror":
            raise OSError(*said)
        if what == "failed":
            raise RuntimeError(f"drawing the charts failed (exit code {self.proc.exitcode}): {said}")
        return said

    def cancel(self) -> None:
        self.proc.kill()
        self.proc.join()
        self.conn.close()


def write_report(run_dir: str | Path, as_html: bool = False) -> tuple[Path, list[Path], str]:
    """report.md and the charts (and report.html with ``as_html``: engine.report.html); returns
    (report path, chart paths, a note when charts skipped).

    A chart whose PNG carries the key of the values it would be drawn from now is kept as it is:
    ``ruler report`` again on a growing run redraws only the charts whose rows changed, and
    does not import matplotlib when none did. The drawing process starts before the run is read
    when no report was written before (no chart carries a key), else once the charts to draw
    again are known."""
    extra = importlib.util.find_spec("matplotlib") is not None
    drawn_before = any(charts.stored_key(Path(run_dir) / f"report-{name}.png") for name in charts.CHARTS)
    drawing = Drawing() if extra and not drawn_before else None
    try:
        view = load_run(run_dir)
        every = charts.jobs(view) if extra else []
        todo = [job for job in every if charts.stored_key(job.path) != job.key]
        if drawing and not todo:
            drawing.cancel()
            drawing = None
        elif todo and not drawing:
            drawing = Drawing()
        for job in todo:  # a directory where a chart goes: said here, by name, before any drawing
            check_file(job.path)
        if drawing:
            drawing.draw(todo)
        parts = tables(view)
        note = drawing.wait() if drawing else "" if extra else CHARTS_SKIPPED
    except BaseException:
        if drawing:
            drawing.cancel()
        raise
    paths = [] if note else [job.path for job in every]
    path = view.dir / REPORT
    text = assemble(view, parts, paths, note)
    results.write_atomic(path, text)
    if as_html:
        html.write_html(view.dir, f"{view.name}: ruler report", text, paths)
    return path, paths, note


def cmd_report(run_dir: str, as_html: bool = False) -> int:
    try:
        path, charts, note = write_report(run_dir, as_html)
    except ReportError as e:  # it may quote the run's files, which ruler may not have written
        print(terminal(e), file=sys.stderr)
        return 2
    except Unwritable:  # a directory or a FIFO where the report goes: said by ruler's main
        raise
    except OSError as e:  # writing its own files (each is whole, or the one before it)
        print(f"ruler report: cannot write {e.filename or run_dir}: {e.strerror or e}; make room, "
              f"then make the report again", file=sys.stderr)
        return EXIT_ENGINE
    print(f"report: {path}")
    if as_html:
        print(f"html:   {path.with_name(html.HTML)}")
    for c in charts:
        print(f"chart:  {c} ({c.stat().st_size} bytes)")
    if note:
        print(terminal(note))
    return 0
