"""The receipts every figure is computed from, and their schemas: one JSON-lines file per rep (the
rep's header, then one record per request) and throughput.csv (one row per session, window, class
and concurrency, naming the rep files it was computed from; its columns: engine.record.figures)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from engine import files
from engine.method.verdict import Rule
from engine.record.events import EventKind
from engine.record.figures import CSV_COLUMNS
from engine.record.judgement import judgement, row_columns
from engine.record.request import RequestRecord
from engine.record.results import THROUGHPUT, write_atomic, write_jsonl
from engine.record.state import RunState
from engine.sanitize import csv_document
from engine.words import Check


def write_rep(path: Path, header: dict[str, Any], records: Sequence[RequestRecord]) -> None:
    write_jsonl(path, [{"kind": "rep", **header}, *({"kind": "request", **r} for r in records)])


class ReceiptError(ValueError):
    """A rep receipt ruler cannot read, or a row's source naming a file outside its run: reads as
    ``path[:line]: problem``."""


def read_rep(path: Path) -> tuple[dict[str, Any], list[RequestRecord]]:
    """A rep receipt's header and records; a line that is not one (a receipt cut short, edited)
    is a ReceiptError at its line."""
    header: dict[str, Any] = {}
    records: list[RequestRecord] = []
    try:
        text = files.read_text(path, errors="replace")
    except files.Unreadable as exc:  # a FIFO, /dev/zero, a sparse file: never waited on or read
        raise ReceiptError(f"{path}: {exc}") from None
    for n, line in enumerate(text.splitlines(), 1):
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):  # JSONDecodeError, a number too long, too deep
            raise ReceiptError(f"{path}:{n}: not a receipt line (not JSON ruler reads)") from None
        if not isinstance(obj, dict) or obj.get("kind") not in ("rep", "request"):
            raise ReceiptError(f"{path}:{n}: not a receipt line (no kind rep or request)")
        if obj.pop("kind") == "rep":
            header = obj
        else:
            records.append(cast(RequestRecord, obj))
    return header, records


def source_paths(run_dir: Path, source: str) -> list[Path]:
    """The rep receipts a row's ``source`` names (``;``-separated, relative to its run), each
    inside ``run_dir``: one that resolves outside it (an absolute path, ``..``, a link out) is a
    ReceiptError, never opened; so is one that is a link that loops."""
    root = run_dir.resolve()
    out = []
    for p in source.split(";"):
        if not p:
            continue
        try:
            path = files.resolve(run_dir / p)
        except files.Unreadable as exc:
            raise ReceiptError(f"{run_dir / p}: {exc}") from None
        if not path.is_relative_to(root):
            raise ReceiptError(f"a row's source {p!r} is outside the run ({path})")
        out.append(path)
    return out


def throughput_rows(state: RunState, rule: Rule) -> list[dict[str, Any]]:
    """The finished rows, each with its delta against its session's control boots, the noise
    between boots at its load and its call (engine.record.judgement), and its window's ruler check
    verdict ("ruler suspect" loudly)."""
    def ruler(session: str, window: str) -> str:
        ws = state.windows.get(f"{session}-{window}")
        return str(ws.verdicts.get(Check.KNOBS, {}).get("verdict", "")) if ws else ""

    def parity(session: str, window: str, cls: str) -> str:
        ws = state.windows.get(f"{session}-{window}")
        if ws is None or not ws.stack:
            return ""
        return str(ws.parity.get(cls, {}).get("verdict", "not compared"))

    j = judgement(state, rule)
    return [{**r.row, **row_columns(j, r), "ruler_check": ruler(r.session, r.window),
             "parity": parity(r.session, r.window, r.cls)}
            for r in state.rows.values() if r.row]


def write_throughput(run_dir: Path, rows: list[dict[str, Any]]) -> None:
    write_atomic(run_dir / THROUGHPUT, csv_document(CSV_COLUMNS, rows))


class ThroughputWriter:
    """A journal listener: throughput.csv is rewritten when a row lands, a ruler-check verdict
    changes its ``ruler_check`` column or a look changes the level its calls are made at (the last
    look spends what is left of the error rate), so the file on disk always matches the fold."""

    def __init__(self, run_dir: Path, rule: Rule) -> None:
        self.run_dir, self.rule = run_dir, rule

    def __call__(self, event: dict[str, Any], state: RunState) -> None:
        if event["kind"] in (EventKind.ROW_DONE, EventKind.VERDICT_LOOK) or (
                event["kind"] == EventKind.VERDICT and event.get("check") == Check.KNOBS):
            write_throughput(self.run_dir, throughput_rows(state, self.rule))
