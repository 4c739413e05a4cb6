"""What the console says while an operator's rerun waits (issue 48: while a dying server took 15 s
to stop, the rep counter sat frozen with no word), a simulated acceptance, and the looks of boots
added until decided, on the every-kind journal (its s1-w: failed, its server stopping, its two
rows queued to rerun; a look that added session more1)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from engine.campaign.spec import VerdictSpec
from engine.commands.eta import load_plan
from engine.record.events import FORMAT
from engine.record.fold import fold
from engine.record.journal import read_events
from engine.record.state import RunState
from engine.run.runner import verdict_record
from tests.paths import FIXTURES
from tui.core.detail import detail
from tui.core.header import header_lines
from tui.core.listing import listed
from tui.core.reps import row_cells
from tui.core.rules import DECLARED, DEFAULT_RULE, verdict_rule
from tui.core.sorting import cell_text
from tui.core.windows import WINDOW_COLUMNS, phase, window_notes, window_status

EVENTS = read_events(FIXTURES / "fold" / "every-kind.jsonl")


def at(seq: int) -> RunState:
    return fold([e for e in EVENTS if e["seq"] <= seq])


def words(segs: list[tuple[str, str]]) -> str:
    return " ".join(t for t, _ in segs if t)


def test_a_stopping_server_and_a_queued_rerun_are_said_where_the_operator_looks() -> None:
    stopping = at(45)  # server_stopping: the failed window's server is going
    assert phase(stopping) == ("stopping its server", "warning")
    assert "server stopping" in cell_text(window_notes(stopping, "s1-w"))
    waiting = at(46)  # rerun_waiting: both its rows wait on that server
    said = "2 reruns queued, waiting on the server of s1-w to stop"
    assert window_status(waiting, "s1-w") == ("FAILED", "error")
    assert cell_text(window_notes(waiting, "s1-w")).startswith(said)
    head = header_lines(waiting, load_plan(waiting), "s1-w", (True, ""), EVENTS[45]["ts"])
    assert said in words(head[1])
    cells = row_cells(waiting.rows["s1-w/prose/c1"], 3, DECLARED,
                      waiting.reruns_waiting["s1-w/prose/c1"])
    assert cell_text(cells["status"]) == "rerun"
    assert cell_text(cells["why"]).startswith("rerun queued, waits on the server of s1-w to stop; ")
    row = detail(waiting, "s1-w/prose/c1", DECLARED, DEFAULT_RULE)
    assert row is not None and "rerun: queued, waiting on the server of s1-w to stop" in [
        words(line) for line in row.lines]
    stopped = at(47)  # the server stopped: the rows wait on the window's boot again
    assert phase(stopped) != ("stopping its server", "warning")
    assert "server stopping" not in cell_text(window_notes(stopped, "s1-w"))


def test_a_simulated_acceptance_says_simulated_beside_each_figure() -> None:
    """Issue 48: acceptance labelled natural or simulated, as the seed labels every number."""
    state = at(47)
    r = state.rows["s1-w/prose/c1"]
    r.row |= {"accept_len": 3.0, "accept_rate": 0.5, "acceptance": "simulated (SGLANG_SIMULATE_ACC_LEN=3)"}
    cells = row_cells(r, 3)
    assert cell_text(cells["acc len"]) == "3.00 sim" and cell_text(cells["acc rate"]) == "50.0% sim"
    d = detail(state, r.key, DECLARED, DEFAULT_RULE)
    assert d is not None
    line = next(words(x) for x in d.lines if words(x).startswith("acceptance"))
    assert line.endswith("simulated (SGLANG_SIMULATE_ACC_LEN=3)"), line
    r.row["acceptance"] = "natural"
    assert cell_text(row_cells(r, 3)["acc len"]) == "3.00"
    state.windows["s1-w"].simulated = "SGLANG_SIMULATE_ACC_LEN=3"
    assert "simulated acceptance" in cell_text(window_notes(state, "s1-w"))


def test_the_last_look_is_said_and_an_added_sessions_windows_are_listed_under_it() -> None:
    """Boots added until decided (issue 45): the header says the last look and what came of it;
    a session the look added lists its windows like any other, each with its window's one call."""
    state = at(67)  # verdict_look 1, then session_added more1
    head = header_lines(state, load_plan(state), None, (True, ""), EVENTS[66]["ts"])
    assert words(head[0]).endswith("· look 1: 1 undecided, booted again: w")
    rows = dict(listed(state, DEFAULT_RULE, "", None).rows)
    assert list(rows)[-3:] == ["more1-control", "more1-w", "more1-control-again"]
    call = WINDOW_COLUMNS.index("call")
    assert cell_text(rows["more1-w"][0]).strip() == "more1 w"
    assert rows["more1-w"][call] == rows["s1-w"][call] and cell_text(rows["more1-control"][call]) == ""


def test_the_console_judges_with_the_campaigns_own_rule_boots_added_until_decided_too(tmp_path: Path) -> None:
    """The console's calls are the engine's only with the same rule: a campaign whose boots are
    added until decided calls at each look's share of the error rate. The rule is run_started's;
    an older journal's is its frozen campaign's, read once as the journal is read."""
    text = ("verdict:\n  error_rate: 0.01\n  until_decided: true\n  max_boots: 12\n"
            "  max_minutes: 90\n  allow_different: true\n")
    declared = VerdictSpec.model_validate(yaml.safe_load(text)["verdict"]).rule()
    assert declared.until_decided and declared.max_boots == 12 and declared.max_minutes == 90
    started = {"seq": 1, "ts": 1.0, "kind": "run_started", "format": FORMAT, "campaign": "c", "run": "r",
               "runtime": "process", "server": "llamacpp", "pid": 1, "sessions": {}, "axes": {},
               "verdict": verdict_record(VerdictSpec.model_validate(yaml.safe_load(text)["verdict"]))}
    assert verdict_rule(fold([started])) == declared
    older = {k: v for k, v in started.items() if k not in ("format", "verdict")}
    (tmp_path / "journal.jsonl").write_text(json.dumps(older) + "\n")
    (tmp_path / "campaign.yaml").write_text(text)
    assert verdict_rule(fold(read_events(tmp_path / "journal.jsonl"))) == declared
    (tmp_path / "campaign.yaml").unlink()  # none to read: the spec's defaults, as the console had
    assert verdict_rule(fold(read_events(tmp_path / "journal.jsonl"))) == DEFAULT_RULE
