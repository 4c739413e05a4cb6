"""The journal survives a torn last line and keeps its sequence across reopenings."""

from __future__ import annotations

import json
from pathlib import Path

from engine.record.journal import Journal, read_events
from engine.record.state import fold


def test_events_are_numbered_and_readable(tmp_path: Path) -> None:
    j = Journal(tmp_path / "journal.jsonl")
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
    j = Journal(path)
    j.append("a")
    j.append("b")
    j.close()
    with path.open("ab") as f:
        f.write(b'{"seq": 3, "ts": 1, "kind": "c", "payl')  # power loss mid-write
    assert [e["kind"] for e in read_events(path)] == ["a", "b"]
    j = Journal(path)
    j.append("d")
    j.close()
    lines = path.read_bytes().splitlines()
    assert [json.loads(x)["kind"] for x in lines] == ["a", "b", "d"]
    assert [json.loads(x)["seq"] for x in lines] == [1, 2, 3]
