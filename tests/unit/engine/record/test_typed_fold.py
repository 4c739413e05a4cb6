"""A full fold checks each block's events in C (engine.record.fold.fold_typed, on the msgspec
Structs engine.record.eventcheck makes from the events' TypedDicts): the Structs take exactly the
events the journal's reader takes (Fields), as it reads them, and the fold of any journal, its
lines damaged in every way a field can be, is the fold of its lines read one by one as the
standard parser reads them, damage, its line numbers and excerpts included."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

import msgspec
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.record import fold, journal, snapshot
from engine.record.eventcheck import EVENT_OF, TYPED, checked, decode_typed, mistyped, to_event
from engine.record.events import OPEN
from engine.record.state import RunState
from tests.unit.engine.record.test_fast_fold import ALL, LINES, same, standard_fold

# A value of each JSON type, and of the ones a reader could read apart (wide, negative zero).
VALUE = st.sampled_from([
    None, True, False, 0, -1, 7, 2**53 + 1, 2**64 + 3, -(2**70), 1.5, -0.0, 1e300, "", "x",
    "ok", [], [1, 2.5], [[1, 2]], ["a"], [None], [{"a": 1}], {}, {"a": 1}, {"a": "b"},
    {"a": {"b": "c"}}, {"a": 1.5}, {"a": [1]}])
EVENTS = [orjson.loads(raw) for name in sorted(ALL) for raw in LINES[name] if raw.strip()]
CHECKED_KINDS = {kind for kind, strict in TYPED.values() if strict}


def typed(e: dict[str, Any]) -> dict[str, Any] | None:
    """The event as its Struct reads it, or None when it refuses it."""
    try:
        return to_event(decode_typed(json.dumps(e, separators=(",", ":")).encode()))
    except (msgspec.DecodeError, TypeError):
        return None


def test_every_kind_but_the_upgraded_one_is_checked_in_c() -> None:
    assert {kind for kind, strict in TYPED.values() if not strict} == {"run_started"}


@settings(max_examples=600, deadline=None)
@given(e=st.sampled_from(EVENTS), data=st.data())
def test_a_struct_takes_what_the_reader_takes_as_the_reader_reads_it(
        e: dict[str, Any], data: st.DataObject) -> None:
    """A field set to a value of any type, one taken away, one its kind does not define: the
    Struct of its kind reads the event, unchanged, exactly when Fields finds no field mistyped
    (and, but for an open kind, none undefined)."""
    e = dict(e)
    if e["kind"] not in CHECKED_KINDS:
        return
    fields = sorted(set(e) - {"kind"})
    for _ in range(data.draw(st.integers(0, 3), label="changes")):
        name = data.draw(st.sampled_from([*fields, "undefined"]), label="field")
        if data.draw(st.booleans(), label="remove"):
            e.pop(name, None)
        else:
            e[name] = data.draw(VALUE, label="value")
    if "seq" not in e or type(e["seq"]) is not int:  # the reader's, before any check
        return
    check = checked(e["kind"])
    assert check is not None
    defined = {"seq", "kind", *check.nouns}
    got = typed(e)
    assert (got is not None) == (mistyped(e) is None and (e["kind"] in OPEN or e.keys() <= defined))
    # An open kind's other fields (the runtime's identity) are left out: it is folded as read.
    want = {k: v for k, v in e.items() if k in defined}
    assert got is None or repr(sorted(got.items())) == repr(sorted(want.items()))


def mutated(data: st.DataObject, name: str) -> list[bytes]:
    """A recorded journal with some events changed in a field (of another type, taken away, one
    its kind does not define), their keys in another order, lines repeated or dropped."""
    lines = list(LINES[name])
    for _ in range(data.draw(st.integers(0, 6), label="changes")):
        at = data.draw(st.integers(0, len(lines) - 1), label="at")
        change = data.draw(st.sampled_from(["field", "remove", "undefined", "reorder", "repeat",
                                            "drop"]), label="change")
        if change == "repeat":
            lines.insert(at, lines[at])
            continue
        if change == "drop":
            del lines[at]
            continue
        try:
            e = orjson.loads(lines[at])
        except orjson.JSONDecodeError:
            continue
        if not isinstance(e, dict):
            continue
        keys = sorted(set(e) - {"seq", "kind"})
        if change == "reorder":
            e = dict(reversed(list(e.items())))
        elif change == "undefined":
            e["undefined"] = data.draw(VALUE, label="value")
        elif keys and change == "remove":
            del e[data.draw(st.sampled_from(keys), label="field")]
        elif keys:
            e[data.draw(st.sampled_from(keys), label="field")] = data.draw(VALUE, label="value")
        lines[at] = json.dumps(e, separators=(",", ":")).encode() + b"\n"
    return lines


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_fold_in_c_is_the_fold_of_the_lines_read_one_by_one(data: st.DataObject) -> None:
    lines = mutated(data, data.draw(st.sampled_from(sorted(ALL)), label="journal"))
    block = data.draw(st.sampled_from([journal.BLOCK, 1, 150, 4096]), label="block")
    piece = data.draw(st.sampled_from([journal.PIECE, 7, 300, 5000]), label="piece read")
    with (tempfile.TemporaryDirectory() as d, mock.patch.object(journal, "BLOCK", block),
          mock.patch.object(journal, "PIECE", piece)):
        path = Path(d) / "journal.jsonl"
        path.write_bytes(b"".join(lines))
        got = snapshot.read_folded(path, keep=False).state
        want = standard_fold(path.read_bytes())
    assert same(got) == same(want)


def test_boot_facts_of_two_windows_in_one_run_are_each_their_windows(tmp_path: Path) -> None:
    """Two places booting at once interleave their windows' boot facts: a run of facts in a block
    is of one window only when each fact says so, and a fact without its value is damage."""
    facts = [("s1", "control", "a", 1), ("s1", "control", "b", "x"), ("s1", "block5", "a", 2),
             ("s1", "control", "c", [3]), None, ("s1", "control", "d", 5),
             ("s2", "control", "b", None), None, ("s1", "block5", "c", 4),
             ("s1", "block5", "z", ...)]
    lines = []
    for seq, fact in enumerate(facts, 1):
        e: dict[str, Any] = {"seq": seq, "ts": 1.0, "kind": "quality_started", "session": "s1",
                             "window": "control"}  # between two runs of facts
        if fact is not None:
            session, window, key, value = fact
            e.update(kind="boot_fact", session=session, window=window, key=key)
            if value is not ...:
                e["value"] = value
        lines.append(json.dumps(e).encode() + b"\n")
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b"".join(lines))
    got = snapshot.read_folded(path, keep=False).state
    assert got.windows["s1-control"].facts == {"a": 1, "b": "x", "c": [3], "d": 5}
    assert got.windows["s1-block5"].facts == {"a": 2, "c": 4}
    assert got.windows["s2-control"].facts == {"b": None}
    assert [d.line for d in got.damage] == [10]
    assert same(got) == same(standard_fold(path.read_bytes()))


def test_each_structs_event_is_its_dict_as_to_builtins_makes_it() -> None:
    """A Struct whose events carry objects gives its own values (none copied): the same event,
    its keys in the same order, as msgspec.to_builtins gives."""
    shallow = {cls for cls, event in EVENT_OF.items() if event is not to_event}
    assert {TYPED[cls][0] for cls in shallow} >= {"window_ready"}
    seen = set()
    for e in EVENTS:
        try:
            t = decode_typed(json.dumps(e).encode())
        except msgspec.DecodeError:
            continue
        got = EVENT_OF[type(t)](t)
        assert list(got.items()) == list(to_event(t).items())
        seen.add(type(t))
    assert seen & shallow


def test_a_kind_folded_on_its_struct_folds_as_its_handler_does() -> None:
    """rep_done, folded from its Struct where it has every field it needs, changes the state as
    its handler does with the event's dict; where a field it needs is absent it folds nothing and
    says so (the dict, folded then, names the field)."""
    recorded = [e for e in EVENTS if e["kind"] == "rep_done"]
    assert recorded
    # Each also with a steady window's figure and the GPU's, and an open-loop rate.
    reps = recorded + [{**e, "steady_tok_s": e["agg_tok_s"] / 2, "gpu": {"power_w": 350.0},
                        "rate": 2.5} for e in recorded]
    for e in reps:
        for drop in [None, *sorted(set(e) - {"seq", "kind"})]:
            event = {k: v for k, v in e.items() if k != drop}
            on_struct, on_dict = RunState(), RunState()
            folded = fold._rep_done_typed(on_struct, decode_typed(json.dumps(event).encode()))
            try:
                fold._rep_done(on_dict, event)
            except KeyError:
                assert not folded and same(on_struct) == same(RunState())
                continue
            assert folded and same(on_struct) == same(on_dict), drop
