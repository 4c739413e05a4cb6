"""A journal line of the right shape with a field of the wrong type is damage with its line, like a
line without a field: status, report, resume and the console's fold name it and go on; nothing
raises, nothing recorded is lost.

On a real run's journal (tests/fixtures/journals/finished), one field of one event edited.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.commands.cli import main
from engine.commands.status import format_summary, summary
from engine.record.eventcheck import mistyped
from engine.record.events import FIELDS
from engine.record.fold import apply, fold_read
from engine.record.journal import read_journal
from engine.record.snapshot import fold_journal
from engine.record.state import RunState
from engine.report import load_run, render
from tests.paths import FIXTURES

FINISHED = FIXTURES / "journals" / "finished"
RECORDED = (FINISHED / "journal.jsonl").read_bytes().splitlines(keepends=True)

# (the kind edited, its field, the value written there, what the damage says)
EDITS = [
    ("shape_started", "rate", "fast", "'rate' is a string, not a number"),
    ("window_ready", "facts", "abc", "'facts' is a string, not an object"),
    ("run_started", "axes", [], "'axes' is a list, not an object of strings"),
    ("rep_done", "agg_tok_s", "12", "'agg_tok_s' is a string, not a number"),
    ("row_done", "rep_tok_s", [1, "x"], "'rep_tok_s' is a list, not a list of numbers"),
    ("run_started", "workload", {"classes": "prose"},
     "'workload.classes' is a string, not a list of strings"),
    ("window_started", "ts", None, "'ts' is null, not a number"),
    ("leak_suspected", "agg_tok_s", "fast", "'agg_tok_s' is a string, not a number"),
    ("row_void", "rep_tok_s", {}, "'rep_tok_s' is an object, not a list of numbers"),
    ("server_stopped", "kept", "yes", "'kept' is a string, not a boolean"),
]


def edited(run: Path, kind: str, name: str, value: Any) -> int:
    """The first event of ``kind`` with ``name`` set to ``value``; returns its line."""
    path = run / "journal.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    at = next(i for i, x in enumerate(lines) if json.loads(x)["kind"] == kind)
    e = json.loads(lines[at])
    e[name] = value
    lines[at] = json.dumps(e, separators=(",", ":")).encode() + b"\n"
    path.write_bytes(b"".join(lines))
    return at + 1


@pytest.fixture
def run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(FINISHED, run)
    return run


@pytest.mark.parametrize(("kind", "name", "value", "why"), EDITS)
def test_a_field_of_the_wrong_type_is_damage_with_its_line(
        run: Path, kind: str, name: str, value: Any, why: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    line = edited(run, kind, name, value)
    state = fold_journal(run / "journal.jsonl")
    assert [(d.line, d.reason) for d in state.damage] == [
        (line, f"{kind} event the fold cannot use ({why})")]
    assert state.last_seq == len(RECORDED)  # every event after it folded

    assert main(["status", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"{run}/journal.jsonl:{line}: {kind} event the fold cannot use ({why})" in out
    assert main(["status", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["journal_damage"][0]["line"] == line

    view = load_run(run)
    assert all(mistyped(e) is None for e in view.events)  # the report reads what the fold kept
    text = render(view, [], "no charts in this test")
    assert "**Journal damaged** at 1 line(s)" in text and f"journal.jsonl:{line}: " in text

    before = (run / "journal.jsonl").read_bytes()
    (run / "engine.json").write_text("{}")
    assert main(["run", "--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"{run}/journal.jsonl:{line}: " in err and "ruler will not resume" in err
    assert (run / "journal.jsonl").read_bytes() == before


def test_the_console_fold_names_it_too(run: Path) -> None:
    """``ruler attach`` folds what it follows with ``apply``, line by line, as here."""
    line = edited(run, "shape_started", "rate", "fast")
    read = read_journal(run / "journal.jsonl")
    state = RunState()
    for n, e in read.events:
        apply(state, e, n)
    assert [d.line for d in state.damage] == [line]


def test_every_recorded_event_is_of_its_kinds_types() -> None:
    assert [json.loads(x) for x in RECORDED if mistyped(json.loads(x))] == []


# ------------------------------------------------------------------ any JSON in any field

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(-2**70, 2**70)
    | st.floats() | st.text(max_size=6),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
    max_leaves=8)
KINDS = sorted(FIELDS)


def _event(kind: str, fields: dict[str, Any], seq: int) -> dict[str, Any]:
    return {"seq": seq, "ts": 1.0, "kind": kind, **fields}


@st.composite
def events(draw: st.DrawFn, seq: int) -> dict[str, Any]:
    """An event of a known kind: each of its defined fields absent, of its type from a recorded
    event, or any JSON value; plus fields it does not define."""
    kind = draw(st.sampled_from(KINDS))
    spec = FIELDS[kind]
    names = sorted(spec.__required_keys__ | spec.__optional_keys__)  # type: ignore[attr-defined]
    fields: dict[str, Any] = {}
    for name in names:
        how = draw(st.sampled_from(["json", "absent", "same"]))
        if how == "json":
            fields[name] = draw(JSON)
        elif how == "same":
            fields[name] = SAMPLES.get((kind, name), draw(JSON))
    fields |= draw(st.dictionaries(st.sampled_from(["session", "window", "class", "rate",
                                                    "concurrency", "attempt", "x"]), JSON,
                                   max_size=2))
    return _event(kind, fields, seq)


SAMPLES: dict[tuple[str, str], Any] = {
    (e["kind"], k): v for e in map(json.loads, RECORDED) for k, v in e.items()}


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_fold_reports_damage_and_never_raises(data: st.DataObject) -> None:
    n = data.draw(st.integers(0, len(RECORDED)), label="recorded events first")
    extra = [data.draw(events(n + 1 + i), label=f"event {n + 1 + i}") for i in range(
        data.draw(st.integers(1, 4), label="events"))]
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "journal.jsonl"
        path.write_bytes(b"".join(RECORDED[:n]) + b"".join(
            json.dumps(e).encode() + b"\n" for e in extra))
        state = fold_read(read_journal(path))  # raises nothing
        # What the fold kept is what `ruler status` prints: it reads it without a traceback.
        said = summary(Path(d))
        assert format_summary(said) and json.dumps(said, default=str)
    lines = {d.line for d in state.damage}
    assert lines <= set(range(n + 1, n + len(extra) + 1))
    for i, e in enumerate(extra, start=n + 1):
        if mistyped(e):
            assert i in lines
