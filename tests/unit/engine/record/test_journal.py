"""The journal survives a torn last line, keeps its sequence across reopenings, and reports a
damaged line (which one, and why) instead of dropping what follows it."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.commands.cli import main
from engine.record import results
from engine.record.fold import apply, fold
from engine.record.journal import read_events
from engine.record.snapshot import fold_journal
from engine.record.state import RunState
from engine.record.writer import JournalDamaged, JournalWriter
from tests.paths import FIXTURES


def test_events_are_numbered_and_readable(tmp_path: Path) -> None:
    j = JournalWriter(tmp_path / "journal.jsonl")
    j.append("run_started", campaign="c", run="r", runtime="process", server="llamacpp",
             sessions={"s1": ["control", "w"]}, axes={"w": "one flag"})
    j.append("window_started", session="s1", window="control", axis="control", plan={})
    j.close()
    events = read_events(tmp_path / "journal.jsonl")
    assert [e["seq"] for e in events] == [1, 2]
    state = fold(events)
    assert state.campaign == "c" and state.current == "s1-control"
    assert state.windows["s1-w"].axis == "one flag"
    assert state.windows["s1-control"].status == "booting"


def test_a_torn_last_line_is_dropped_and_cut_before_the_next_event(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    j = JournalWriter(path)
    j.append("a")
    j.append("b")
    j.close()
    with path.open("ab") as f:
        f.write(b'{"seq": 3, "ts": 1, "kind": "c", "payl')  # power loss mid-write
    assert [e["kind"] for e in read_events(path)] == ["a", "b"]
    j = JournalWriter(path)
    j.append("d")
    j.close()
    lines = path.read_bytes().splitlines()
    assert [json.loads(x)["kind"] for x in lines] == ["a", "b", "d"]
    assert [json.loads(x)["seq"] for x in lines] == [1, 2, 3]


# ------------------------------------------------------------------ damage

FINISHED = FIXTURES / "journals" / "finished" / "journal.jsonl"
RECORDED = FINISHED.read_bytes().splitlines(keepends=True)  # a real run's 341 events


def without_damage(state: RunState) -> RunState:
    return dataclasses.replace(state, damage=[])


def test_a_damaged_line_is_reported_and_every_event_after_it_kept(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b"".join(RECORDED[:100] + [b"garbage\n"] + RECORDED[100:]))
    state = fold_journal(path)
    assert [str(d) for d in state.damage] == ["line 101: not JSON: garbage"]
    assert without_damage(state) == fold(json.loads(x) for x in RECORDED)
    assert state.status == "finished" and len(read_events(path)) == len(RECORDED)


def test_the_writer_refuses_a_damaged_journal_and_leaves_it_byte_for_byte(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    data = b"".join(RECORDED[:100] + [b'{"seq": 101, "kind": "rep_d\n'] + RECORDED[100:])
    path.write_bytes(data)
    with pytest.raises(JournalDamaged) as e:
        JournalWriter(path)
    assert f"{path}:101: not JSON: " in str(e.value)
    assert path.read_bytes() == data


def test_the_fold_records_duplicate_out_of_order_and_missing_seqs() -> None:
    events = [json.loads(x) for x in RECORDED[:6]]
    state = RunState()
    for line, e in enumerate([events[0], events[1], events[1], events[0], events[2], events[5]], 1):
        apply(state, e, line)
    assert [(d.line, d.reason) for d in state.damage] == [
        (3, "duplicate seq 2"),
        (4, "seq 1 out of order (after 2)"),
        (6, "seq 6 after seq 3: 2 events missing"),
    ]
    assert state.last_seq == 6
    # The repeated events change nothing; the one after the gap is folded in.
    assert without_damage(state) == without_damage(fold([events[0], events[1], events[2], events[5]]))


def test_a_known_kind_without_its_fields_is_damage_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b"".join(RECORDED[:3]) + b'{"seq":4,"ts":1,"kind":"rep_done"}\n')
    state = fold_journal(path)
    assert [(d.line, d.reason) for d in state.damage] == [
        (4, "rep_done event the fold cannot use (no 'session')")]


def test_status_names_the_damaged_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "journal.jsonl").write_bytes(b"".join(RECORDED[:50] + [b"[1, 2]\n"] + RECORDED[50:]))
    assert main(["status", str(run)]) == 0
    text = capsys.readouterr().out
    assert "JOURNAL DAMAGED at 1 line(s): not an event, or out of sequence" in text
    assert f"{run}/journal.jsonl:51: not a JSON object: [1, 2]" in text
    assert main(["status", str(run), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["journal_damage"] == [{"line": 51, "reason": "not a JSON object",
                                    "excerpt": "[1, 2]"}]
    assert s["status"] == "finished"  # every event after the damage still counts


# Lines that are not the next event after a prefix of ``n`` events.
def _garbage(n: int) -> st.SearchStrategy[bytes]:
    real = st.sampled_from(RECORDED)
    event_like = st.fixed_dictionaries(
        {"seq": st.integers(-3, n) if n else st.integers(-3, 0), "kind": st.text(max_size=8)},
        optional={"ts": st.floats(allow_nan=False), "session": st.text(max_size=4)})
    return st.one_of(
        st.binary(max_size=80),
        st.text(max_size=80).map(str.encode),
        real.flatmap(lambda x: st.integers(1, len(x) - 2).map(lambda k: x[:k])),  # torn, then more
        st.recursive(st.none() | st.integers() | st.text(max_size=5),
                     lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c,
                                                                         max_size=3)
                     ).map(lambda v: json.dumps(v).encode()),
        st.integers(1, 5000).map(lambda d: b"[" * d + b"]" * d),  # nested past the parser's depth
        event_like.map(lambda v: json.dumps(v).encode()),
        real.filter(lambda x: json.loads(x)["seq"] <= n).map(lambda x: x.rstrip(b"\n")),
    ).map(lambda b: b.replace(b"\n", b" ")).filter(lambda b: not _is_next(b, n))


def _is_next(raw: bytes, n: int) -> bool:
    try:
        e = json.loads(raw)
    except (ValueError, RecursionError):
        return False
    return isinstance(e, dict) and isinstance(e.get("seq"), int) and e["seq"] > n


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_valid_prefix_plus_garbage_folds_to_the_prefix_and_names_each_bad_line(
        data: st.DataObject) -> None:
    n = data.draw(st.integers(0, len(RECORDED)), label="valid events")
    garbage = data.draw(st.lists(_garbage(n), min_size=1, max_size=4), label="garbage")
    rest = data.draw(st.integers(0, min(3, len(RECORDED) - n)), label="valid events after")
    torn = data.draw(st.binary(max_size=20).map(lambda b: b.replace(b"\n", b"")), label="torn")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "journal.jsonl"
        path.write_bytes(b"".join(RECORDED[:n]) + b"".join(g + b"\n" for g in garbage)
                         + b"".join(RECORDED[n:n + rest]) + torn)
        state = fold_journal(path)
        before = path.read_bytes()
        with pytest.raises(JournalDamaged):
            JournalWriter(path)
        assert path.read_bytes() == before  # refused, not trimmed
    valid = [json.loads(x) for x in RECORDED[:n + rest]]
    assert without_damage(state) == fold(valid)
    bad = list(range(n + 1, n + len(garbage) + 1))
    assert [d.line for d in state.damage] == bad  # each bad line once, by number; never the torn one


def test_the_journal_and_the_logs_are_born_owner_only_like_every_receipt(tmp_path: Path) -> None:
    run = results.new_run_dir(tmp_path / "results", "modes")
    wdir = results.window_dir(run, "s1", "control")
    JournalWriter(run / results.JOURNAL).close()
    with results.open_append(wdir / "boot.log", text=True) as log:
        log.write("a line\n")
    results.write_json(wdir / "boot-facts.json", {})
    modes = {str(p.relative_to(run)): oct(p.stat().st_mode & 0o777) for p in [run, *run.rglob("*")]}
    assert modes == {".": "0o700", "windows": "0o700", "windows/s1-control": "0o700",
                     "journal.jsonl": "0o600", "windows/s1-control/boot.log": "0o600",
                     "windows/s1-control/boot-facts.json": "0o600"}


@pytest.mark.parametrize("value", [float("inf"), float("nan"), -float("inf")])
def test_the_writer_refuses_a_non_finite_number_and_writes_nothing(tmp_path: Path, value: float) -> None:
    """Infinity and NaN are not JSON: a figure that can be one is None before it is journaled
    (engine.method.leak.spread_figure); one that slips through is a ruler bug, never a line."""
    j = JournalWriter(tmp_path / "journal.jsonl")
    j.append("window_started", session="s1", window="control", axis="control", plan={})
    with pytest.raises(ValueError, match="JSON compliant"):
        j.append("boot_fact", session="s1", window="control", key="odd", value=value)
    j.close()
    assert [e["kind"] for e in read_events(tmp_path / "journal.jsonl")] == ["window_started"]
