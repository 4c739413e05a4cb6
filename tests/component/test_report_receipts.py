"""``ruler report`` says where its figures come from: the receipts the rows name, unless some of
them are missing or cut short, which the report then names rather than claiming them. A run of
the real engine on the FAKE server (tests/component/fakes.py), its receipts then damaged."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.report import load_run, render
from tests.component.fakes import Behaviour
from tests.component.helpers import run_with


def test_a_truncated_or_missing_receipt_is_named_not_claimed(tmp: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    run, _ = run_with(tmp, Behaviour(), monkeypatch)
    whole = render(load_run(run), [], "no charts in this test")
    assert "the per-request receipts it names and the journal" in whole
    reps = sorted((run / "windows").glob("*/reps/*-1-1.jsonl"))
    cut, gone = reps[0], reps[1]
    cut.write_bytes(cut.read_bytes()[:-40])  # torn mid-record, as a full or failing disk leaves it
    gone.unlink()
    text = render(load_run(run), [], "no charts in this test")
    assert "the per-request receipts it names" not in text
    rel = [str(p.relative_to(run)) for p in (cut, gone)]
    assert "**2 receipts it names cannot back them" in text
    assert f"{rel[0]} (truncated or damaged)" in text and f"{rel[1]} (No such file or directory)" in text
