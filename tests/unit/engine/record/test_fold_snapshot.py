"""The fold, the progress lines and ``ruler status`` say what they said before the fold became a
table of handlers and its consumers took their words from engine.record.events.

The expected states under fixtures/fold/ were written by the elif-chain fold (commit d0aa5d8) over
every recorded journal in fixtures/journals/ and over fixtures/fold/every-kind.jsonl, a hand-written
journal in the shapes the engine emits that holds each of the 28 event kinds (the recorded ones
lack operator commands, pauses, reruns, quality, errors and resumes). Each snapshot holds the final
state in full and a digest of the state after every event, so a difference in passing (a flag set
and cleared) shows too. Fields added to the state later are outside these snapshots. Beside each:
the headless progress line of every event (``.progress.txt``) and ``ruler status`` (``.status.txt``),
written by the code of commit ef1a1f3.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from engine.commands.invocation import ruler_command
from engine.commands.progress import format_event
from engine.commands.status import format_summary, summary
from engine.record.fold import apply
from engine.record.journal import read_events
from engine.record.state import RunState
from tests.paths import FIXTURES
from tests.unit.helpers import JOURNALS, plain


def only(state: dict[str, Any], keys: dict[str, Any]) -> dict[str, Any]:
    """``state`` cut down to the fields of a snapshot (nested in windows and rows)."""
    def cut(d: dict[str, Any], like: dict[str, Any]) -> dict[str, Any]:
        return {k: d.get(k) for k in like}
    out = cut(state, keys)
    w_like: dict[str, Any] = next(iter(keys["windows"].values()), {})
    r_like: dict[str, Any] = next(iter(keys["rows"].values()), {})
    out["windows"] = {k: cut(v, w_like) if w_like else v for k, v in state["windows"].items()}
    out["rows"] = {k: cut(v, r_like) if r_like else v for k, v in state["rows"].items()}
    return out


def digest(d: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


def fold_trace(path: Path, like: dict[str, Any] | None) -> tuple[dict[str, Any], list[str]]:
    state, trace = RunState(), []
    for e in read_events(path):
        apply(state, e)
        now = plain(state)
        trace.append(digest(only(now, like) if like else now))
    final = plain(state)
    return (only(final, like) if like else final), trace


@pytest.mark.parametrize("name", sorted(JOURNALS))
def test_the_fold_of_each_journal_matches_its_snapshot(name: str) -> None:
    snap = json.loads((FIXTURES / "fold" / f"{name}.state.json").read_text())
    final, trace = fold_trace(JOURNALS[name], snap["state"])
    assert final == snap["state"]
    assert trace == snap["trace"]



def progress_lines(path: Path) -> str:
    return "".join(f"{line}\n" for e in read_events(path) if (line := format_event(e)) is not None)


def status_text(path: Path, tmp: Path) -> str:
    """``ruler status`` of the journal, alone in a run directory of its own (no engine holds it)."""
    (tmp / "journal.jsonl").write_bytes(path.read_bytes())
    # ruler as this environment finds it (on the PATH or not): named "ruler" in the snapshot.
    text = format_summary(summary(tmp)).replace(f"{ruler_command()} run", "ruler run")
    return text.replace(str(tmp), "RUN_DIR") + "\n"


@pytest.mark.parametrize("name", sorted(JOURNALS))
def test_progress_lines_and_status_match_their_snapshots(name: str, tmp_path: Path) -> None:
    assert progress_lines(JOURNALS[name]) == (FIXTURES / "fold" / f"{name}.progress.txt").read_text()
    assert status_text(JOURNALS[name], tmp_path) == (FIXTURES / "fold" / f"{name}.status.txt").read_text()


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    # Only for a deliberate change of the fold's meaning; say why in the commit.
    for name, path in JOURNALS.items():
        final, trace = fold_trace(path, None)
        (FIXTURES / "fold" / f"{name}.state.json").write_text(
            json.dumps({"state": final, "trace": trace}, indent=1, sort_keys=True) + "\n")
        (FIXTURES / "fold" / f"{name}.progress.txt").write_text(progress_lines(path))
        with tempfile.TemporaryDirectory() as tmp:
            (FIXTURES / "fold" / f"{name}.status.txt").write_text(status_text(path, Path(tmp)))
