"""One run directory, read: throughput.csv rows typed, the folded journal, the frozen campaign, env.json.

Nothing is measured again. Each rep's tok/s is the one the row_done event recorded from the
receipts, recomputed from the receipts when an older journal lacks it.
"""

from __future__ import annotations

import csv
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from engine import files
from engine.campaign import sweep
from engine.campaign.spec import Campaign
from engine.record import figures, results
from engine.record.eventcheck import mistyped
from engine.record.events import EventKind
from engine.record.journal import Event, read_kinds
from engine.record.receipts import read_rep, source_paths
from engine.record.snapshot import fold_journal
from engine.record.state import RunState, WindowState
from engine.sanitize import csv_text
from engine.words import CONTROL, USABLE_ROWS, load_text, row_key

# The events the report reads besides the state: each window's boots and ends, and the audit
# trail behind its figures. The state is the fold of every event (from its snapshot).
REPORTED = frozenset({EventKind.WINDOW_STARTED, EventKind.WINDOW_PLACED, EventKind.WINDOW_FINISHED,
                      EventKind.SERVER_STOPPED, EventKind.LEAK_SUSPECTED, EventKind.ROW_VOID,
                      EventKind.RERUN_ABORTED, EventKind.WINDOW_REBOOT})


class ReportError(Exception):
    """Bad input (exit code 2): the directory is not a ruler run."""


def _num(text: str | None) -> float | None:
    return float(text) if text not in (None, "") else None


def _int(text: str | None) -> int:
    return int(text) if text not in (None, "") else 0


@dataclass
class Row:
    """One throughput.csv row, typed, with its reps' aggregate tok/s. Each field is the column of
    its name in ``figures.CSV_COLUMNS`` (``cls`` is ``class``), read by :func:`csv_row`; the
    types are what that function parses."""

    session: str
    window: str
    axis: str
    cls: str
    concurrency: int  # 0 for an open-loop row
    rate: float | None  # an open-loop row's arrival rate, requests per second
    reps: int
    agg_tok_s: float | None
    per_user_tok_s: float | None
    ttft_ms: float | None
    decode_tok_s: float | None
    ttft_p50: float | None  # from here to tpot_p99: every rep's requests pooled (stats.latency_figures)
    ttft_p90: float | None
    ttft_p99: float | None
    itl_p50: float | None
    itl_p90: float | None
    itl_p99: float | None
    tpot_p50: float | None
    tpot_p90: float | None
    tpot_p99: float | None
    achieved_rps: float | None
    goodput_rps: float | None
    accept_len: float | None
    accept_rate: float | None
    accept_source: str
    j_per_token: float | None  # from here to throttled: NVML (empty without a GPU)
    power_w: float | None
    sm_mhz_min: float | None
    throttled: str  # "True", "False", or "" without telemetry
    spread: float | None
    delta: float | None
    delta_lo: float | None
    delta_hi: float | None
    boot_noise: float | None  # from here to verdict_why: engine.record.judgement, as written
    boot_noise_how: str
    p_value: float | None
    p_adjusted: float | None
    verdict: str
    verdict_why: str
    cache: str
    cache_hit: float | None
    status: str
    attempts: int
    reason: str
    source: str
    basis: str  # steady | whole ("" from before the steady window: whole)
    whole_tok_s: float | None
    ramp_s: float | None
    steady_s: float | None
    tail_s: float | None
    spread_shape: str  # leak | noise | ""
    spread_why: str  # how engine.method.leak read the reps
    precision: float | None
    half_width: float | None
    precision_status: str  # reached | cap | cannot | "" (no precision asked)
    stage_reps: int  # 0: no precision asked
    accept_len_lo: float | None  # from here to accept_per_pos: engine.method.acceptance
    accept_len_hi: float | None
    accept_rate_lo: float | None
    accept_rate_hi: float | None
    accept_per_pos: str  # "0.91 0.74 0.52"; "" where the server gives no position
    parity: str = ""  # a window on another stack: its class's parity with the control's stack
    ttft_mean: float | None = None  # from here to e2el_mean: stats.latency_figures (later columns)
    itl_mean: float | None = None
    tpot_mean: float | None = None
    e2el_p50: float | None = None
    e2el_p90: float | None = None
    e2el_p99: float | None = None
    e2el_mean: float | None = None
    acceptance: str = ""  # natural | simulated (how) | "" (engine.method.acceptance)
    rep_tok_s: list[float] = field(default_factory=list)
    rep_whole_tok_s: list[float] = field(default_factory=list)  # each rep's over the whole rep

    @property
    def curve(self) -> list[float]:
        """The per-position acceptance, position 0 first (empty: none)."""
        return [float(x) for x in self.accept_per_pos.split()]

    @property
    def usable(self) -> bool:
        return self.status in USABLE_ROWS and bool(self.agg_tok_s)

    @property
    def shape(self) -> tuple[str, int, float | None]:
        return self.cls, self.concurrency, self.rate

    @property
    def key(self) -> tuple[str, str, str, int, float | None]:
        return self.session, self.window, self.cls, self.concurrency, self.rate

    @property
    def load(self) -> str:
        """``C4`` or ``2.5 req/s``."""
        return load_text(self.concurrency, self.rate)

    def label(self) -> str:
        return f"{self.session}-{self.window}/{self.cls}/{self.load}"

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


PARSE: dict[str, Callable[[str], Any]] = {"str": str, "int": _int, "float | None": _num}
# The columns Row holds (the reps' figures are the journal's or the receipts', not columns).
TYPES = {f.name: str(f.type) for f in fields(Row) if f.name not in ("rep_tok_s", "rep_whole_tok_s")}


def csv_row(r: dict[str, str]) -> Row:
    """A throughput.csv line (``csv.DictReader``) as a Row, column by column of
    ``figures.CSV_COLUMNS`` (``ruler_check`` stays with the window's verdicts). A column the file
    lacks is a KeyError naming it (but one declared ``later``), a line short of values a TypeError;
    an empty count reads as 0, an empty figure as None."""
    values: dict[str, Any] = {}
    for name, col, later, parse in _COLUMNS:
        text = r.get(col, "") if later else r[col]
        if text is None:  # DictReader's restval
            short = [n for n, c, _, _ in _COLUMNS if r.get(c, "") is None]
            raise TypeError(f"the line has no value for {', '.join(short)}")
        # A text the writer quoted so that no spreadsheet runs it (engine.sanitize) reads as written.
        values[name] = parse(csv_text(text) if text[:1] == "'" else text)
    return Row(**values)


# Each column a Row holds, in order: its field, its column, whether a file may lack it (declared
# ``later``), how its text reads; found once, not for each of a day-long run's thousands of rows.
_COLUMNS = [(name, col, col in figures.LATER_COLUMNS, PARSE[TYPES[name]])
            for col in figures.CSV_COLUMNS if (name := "cls" if col == "class" else col) in TYPES]


def receipt_rep_tok_s(run_dir: Path, source: str, concurrency: int, basis: str = "") -> list[float]:
    """Each rep's tok/s over the row's basis (steady window or whole rep) recomputed from the
    per-request receipts the row names (a rep voided before it ran has none). The statistics
    (numpy, 0.1-0.2 s to import) are loaded only for a journal too old to carry each rep's tok/s."""
    from engine.method import stats

    return stats.receipt_tok_s([read_rep(p) for p in source_paths(run_dir, source)], concurrency, basis)


def receipt_damage(run_dir: Path, rows: list[Row]) -> list[str]:
    """The receipts the rows name that are missing or not whole, each with why. A receipt is
    written whole at once (write_atomic): one that does not end at a line's end, or whose first
    or last line is not JSON, was cut or damaged since. Its first and last lines only are read."""
    out: list[str] = []
    for p in dict.fromkeys(p for r in rows for p in r.source.split(";") if p):
        try:
            with files.open_bounded(run_dir / p) as f:
                first = f.readline()
                f.seek(max(0, f.seek(0, 2) - 65536))
                tail = f.read()
        except OSError as e:
            out.append(f"{p} ({e.strerror})")
            continue
        except files.Unreadable as e:  # a FIFO, a device, a sparse file: never waited on or read
            out.append(f"{p} ({e})")
            continue
        last = tail.rstrip(b"\n").rsplit(b"\n", 1)[-1]
        try:
            whole = tail.endswith(b"\n") and json.loads(first).get("kind") == "rep" and json.loads(last)
        except (ValueError, AttributeError):
            whole = False
        if not whole:
            out.append(f"{p} (truncated or damaged)")
    return out


def read_rows(run_dir: Path, state: RunState) -> list[Row]:
    path = run_dir / results.THROUGHPUT
    if not path.exists():
        return []
    rows = []
    try:
        with files.open_text(path, newline="") as f:
            reader = csv.DictReader(f)
            try:
                for r in reader:
                    rows.append(_row(run_dir, state, r))
            except KeyError as e:
                raise ReportError(f"{path}:{reader.line_num}: no {e.args[0]!r} column") from e
            except (ValueError, TypeError, csv.Error) as e:  # TypeError: a row short of columns
                raise ReportError(f"{path}:{reader.line_num}: cannot read this row ({e})") from e
            except OSError as e:
                raise ReportError(f"{path}:{reader.line_num}: a receipt it names cannot be read "
                                  f"({e.strerror}: {e.filename})") from e
    except files.Unreadable as e:  # a FIFO, a device, a sparse file: never waited on or read
        raise ReportError(f"{path}: {e}") from None
    return rows


def _row(run_dir: Path, state: RunState, r: dict[str, str]) -> Row:
    row = csv_row(r)
    c = row.concurrency
    journal = state.rows.get(row_key(row.session, row.window, row.cls, c, row.rate))
    same = journal is not None and journal.row.get("source") == row.source
    reps = journal.row.get("rep_tok_s") if journal and same else None
    row.rep_tok_s = (list(reps) if reps is not None
                     else receipt_rep_tok_s(run_dir, row.source, c, row.basis))
    if (row.basis or "whole") == "whole":
        row.rep_whole_tok_s = row.rep_tok_s
    elif reps is not None:  # the journal's, as the engine judged it (none in an older journal's)
        row.rep_whole_tok_s = list(journal.row.get("rep_whole_tok_s") or []) if journal else []
    else:
        row.rep_whole_tok_s = receipt_rep_tok_s(run_dir, row.source, c, "whole")
    return row


def read_campaign(run_dir: Path) -> tuple[Campaign | None, dict[str, Any], str]:
    """The frozen campaign through the schema only (its sweeps expanded, as loading does): its
    prompt files sit beside the original campaign file, not in the run directory, so the file
    checks of ``load_campaign`` do not apply."""
    path = run_dir / results.CAMPAIGN
    if not path.exists():
        return None, {}, "no campaign.yaml in the run directory"
    raw: Any = {}  # what the except reads when the file is not even YAML
    try:
        raw = yaml.safe_load(files.read_text(path)) or {}
        return Campaign.model_validate(sweep.expand(raw).data), raw, ""  # a sweep: its windows
    except Exception as e:  # noqa: BLE001 - an old or hand-edited copy still gets a report
        return None, raw if isinstance(raw, dict) else {}, f"campaign.yaml unreadable ({type(e).__name__})"


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(files.read_text(path))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


@dataclass
class RunView:
    """Everything the report and compare read from one run directory."""

    dir: Path
    events: list[Event]  # those of the kinds in REPORTED, in journal order
    state: RunState
    rows: list[Row]
    campaign: Campaign | None
    raw_campaign: dict[str, Any]
    campaign_note: str
    env: dict[str, Any]
    # What is derived from the view once and read row by row (its judgement, a class's frozen
    # prompts): a comparison of day-long runs asks for them thousands of times.
    derived: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def name(self) -> str:
        return self.dir.name

    def windows(self) -> list[WindowState]:
        return [self.state.windows[k] for k in self.state.order]

    def sessions(self) -> list[str]:
        return list(dict.fromkeys([w.session for w in self.windows()] + [r.session for r in self.rows]))

    @functools.cached_property
    def _rows_by_window(self) -> dict[tuple[str, str], dict[tuple[str, int, float | None], Row]]:
        out: dict[tuple[str, str], dict[tuple[str, int, float | None], Row]] = {}
        for r in self.rows:
            out.setdefault((r.session, r.window), {})[r.shape] = r
        return out

    def rows_of(self, session: str, window: str) -> dict[tuple[str, int, float | None], Row]:
        return dict(self._rows_by_window.get((session, window), {}))

    def classes(self) -> list[str]:
        return list(dict.fromkeys(r.cls for r in self.rows))

    def concurrencies(self) -> list[int]:
        """The closed-loop concurrencies measured (open-loop rows have none)."""
        return sorted({r.concurrency for r in self.rows if not r.rate})

    def loads(self) -> list[tuple[int, float | None]]:
        """Every load measured: the concurrencies, then the open-loop rates."""
        return ([(c, None) for c in self.concurrencies()]
                + [(0, r) for r in sorted({r.rate for r in self.rows if r.rate})])

    @functools.cached_property
    def _events_by_window(self) -> dict[tuple[Any, Any], list[Event]]:
        # Each window's events, built once: a report asks for them window by window, and a
        # day-long journal has hundreds of windows and a hundred thousand events.
        out: dict[tuple[Any, Any], list[Event]] = {}
        for e in self.events:
            out.setdefault((e.get("session"), e.get("window")), []).append(e)
        return out

    def window_events(self, session: str, window: str) -> list[Event]:
        """The events of one window (its shapes' included), in journal order."""
        return self._events_by_window.get((session, window), [])

    def of(self, kind: str, session: str | None = None, window: str | None = None) -> list[Event]:
        assert kind in REPORTED, f"the report does not read {kind} events"
        among = self.events if session is None or window is None else self.window_events(session, window)
        return [e for e in among if e["kind"] == kind
                and (session is None or e.get("session") == session)
                and (window is None or e.get("window") == window)]

    def window_file(self, ws: WindowState, name: str) -> Path:
        return self.dir / "windows" / ws.key / name

    def lossy(self, window: str) -> bool:
        if self.campaign is None or window == CONTROL:
            return False
        try:
            return self.campaign.window(window).lossy
        except KeyError:
            return False

    def knobs(self, window: str) -> dict[str, Any] | None:
        """The request knobs a window sent; None without the frozen campaign."""
        if self.campaign is None:
            return None
        try:
            return self.campaign.knobs_for(window)
        except KeyError:  # a window the frozen campaign does not define: the workload's
            return dict(self.campaign.workload.knobs)


def load_run(run_dir: str | Path) -> RunView:
    d = Path(run_dir)
    if not (d / results.JOURNAL).exists() and not (d / results.THROUGHPUT).exists():
        raise ReportError(f"{d} is not a ruler run directory (no {results.JOURNAL} or "
                          f"{results.THROUGHPUT})")
    state = fold_journal(d / results.JOURNAL)  # damaged lines are kept in state.damage, and said
    # An event the fold called damage (a field of another type) is not read here either.
    events = [e for e in read_kinds(d / results.JOURNAL, REPORTED) if mistyped(e) is None]
    campaign, raw, note = read_campaign(d)
    return RunView(d, events, state, read_rows(d, state), campaign, raw, note, read_json(d / results.ENV))

