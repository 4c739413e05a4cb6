"""A day-long journal is folded once: each line read by orjson where it reads it as the standard
parser does (engine.record.journal.Parse), the fold kept as the snapshot by the reader that made
it (engine.record.snapshot.read_folded), and the next reader folds only what came after. Every
state is checked against the fold of the lines as the standard parser reads them, the reader of
journals before orjson, over the recorded journals with hostile lines put in anywhere."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.commands.status import format_summary, summary
from engine.record import journal, snapshot
from engine.record.fold import apply
from engine.record.journal import Damage, Parse, Reader, _event, excerpt, read_journal, wide
from engine.record.state import RunState
from tests.paths import FIXTURES
from tests.unit.helpers import JOURNALS, plain

ALL = {**JOURNALS, "demo-smollm2": FIXTURES / "runs" / "demo-smollm2" / "journal.jsonl"}
LINES = {name: path.read_bytes().splitlines(keepends=True) for name, path in ALL.items()}


def standard(raw: bytes) -> dict[str, Any] | str:
    """A line as the standard parser reads it (the reader's careful way, which orjson's must
    equal): the event in the current format's shape, or why the line is not one."""
    return _event(raw, None, Parse(), careful=True)


def standard_fold(data: bytes) -> RunState:
    """The fold of a journal's complete lines as the standard parser reads them."""
    state, damage = RunState(), []
    for n, raw in enumerate(data[:data.rfind(b"\n") + 1].split(b"\n")[:-1], 1):
        got = standard(raw)
        if isinstance(got, str):
            damage.append(Damage(n, got, excerpt(raw)))
        else:
            apply(state, got, n)
    state.damage = sorted(damage + state.damage, key=lambda d: d.line or 0)
    return state


def same(state: RunState) -> str:
    """The state as JSON writes it: a NaN equal to itself, an int not a float, a word its text."""
    return json.dumps(plain(state))


def finite(x: Any) -> bool:
    if isinstance(x, float):
        return math.isfinite(x)
    if isinstance(x, dict):
        return all(map(finite, x.values()))
    return all(map(finite, x)) if isinstance(x, list) else True


# Values orjson and the standard parser could read apart, as a boot fact's value.
ODD = st.sampled_from([
    b"18446744073709551615", b"18446744073709551616", b"-9223372036854775808",
    b"-9223372036854775809", b"123456789012345678901234567890", b"1.0000000000000002",
    b"1e400", b"-1e400", b"NaN", b"Infinity", b"-Infinity", b"1e-400", b"-0", b"-0.0",
    b'"\\ud800"', b'"\\udc00x"', b'"\\ud83d\\ude00"', b'"\xc3\x28"', b'"\xe2\x82"', b'"\x01"',
    b"[" * 600 + b"]" * 600, b"[" * 2000 + b"]" * 2000, b'{"a":1,"a":2}', b"[1,]", b"1 2",
])
# Whole lines that are no event, each in the way one reader could see it and not the other.
LINE = st.sampled_from([
    b"", b"   ", b"\r", b"\xef\xbb\xbf{}", b'\xef\xbb\xbf{"seq":1,"ts":1,"kind":"x"}', b"{}\x0c",
    b"[1]", b"null", b'{"seq":true,"ts":1,"kind":"x"}', b'{"seq":1.0,"ts":1,"kind":"x"}',
    b'{"seq":2,"kind":5}', b"\x00\x00", b"not json",
])


def hostile(data: st.DataObject, name: str) -> list[bytes]:
    """A recorded journal with boot facts of odd values and lines of no event put in."""
    lines = list(LINES[name])
    for _ in range(data.draw(st.integers(0, 4), label="odd values")):
        at = data.draw(st.integers(0, len(lines)), label="at")
        value = data.draw(ODD, label="value")
        lines.insert(at, b'{"seq":%d,"ts":1.5,"kind":"boot_fact","session":"s1","window":"control",'
                         b'"key":"odd","value":%s}\n' % (data.draw(st.integers(1, 400)), value))
    for _ in range(data.draw(st.integers(0, 3), label="odd lines")):
        lines.insert(data.draw(st.integers(0, len(lines)), label="at"), data.draw(LINE) + b"\n")
    return lines


HEALTH = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]  # every_few's EVERY holds for all


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=HEALTH)
@given(data=st.data())
def test_every_line_reads_as_the_standard_parser_reads_it(data: st.DataObject) -> None:
    lines = [x.rstrip(b"\n") for x in hostile(data, data.draw(st.sampled_from(sorted(ALL))))]
    # read_journal says False when no line may hold a wide integer, else each line is looked at
    careful = None if wide(b"\n".join(lines)) else data.draw(st.sampled_from([None, False]))
    reader = Reader()
    got = reader.feed(lines, careful)
    want = [(n, standard(raw)) for n, raw in enumerate(lines, 1)]
    # repr: NaN is not equal to itself, and -0.0 == 0 == 0.0; the types are the point here
    assert [(n, repr(e)) for n, e in got] == [(n, repr(e)) for n, e in want if not isinstance(e, str)]
    assert [(d.line, d.reason) for d in reader.damage] == [
        (n, e) for n, e in want if isinstance(e, str)]
    assert reader.parse.finite == all(finite(e) for _, e in want if not isinstance(e, str))


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=HEALTH)
@given(data=st.data())
def test_a_reader_keeps_the_fold_and_the_next_folds_only_what_follows(data: st.DataObject) -> None:
    """The snapshot a reader leaves is taken by the next one, which folds the lines after it: the
    state is the whole journal's fold as the standard parser reads it, damage and its line
    numbers included, whatever odd values the lines hold (a fold holding one that strict JSON
    cannot carry exactly is not kept: the next reader folds it all). The lines are read and
    folded a block at a time, read a piece at a time: blocks and pieces of any size, a line
    longer than either included."""
    lines = hostile(data, data.draw(st.sampled_from(sorted(ALL)), label="journal"))
    cut = data.draw(st.integers(1, len(lines)), label="read after line")
    block = data.draw(st.sampled_from([journal.BLOCK, 1, 150, 4096]), label="block")
    piece = data.draw(st.sampled_from([journal.PIECE, 7, 300, 5000]), label="piece read")
    with (tempfile.TemporaryDirectory() as d, mock.patch.object(journal, "BLOCK", block),
          mock.patch.object(journal, "PIECE", piece)):
        path = Path(d) / "journal.jsonl"
        path.write_bytes(b"".join(lines[:cut]))
        first = snapshot.read_folded(path)
        assert same(first.state) == same(standard_fold(path.read_bytes()))
        kept, _ = snapshot.load(path)
        path.write_bytes(b"".join(lines))
        second = snapshot.read_folded(path)
        whole = standard_fold(path.read_bytes())
    keeps = cut >= snapshot.EVERY and _encodes(first.state, first.read.finite)
    assert (kept is not None) == keeps == (second.prefix is not None)
    assert kept is None or kept.lines == cut
    assert same(second.state) == same(whole)


def _encodes(state: RunState, finite: bool) -> bool:
    try:
        snapshot.encode(state, finite)
    except ValueError:
        return False
    return True


@pytest.fixture(autouse=True)
def every_few(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader keeps its fold from 20 lines on here (1,000 in a run): the recorded journals'."""
    monkeypatch.setattr(snapshot, "EVERY", 20)


def test_status_keeps_the_snapshot_where_it_may_write_and_says_the_same(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b"".join(LINES["finished"]))
    said = format_summary(summary(tmp_path))
    kept, why = snapshot.load(path)
    assert why == "" and kept is not None and kept.lines == len(LINES["finished"])
    assert format_summary(summary(tmp_path)) == said
    assert snapshot.read_folded(path).prefix is not None

    # A run directory the snapshot cannot be written into (here: a directory in its place).
    other = tmp_path / "other"
    other.mkdir()
    (other / "journal.jsonl").write_bytes(b"".join(LINES["finished"]))
    snapshot.path_of(other / "journal.jsonl").mkdir()
    assert format_summary(summary(other)).replace(str(other), str(tmp_path)) == said
    assert snapshot.read_folded(other / "journal.jsonl").why.startswith("snapshot unreadable")


def test_a_short_read_keeps_no_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b"".join(LINES["finished"][:19]))
    snapshot.read_folded(path)
    assert not snapshot.path_of(path).exists()
    assert read_journal(path).lines == 19
