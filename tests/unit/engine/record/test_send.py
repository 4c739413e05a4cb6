"""The typed send (engine.record.send) declares each kind's fields as engine.record.events does:
one overload per kind, its keywords the kind's TypedDict, so mypy's check at the send and the
run-time check of the journal are of one schema."""

from __future__ import annotations

import typing

from engine.record.events import FIELDS, EventKind, RowDone
from engine.record.send import Emit, RowWords


def _sent() -> dict[EventKind, type]:
    """Each overload's kind and the TypedDict its keywords unpack."""
    out: dict[EventKind, type] = {}
    for sig in typing.get_overloads(Emit.__call__):
        hints = typing.get_type_hints(sig)
        (kind,) = typing.get_args(hints["kind"])
        (fields,) = typing.get_args(hints["data"])  # Unpack[TD]
        assert kind not in out, f"{kind} has two overloads"
        out[kind] = fields
    return out


def test_every_kind_is_sent_with_its_declared_fields() -> None:
    sent = _sent()
    assert list(sent) == list(FIELDS)  # every kind, in the schema's order
    for kind, fields in sent.items():
        if kind == EventKind.ROW_DONE:
            continue
        assert fields is FIELDS[kind], kind


def test_a_row_done_is_sent_with_the_words_every_row_has() -> None:
    """A row's figures are spread in from the statistics: the send types its words, which are the
    row_done fields the figures' declaration requires, with their types."""
    assert _sent()[EventKind.ROW_DONE] is RowWords
    required: frozenset[str] = RowDone.__required_keys__  # type: ignore[attr-defined]  # built at run time
    assert RowWords.__required_keys__ == required
    assert RowWords.__optional_keys__ == {"rate"}  # the shape's
    row = typing.get_type_hints(RowDone)
    assert typing.get_type_hints(RowWords) == {k: row[k] for k in ("rate", *required)}
