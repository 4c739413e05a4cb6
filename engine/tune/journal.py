"""The tune's own journal, ``tune.jsonl`` in the tune directory: ``tune_started``, per round
``round_started`` (its run directory and candidates) and ``round_done`` (the decisions), and
``tune_done``. A line is one of the :data:`KINDS` below, checked as it is written and as it is read;
everything decided is derived again from the rounds' runs, so the journal holds only what cannot
be: where each round runs.

Position-independent: a round's run directory is recorded by its name under the tune directory's
``runs/`` (every round runs there), so ``ruler tune --resume`` finds it from any working
directory, and from a tune directory moved whole.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict

from engine import files
from engine.errors import BadInput
from engine.record import results

TUNE_JOURNAL = "tune.jsonl"
RUNS = "runs"  # the rounds' run directories, under the tune directory


class TuneStarted(TypedDict):
    kind: Literal["tune_started"]
    ts: float
    tune: str  # the tune file, absolute
    baseline: str | None  # --baseline's run directory, absolute
    runtime: str | None


class RoundStarted(TypedDict):
    kind: Literal["round_started"]
    ts: float
    round: int
    round_kind: str  # axes | combine
    run: str  # the round's run directory: its name under runs/
    control: dict[str, Any]
    candidates: list[dict[str, Any]]


class RoundDone(TypedDict):
    kind: Literal["round_done"]
    ts: float
    round: int
    candidates: list[dict[str, Any]]


class TuneDone(TypedDict):
    kind: Literal["tune_done"]
    ts: float
    stop: str
    recommended: dict[str, Any]
    command: NotRequired[str]


TuneEvent = TuneStarted | RoundStarted | RoundDone | TuneDone
# Each kind's fields and the types a line must carry them as (beyond kind and ts).
KINDS: dict[str, dict[str, tuple[type, ...]]] = {
    "tune_started": {"tune": (str,), "baseline": (str, type(None)), "runtime": (str, type(None))},
    "round_started": {"round": (int,), "round_kind": (str,), "run": (str,), "control": (dict,),
                      "candidates": (list,)},
    "round_done": {"round": (int,), "candidates": (list,)},
    "tune_done": {"stop": (str,), "recommended": (dict,)},
}


def _problem(event: Mapping[str, Any]) -> str:
    """What keeps ``event`` from being a tune event ("" when nothing does)."""
    kind = event.get("kind")
    fields = KINDS.get(kind) if isinstance(kind, str) else None
    if fields is None:
        return f"kind {kind!r} is not one of {', '.join(KINDS)}"
    for name, types in fields.items():
        value = event.get(name)
        if name not in event or not isinstance(value, types) or isinstance(value, bool):
            return f"{kind}: {name} is {value!r}, not {' or '.join(t.__name__ for t in types)}"
    return ""


def append(tune_dir: Path, kind: str, **data: Any) -> None:
    """One event, checked, appended and fsync'd (a round's start must survive a kill -9)."""
    event = {"kind": kind, "ts": round(time.time(), 3), **data}
    problem = _problem(event)
    assert not problem, problem
    with results.open_append(tune_dir / TUNE_JOURNAL) as f:
        f.write(json.dumps(event, allow_nan=False).encode() + b"\n")
        f.flush()
        os.fsync(f.fileno())


def run_name(run_dir: Path) -> str:
    """How a round's run directory is recorded: its name (it lives under ``runs/``)."""
    return run_dir.name


def run_dir(tune_dir: Path, recorded: str) -> Path:
    """A round's run directory from what the journal recorded: its name under the tune directory's
    ``runs/``. A journal of an earlier ruler recorded the path as given then (relative to the
    working directory of the first ``ruler tune``, or absolute): its last part is the name."""
    return tune_dir / RUNS / Path(recorded).name


def read(tune_dir: Path) -> list[TuneEvent]:
    """Every event of the tune's journal; a torn last line (a kill mid-write) is left out; any
    other line that is not a tune event is BadInput at its file:line."""
    path = tune_dir / TUNE_JOURNAL
    try:
        lines = files.read_text(path).splitlines()
    except FileNotFoundError:
        return []
    except files.Unreadable as exc:  # a FIFO, a device, a sparse file: never waited on or read
        raise BadInput(f"{path}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise BadInput(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); ruler will not "
                       "resume a damaged tune journal") from None
    out: list[TuneEvent] = []
    for i, line in enumerate(lines, 1):
        try:
            event = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            if i < len(lines):  # only the last line may be torn
                raise BadInput(f"{path}:{i}: not a JSON line; ruler will not resume a damaged tune "
                               "journal") from None
            continue
        problem = _problem(event) if isinstance(event, dict) else "not a JSON object"
        if problem:
            raise BadInput(f"{path}:{i}: {problem}; ruler will not resume a damaged tune journal")
        out.append(event)
    return out
