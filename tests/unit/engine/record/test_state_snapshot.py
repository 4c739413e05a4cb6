"""The snapshot of the fold (engine.record.snapshot): a reader that takes it and folds the lines
after it gets the very state the whole journal folds to, damage and its line numbers included; a
snapshot that is missing, stale, corrupt or from another ruler is not taken, and the whole journal
is folded instead. The journals are the recorded ones of tests/fixtures (test_fold_snapshot's, and
the demo campaign's real run), cut at any line."""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.commands.status import format_summary, summary
from engine.record import snapshot
from engine.record.fold import fold_read
from engine.record.journal import Damage, read_journal
from engine.record.state import RowState, RunState, WindowState
from engine.record.writer import JournalWriter
from tests.paths import FIXTURES
from tests.unit.helpers import JOURNALS, plain

ALL = {**JOURNALS, "demo-smollm2": FIXTURES / "runs" / "demo-smollm2" / "journal.jsonl"}
LINES = {name: path.read_bytes().splitlines(keepends=True) for name, path in ALL.items()}


def full_fold(path: Path) -> RunState:
    return fold_read(read_journal(path))


def snapshot_at(path: Path, lines: int) -> None:
    """The snapshot the writer takes after the journal's first ``lines`` lines."""
    first = b"".join(x + b"\n" for x in path.read_bytes().split(b"\n")[:lines])  # not at a \r
    cut = path.with_name("cut.jsonl")
    cut.write_bytes(first)
    read = read_journal(cut)
    cut.unlink()
    snapshot.write(path, fold_read(read), read.length, read.lines, read.last)


# Lines that are not an event, or not the next one: what damage looks like.
DAMAGE = st.one_of(
    st.binary(max_size=40).map(lambda b: b.replace(b"\n", b" ")),
    st.sampled_from([b"not json", b"[1, 2]", b'{"seq": 0, "kind": "x"}', b'{"seq": 3}',
                     b'{"seq":999999,"ts":1,"kind":"rep_done"}', b""]),
)


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_snapshot_and_tail_fold_to_the_whole_journal_at_any_cut(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(ALL)), label="journal")
    lines = list(LINES[name])
    # Damage anywhere, before or after the cut: a repeated real line (a duplicate seq) or garbage.
    for _ in range(data.draw(st.integers(0, 3), label="damaged lines")):
        at = data.draw(st.integers(0, len(lines)), label="at")
        bad = data.draw(st.one_of(DAMAGE, st.sampled_from(LINES[name]).map(bytes.rstrip)))
        lines.insert(at, bad + b"\n")
    cut = data.draw(st.integers(1, len(lines)), label="snapshot after line")
    torn = data.draw(st.sampled_from([b"", b'{"seq": 99999, "ts": 1, "ki']), label="torn tail")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "journal.jsonl"
        path.write_bytes(b"".join(lines))
        snapshot_at(path, cut)
        path.write_bytes(b"".join(lines) + torn)
        got = snapshot.read_folded(path)
        whole = full_fold(path)
    assert got.why == "" and got.prefix is not None and got.prefix.lines == cut
    assert got.state == whole
    assert plain(got.state) == plain(whole)  # sets and tuples as JSON sees them, too
    assert [(x.line, x.reason, x.excerpt) for x in got.state.damage] == [
        (x.line, x.reason, x.excerpt) for x in whole.damage]


@pytest.mark.parametrize("name", sorted(ALL))
def test_every_cut_of_each_journal_reads_back_the_fold_of_its_lines(name: str, tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b"".join(LINES[name]))
    whole = full_fold(path)
    for cut in range(1, len(LINES[name]) + 1, max(1, len(LINES[name]) // 60)):
        snapshot_at(path, cut)
        got = snapshot.read_folded(path)
        assert (got.why, got.state) == ("", whole), cut


# ------------------------------------------------------------------ what is not taken


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """The finished recorded run with a damaged line before and after a snapshot at line 200."""
    lines = list(LINES["finished"])
    lines.insert(150, b"garbage before the cut\n")
    lines.insert(250, lines[249])  # a duplicate seq after it
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b"".join(lines))
    snapshot_at(path, 200)
    assert snapshot.read_folded(path).why == ""
    return path


def taken(path: Path) -> tuple[str, RunState]:
    """Why the snapshot was not taken, and the state read; the state is always the full fold."""
    got = snapshot.read_folded(path)
    assert got.state == full_fold(path)
    assert (got.prefix is None) == bool(got.why)
    return got.why, got.state


def test_no_snapshot_folds_the_whole_journal(run: Path) -> None:
    snapshot.path_of(run).unlink()
    assert taken(run)[0] == "no snapshot"


def test_a_journal_shorter_than_the_snapshot_is_folded_whole(run: Path) -> None:
    lines = run.read_bytes().splitlines(keepends=True)
    run.write_bytes(b"".join(lines[:150]))  # the operator moved the end away
    why, state = taken(run)
    assert why == "journal shorter than the snapshot"
    assert [d.line for d in state.damage] == []


def test_a_rewritten_journal_is_folded_whole(run: Path) -> None:
    lines = run.read_bytes().splitlines(keepends=True)
    del lines[150]  # the damaged line moved out, as `ruler status` says to: every line shifts
    run.write_bytes(b"".join(lines))
    why, state = taken(run)
    assert why == "journal rewritten since the snapshot"
    assert [(d.line, d.reason) for d in state.damage] == [(250, "duplicate seq 249")]


def test_another_journal_of_the_same_length_is_folded_whole(run: Path) -> None:
    other = LINES["rejected"] + [b"x" * 10 + b"\n"] * 400
    data = b"".join(other)[:run.stat().st_size - 1] + b"\n"
    run.write_bytes(data)
    assert taken(run)[0] == "journal rewritten since the snapshot"


def test_a_line_edited_in_place_at_the_cut_is_seen(run: Path) -> None:
    lines = run.read_bytes().splitlines(keepends=True)
    lines[199] = lines[199].replace(b'"ts":', b'"tz":')  # the same length, another line
    run.write_bytes(b"".join(lines))
    assert taken(run)[0] == "journal rewritten since the snapshot"


def test_a_snapshot_whose_seq_does_not_match_its_last_line_is_not_taken(run: Path) -> None:
    # A writer bug: the state of 199 lines filed as the snapshot of 200.
    lines = run.read_bytes().splitlines(keepends=True)
    read = read_journal(run)
    cut = run.with_name("cut.jsonl")
    cut.write_bytes(b"".join(lines[:199]))
    state = fold_read(read_journal(cut))
    cut.write_bytes(b"".join(lines[:200]))
    at200 = read_journal(cut)
    snapshot.write(run, state, at200.length, at200.lines, at200.last)
    assert read.lines > 200
    assert taken(run)[0] == "seq mismatch between the snapshot and the journal"


def _rewrite(path: Path, edit: Any) -> None:
    snap = snapshot.path_of(path)
    head, body = snap.read_bytes().split(b"\n", 1)
    snap.write_bytes(edit(head, body))


def _signed(head: dict[str, Any], body: bytes) -> bytes:
    """A snapshot whose hash matches what it holds: written by a buggy or hostile hand."""
    return json.dumps(dict(head, check=snapshot._check(head, body))).encode() + b"\n" + body + b"\n"


@pytest.mark.parametrize(("edit", "why"), [
    (lambda h, b: h + b"\n" + b[: len(b) // 2], "snapshot corrupt (it does not match its hash)"),
    (lambda h, b: h.replace(b'"lines": ', b'"lines": 1') + b"\n" + b,
     "snapshot corrupt (it does not match its hash)"),
    (lambda h, b: b"\x00" * 40 + b"\n" + b, "snapshot corrupt (its header is not JSON)"),
    (lambda h, b: b"", "snapshot corrupt (its header is not JSON)"),
    (lambda h, b: _signed(dict(json.loads(h), length="x"), b.rstrip(b"\n")), "snapshot corrupt (its header)"),
    (lambda h, b: _signed(dict(json.loads(h)), b'{"windows": 1}'),
     "snapshot corrupt (its state does not read back)"),
], ids=["cut short", "a count edited", "header garbage", "empty", "header not numbers", "not a state"])
def test_a_corrupt_snapshot_is_not_taken(run: Path, edit: Any, why: str) -> None:
    _rewrite(run, edit)
    assert taken(run)[0] == why


def test_a_snapshot_from_another_ruler_is_not_taken(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshot, "__version__", "0.0.1")
    snapshot.fingerprint.cache_clear()
    try:
        assert taken(run)[0] == "snapshot written by another version of ruler"
    finally:
        monkeypatch.undo()
        snapshot.fingerprint.cache_clear()
    assert taken(run)[0] == ""


def test_a_snapshot_of_another_fold_is_not_taken(run: Path) -> None:
    """A field added to the state, a handler changed: the fold's source is in the fingerprint."""
    _rewrite(run, lambda h, b: _signed(dict(json.loads(h), fold="0" * 40), b.rstrip(b"\n")))
    assert taken(run)[0] == "snapshot written by another version of ruler"


def test_a_snapshot_of_the_previous_format_is_not_taken(run: Path) -> None:
    """Format 1 allowed NaN, which format 2's parser (orjson) does not read: refolded, not misread."""
    _rewrite(run, lambda h, b: _signed(dict(json.loads(h), format=1), b.rstrip(b"\n")))
    assert taken(run)[0] == "snapshot written by another version of ruler"


def _append(j: JournalWriter, e: dict[str, Any]) -> None:
    j.append(e["kind"], **{k: v for k, v in e.items() if k not in ("seq", "ts", "kind")})


@pytest.mark.parametrize(("value", "kept"), [
    ("\udc80", 50),  # a lone surrogate: no UTF-8 for it (this raised out of append)
    (2**70, 50),  # orjson reads it as a float
    (-(2**63) - 1, 50),
    (2**63, 131),  # still a 64-bit integer (unsigned): taken
], ids=["lone surrogate", "wide int", "wide negative int", "u64"])
def test_a_value_strict_json_cannot_carry_is_never_read_back_wrong(tmp_path: Path, value: Any,
                                                                   kept: int) -> None:
    """A boot fact the snapshot cannot carry exactly: the engine's appends go on, no snapshot
    holding it is taken, and every reader gets the whole journal's fold, the value as it is."""
    path = tmp_path / "journal.jsonl"
    events = [json.loads(x) for x in LINES["finished"][:130]]
    j = JournalWriter(path, snapshot_every=50)
    for e in events[:60]:
        _append(j, e)
    _append(j, {"kind": "boot_fact", "session": "s1", "window": "control", "key": "odd", "value": value})
    for e in events[60:]:
        _append(j, dict(e, seq=0))
    j.close()  # the snapshots due at 100 and on close hold the odd value: kept is the last taken
    prefix, why = snapshot.load(path)
    assert (prefix.lines if prefix else 0, why) == (kept, "")
    got = snapshot.read_folded(path)
    assert plain(got.state) == plain(full_fold(path))
    assert repr(got.state.windows["s1-control"].facts["odd"]) == repr(value)


def test_status_says_the_same_with_and_without_the_snapshot(run: Path) -> None:
    with_it = format_summary(summary(run.parent))
    assert "JOURNAL DAMAGED at 2 line(s)" in with_it and f"{run}:151: not JSON" in with_it
    snapshot.path_of(run).unlink()
    assert format_summary(summary(run.parent)) == with_it


# ------------------------------------------------------------------ the state, field by field


def test_the_state_is_written_field_by_field_and_reads_back_equal() -> None:
    state = full_fold(ALL["every-kind"])
    state.damage = [Damage(3, "not JSON", "x"), Damage(None, "an event", "")]
    state.rows[next(iter(state.rows))].suspects = {(1, 2), (2, 3)}
    back = snapshot.decode(orjson.loads(snapshot.encode(state)))
    assert back == state
    assert all(isinstance(k, int) for r in back.rows.values() for k in r.reps)
    assert all(isinstance(x, tuple) for r in back.rows.values() for x in r.suspects)


def test_a_field_added_to_the_state_needs_no_snapshot_code() -> None:
    """As the lead adds a window status and a queue reason: any field of the types the state
    uses is written and read back by its type hints."""
    Queued = dataclasses.make_dataclass("Queued", [
        ("reason", str, dataclasses.field(default="")),
        ("since", "float | None", dataclasses.field(default=None)),
        ("tries", "dict[int, list[str]]", dataclasses.field(default_factory=dict)),
        ("held", "set[tuple[int, int]]", dataclasses.field(default_factory=set)),
        ("window", WindowState, dataclasses.field(default_factory=lambda: WindowState("s", "w"))),
        ("rows", "dict[str, RowState]", dataclasses.field(default_factory=dict)),
    ], namespace={"__module__": __name__})
    globals()["Queued"] = Queued  # its hints resolve here, as a field's resolve in state.py
    q = Queued("slurm pending", 1.5, {3: ["a"]}, {(1, 2)}, WindowState("s1", "x", status="queued"),
               {"k": RowState("s1", "x", "c", 4, reps={1: {1: 2.0}})})
    assert snapshot.decoder(Queued)(json.loads(json.dumps(q, default=snapshot._fields))) == q


def test_a_type_json_cannot_key_is_refused_where_the_field_is_declared() -> None:
    with pytest.raises(TypeError, match="JSON keys are strings"):
        snapshot.decoder(dict[tuple[int, int], str])


# ------------------------------------------------------------------ the writer keeps it


def test_the_writer_snapshots_every_n_events_and_on_close(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    src = [json.loads(x) for x in LINES["finished"]]
    j = JournalWriter(path, snapshot_every=100)
    covered = []
    for e in src[:250]:
        j.append(e["kind"], **{k: v for k, v in e.items() if k not in ("seq", "ts", "kind")})
        prefix, _ = snapshot.load(path)
        covered.append(prefix.lines if prefix else 0)
    assert sorted(set(covered)) == [0, 100, 200]
    assert j.state == full_fold(path)  # the writer's state is the fold of what it wrote
    j.close()
    prefix, why = snapshot.load(path)
    assert why == "" and prefix is not None and prefix.lines == 250
    assert prefix.state == full_fold(path)

    # Reopened (a resume): the state comes from the snapshot; appends go on from its seq.
    j = JournalWriter(path, snapshot_every=100)
    assert j.state == full_fold(path) and j.seq == 250
    j.append("session_started", session="s9")
    j.close()
    assert snapshot.load(path)[0].lines == 251  # type: ignore[union-attr]  # None fails the test
    assert snapshot.read_folded(path).state == full_fold(path)


def test_a_resume_after_a_kill_folds_the_events_after_the_last_snapshot(tmp_path: Path) -> None:
    """The engine killed between two snapshots, its last line torn: nothing is lost or doubled."""
    path = tmp_path / "journal.jsonl"
    j = JournalWriter(path, snapshot_every=100)
    for e in [json.loads(x) for x in LINES["finished"][:150]]:
        j.append(e["kind"], **{k: v for k, v in e.items() if k not in ("seq", "ts", "kind")})
    # no close(): SIGKILL
    with path.open("ab") as f:
        f.write(b'{"seq":151,"ts":1,"kind":"bo')
    assert snapshot.load(path)[0].lines == 100  # type: ignore[union-attr]  # None fails the test
    j = JournalWriter(path)
    assert j.seq == 150 and j.state == full_fold(path)
    j.append("session_started", session="s9")
    j.close()
    assert snapshot.read_folded(path).state == full_fold(path)
    assert full_fold(path).last_seq == 151 and not full_fold(path).damage


def test_the_snapshot_is_owner_only(run: Path) -> None:
    assert oct(snapshot.path_of(run).stat().st_mode & 0o777) == "0o600"


def test_a_run_directory_copied_elsewhere_keeps_its_snapshot(run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(run.parent, copy, ignore=shutil.ignore_patterns("copy"))
    assert taken(copy / "journal.jsonl")[0] == ""
