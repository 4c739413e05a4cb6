"""The console's Textual-free parts: following files in batches, and what the view derives."""

from __future__ import annotations

import dataclasses
import json
import re
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.commands.eta import LoadPlan, _rates, eta, load_plan
from engine.method import stats
from engine.record import snapshot
from engine.record.events import EventKind
from engine.record.fold import apply, fold, fold_read
from engine.record.journal import Event, JournalRead, read_events, read_journal
from engine.record.state import RunState
from engine.record.writer import JournalWriter
from engine.words import RowStatus, SessionStatus, Verdict, WindowStatus
from tests.paths import FIXTURES
from tui.core.columns import fit_columns
from tui.core.facts import facts_lines
from tui.core.fmt import fmt_secs
from tui.core.follow import Batch, Follower, Tail
from tui.core.header import header_lines
from tui.core.reps import REP_COLS, REP_COLUMNS, row_cells
from tui.core.rules import DEFAULT_RULE
from tui.core.sessions import session_args, session_paused, sessions_text
from tui.core.verdicts import VERDICT_SEGS, verdict_seg
from tui.core.versus import delta_cells, headline, reference, shape_deltas
from tui.core.windows import focus_window, phase, window_notes, window_rows, window_status

JOURNALS = FIXTURES / "journals"


# ------------------------------------------------------------------ Tail


def test_tail_hands_out_complete_lines_only(tmp_path: Path) -> None:
    p = tmp_path / "f"
    p.write_bytes(b"one\ntw")
    t = Tail(p)
    assert t.read(1 << 20) == [b"one"]
    with p.open("ab") as f:
        f.write(b"o\nthree\n")
    assert t.read(1 << 20) == [b"two", b"three"]
    assert t.read(1 << 20) == [] and t.at_eof


def test_tail_goes_on_after_a_torn_journal_tail_is_cut(tmp_path: Path) -> None:
    """The engine cuts a torn last line on resume; nothing is read twice or lost."""
    p = tmp_path / "journal.jsonl"
    j = JournalWriter(p)
    j.append("a")
    j.close()
    with p.open("ab") as f:
        f.write(b'{"seq":2,"ts":1,"ki')  # the write a kill -9 interrupted
    t = Tail(p)
    assert [json.loads(x)["kind"] for x in t.read(1 << 20)] == ["a"]
    j = JournalWriter(p)  # resume: truncates the torn line, appends after it
    j.append("b")
    j.close()
    assert [json.loads(x)["kind"] for x in t.read(1 << 20)] == ["b"]
    assert not t.reset


def test_tail_starts_over_when_the_file_is_replaced(tmp_path: Path) -> None:
    p = tmp_path / "f"
    p.write_bytes(b"old 1\nold 2\n")
    t = Tail(p)
    assert len(t.read(1 << 20)) == 2
    tmp = tmp_path / "g"
    tmp.write_bytes(b"new 1\n")
    tmp.replace(p)
    assert t.read(1 << 20) == [b"new 1"]
    assert t.reset


def test_tail_of_a_huge_log_reads_only_its_end(tmp_path: Path) -> None:
    p = tmp_path / "boot.log"
    p.write_bytes(b"".join(b"line %06d\n" % i for i in range(100_000)))
    t = Tail(p, start_from_end=64 * 1024)
    lines = t.read(1 << 20)
    assert lines[-1] == b"line 099999"
    assert all(x.startswith(b"line ") and len(x) == 11 for x in lines)  # no fragment first
    assert len(lines) < 64 * 1024 // 11 + 1


# ------------------------------------------------------------------ Follower


class Catcher:
    def __init__(self) -> None:
        self.batches: list[Batch] = []
        self.times: list[float] = []  # when each batch was handed over (monotonic)
        self.cond = threading.Condition()

    def __call__(self, b: Batch) -> None:
        with self.cond:
            self.batches.append(b)
            self.times.append(time.monotonic())
            self.cond.notify_all()

    def wait(self, pred: Callable[[list[Batch]], bool], timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        with self.cond:
            while not pred(self.batches):
                left = deadline - time.monotonic()
                assert left > 0, self.batches
                self.cond.wait(left)


class Turns(threading.Event):
    """The follower's stop event, which it asks once at the top of each turn of its loop: counting
    the asks, a test knows the follower has run whole turns (read both files, handed a batch over
    or not) since a moment, which proves what it did not hand over then."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []
        self.cond = threading.Condition()

    def __call__(self) -> bool:
        with self.cond:
            self.times.append(time.monotonic())
            self.cond.notify_all()
        return self.is_set()

    def wait_past(self, moment: float, turns: int = 2, timeout: float = 5.0) -> None:
        """Until `turns` turns have begun after `moment`: all but the last have ended."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while sum(t > moment for t in self.times) < turns:
                left = deadline - time.monotonic()
                assert left > 0, f"the follower ran no {turns} turns in {timeout} s"
                self.cond.wait(left)


def acking(run: Path, got: Catcher, **kw: Any) -> Follower:
    """A Follower whose every batch is caught, then acknowledged at once."""
    def post(b: Batch) -> None:
        got(b)
        f.ack()

    f = Follower(run, post, **kw)
    return f


def run_follower(f: Follower) -> tuple[threading.Thread, Turns]:
    stop = Turns()
    t = threading.Thread(target=f.run, args=(stop,), daemon=True)
    t.start()
    return t, stop


def test_follower_batches_and_waits_for_each_ack(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "windows/s1-control").mkdir(parents=True)
    (run / "journal.jsonl").write_bytes((JOURNALS / "booting/journal.jsonl").read_bytes())
    log = run / "windows/s1-control/boot.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    got = Catcher()
    # Every event handed over from the first (the plain follower's way): what is batched here.
    f = Follower(run, got, interval=0.02, max_log_lines=1000, from_snapshot=False)
    gen = f.watch_log("windows/s1-control/boot.log")
    t, stop = run_follower(f)
    try:
        got.wait(lambda bs: len(bs) >= 1)
        with log.open("a") as out:  # news, while the App has not acked the first batch
            out.write("line 100\n")
        # Turns begun an interval after the first batch and the news have read the news, and it
        # was due; all but the last have ended: none handed it over.
        stop.wait_past(max(got.times[0] + f.interval, time.monotonic()))
        assert len(got.batches) == 1  # no ack yet: nothing more is handed over
        first = got.batches[0]
        events = list(first.events)
        f.ack()
        got.wait(lambda bs: bs[-1].caught_up and any("line 100" in b.log for b in bs))
        f.ack()
        for b in got.batches[1:]:
            events += b.events
        assert events == read_events(run / "journal.jsonl")  # every event, once, in order
        lines = [x for b in got.batches if b.log_gen == gen for x in b.log]
        assert lines == [f"line {i}" for i in range(101)]
        assert got.batches[0].log_clear or any(b.log_clear for b in got.batches if b.log_gen == gen)

        # A flood while the App is busy (no ack): one batch goes out, the rest waits, bounded;
        # when the App catches up, the lines it missed are counted, not handed over.
        n = len(got.batches)
        with log.open("a") as out:
            out.write("".join(f"flood {i}\n" for i in range(5000)))
        got.wait(lambda bs: len(bs) > n)
        stop.wait_past(max(got.times[n] + f.interval, time.monotonic()))
        assert len(got.batches) == n + 1
        for _ in range(20):
            f.ack()
            time.sleep(0.02)
        got.wait(lambda bs: any("flood 4999" in b.log for b in bs))
        flood = [b for b in got.batches[n:] if any(x.startswith("flood") for x in b.log)]
        assert all(len(b.log) <= 1000 for b in got.batches)
        shown = sum(len(b.log) for b in flood)
        assert shown + sum(b.log_dropped for b in got.batches[n:]) == 5000
        assert shown < 5000
    finally:
        stop.set()
        t.join(timeout=5)


def test_follower_switches_logs_by_generation(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "a").mkdir(parents=True)
    (run / "b").mkdir()
    (run / "journal.jsonl").write_text("")
    (run / "a/boot.log").write_text("from a\n")
    (run / "b/boot.log").write_text("from b\n")
    got = Catcher()
    f = acking(run, got, interval=0.02)
    t, stop = run_follower(f)
    try:
        ga = f.watch_log("a/boot.log")
        got.wait(lambda bs: any(b.log_gen == ga and b.log for b in bs))
        gb = f.watch_log("b/boot.log")
        got.wait(lambda bs: any(b.log_gen == gb and b.log for b in bs))
        assert [x for b in got.batches if b.log_gen == gb for x in b.log] == ["from b"]
        assert next(b for b in got.batches if b.log_gen == gb).log_clear
    finally:
        stop.set()
        t.join(timeout=5)


def test_the_first_whole_screen_is_handed_over_at_once(tmp_path: Path) -> None:
    """The batch that first reads both files to their end (the console's "attached") goes out as
    soon as it is read and the one before it acknowledged, not an interval after that one: a
    log longer than a turn's read makes the first batch partial."""
    run = tmp_path / "run"
    (run / "windows/s1-control").mkdir(parents=True)
    (run / "journal.jsonl").write_bytes((JOURNALS / "booting/journal.jsonl").read_bytes())
    (run / "windows/s1-control/boot.log").write_text(("y" * 99 + "\n") * 4000)  # 400 kB
    got = Catcher()
    f = acking(run, got, interval=8.0)  # past the wait below; its turns sleep a quarter of it
    f.watch_log("windows/s1-control/boot.log")
    t, stop = run_follower(f)
    try:
        got.wait(lambda bs: bool(bs) and bs[-1].caught_up)  # within 5 s, never 8
    finally:
        stop.set()
        t.join(timeout=5)
    assert [b.caught_up for b in got.batches] == [False, True]


def test_follower_names_a_damaged_line_and_keeps_every_event_after_it(tmp_path: Path) -> None:
    """A garbage line is reported with its number (it used to be skipped in silence); a repeated
    seq appended later is reported by the fold; the console's header says so."""
    run = tmp_path / "run"
    run.mkdir()
    recorded = (JOURNALS / "measuring/journal.jsonl").read_bytes().splitlines(keepends=True)
    (run / "campaign.yaml").write_bytes((JOURNALS / "measuring/campaign.yaml").read_bytes())
    (run / "journal.jsonl").write_bytes(b"".join(recorded[:10] + [b"\x00\x00garbage\n"]
                                                 + recorded[10:200]))
    got = Catcher()
    f = acking(run, got, interval=0.02)
    t, stop = run_follower(f)
    try:
        got.wait(lambda bs: bool(bs) and bs[-1].caught_up)
        with (run / "journal.jsonl").open("ab") as out:
            out.write(b"\x00garbage again\n" + recorded[150] + b"".join(recorded[200:]))
        got.wait(lambda bs: sum(len(b.events) for b in bs) == len(recorded) - 200 + 1)
    finally:
        stop.set()
        t.join(timeout=5)
    # The lines there when it started are folded before the first batch (its base), their damage
    # with them; the damage written after is handed over with its line number.
    base = got.batches[0].base
    assert base is not None and [str(d) for d in base.damage] == ["line 11: not JSON: \\x00\\x00garbage"]
    assert [str(d) for b in got.batches for d in b.damage] == ["line 202: not JSON: \\x00garbage again"]
    st = console_fold(got.batches)
    assert [(d.line, d.reason) for d in st.damage] == [(11, "not JSON"), (202, "not JSON"),
                                                       (203, "seq 151 out of order (after 200)")]
    full = fold(read_events(JOURNALS / "measuring/journal.jsonl"))
    assert dataclasses.replace(st, damage=[]) == full
    wl = journal_plan("measuring")
    head = " ".join(t for line in header_lines(st, wl, st.current, (True, ""), 0.0)
                    for t, _ in line)
    assert "journal.jsonl damaged, line 11: not JSON: \\x00\\x00garbage (+2 more)" in head


def follow_until_caught_up(f: Follower, got: Catcher) -> None:
    t, stop = run_follower(f)
    try:
        got.wait(lambda bs: bool(bs) and bs[-1].caught_up)
    finally:
        stop.set()
        t.join(timeout=5)


def console_fold(batches: list[Batch]) -> RunState:
    """What the console folds from the batches (tui.app's on_followed)."""
    st = RunState()
    for b in batches:
        if b.base is not None:
            st = b.base
        st.damage += b.damage
        for line, e in zip(b.lines, b.events, strict=True):
            apply(st, e, line)
    return st


def test_the_follower_starts_from_the_snapshot_and_folds_only_the_events_after_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Attaching to a day-long run folds the snapshot's tail, not the journal from its first
    event, and hands over no event it folded; damage before and after the snapshot keeps its
    line numbers."""
    run = tmp_path / "run"
    run.mkdir()
    recorded = (JOURNALS / "finished/journal.jsonl").read_bytes().splitlines(keepends=True)
    lines = recorded[:10] + [b"garbage\n"] + recorded[10:300]
    (run / "journal.jsonl").write_bytes(b"".join(lines))
    read = read_journal(run / "journal.jsonl")
    snapshot.write(run / "journal.jsonl", fold_read(read), read.length, read.lines, read.last)
    with (run / "journal.jsonl").open("ab") as out:
        out.write(b"".join([recorded[250], b"[1]\n"] + recorded[300:320]))  # after the snapshot
    folded: list[int] = []  # the lines each fold read itself

    def counted(path: Path, start: int = 0, line: int = 0, crc: int | None = None,
                fold: Callable[[list[tuple[int, Event]]], object] | None = None) -> JournalRead:
        read = read_journal(path, start, line, crc, fold)
        folded.append(read.lines - line)
        return read

    monkeypatch.setattr(snapshot, "read_journal", counted)
    got = Catcher()
    f = acking(run, got, interval=0.02)
    t, stop = run_follower(f)
    try:
        got.wait(lambda bs: bool(bs) and bs[-1].caught_up)
        assert folded == [22]  # the lines after the snapshot's 301, and only those
        base = got.batches[0].base
        assert base is not None and base.last_seq == 320
        assert sum(len(b.events) for b in got.batches) == 0
        with (run / "journal.jsonl").open("ab") as out:  # the engine goes on
            out.write(b"".join(recorded[320:]))
        got.wait(lambda bs: sum(len(b.events) for b in bs) == len(recorded) - 320)
    finally:
        stop.set()
        t.join(timeout=5)
    st = console_fold(got.batches)
    whole = fold_read(read_journal(run / "journal.jsonl"))
    assert st == dataclasses.replace(whole, damage=st.damage)
    assert sorted((d.line, d.reason) for d in st.damage) == [(d.line, d.reason) for d in whole.damage] == [
        (11, "not JSON"), (302, "seq 251 out of order (after 300)"), (303, "not a JSON object")]

    # Without the snapshot (the plain follower, or a stale one), every event from the first.
    got = Catcher()
    f = acking(run, got, interval=0.02, from_snapshot=False)
    follow_until_caught_up(f, got)
    assert got.batches[0].base == RunState()
    assert [e for b in got.batches for e in b.events] == read_events(run / "journal.jsonl")
    assert console_fold(got.batches) == dataclasses.replace(whole, damage=console_fold(got.batches).damage)


def test_a_journal_without_a_snapshot_is_folded_once_and_its_snapshot_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An older ruler's run (no snapshot, or one refused): the console folds it before its first
    frame and, that frame handed over, keeps the snapshot, which the next reader takes."""
    monkeypatch.setattr(snapshot, "EVERY", 100)  # 1,000 lines in a run; the recorded journal has 341
    run = tmp_path / "run"
    run.mkdir()
    (run / "journal.jsonl").write_bytes((JOURNALS / "finished/journal.jsonl").read_bytes())
    got = Catcher()
    f = acking(run, got, interval=0.02)
    assert f.preload() == fold_read(read_journal(run / "journal.jsonl"))
    assert not snapshot.path_of(run / "journal.jsonl").exists()  # not before the first frame
    follow_until_caught_up(f, got)
    kept, why = snapshot.load(run / "journal.jsonl")
    assert why == "" and kept is not None and kept.lines == 341
    assert sum(len(b.events) for b in got.batches) == 0


def test_a_replaced_journal_starts_over_from_its_own_snapshot(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "journal.jsonl").write_bytes((JOURNALS / "booting/journal.jsonl").read_bytes())
    got = Catcher()
    f = acking(run, got, interval=0.02)
    t, stop = run_follower(f)
    try:
        got.wait(lambda bs: bool(bs) and bs[-1].caught_up)
        # No snapshot: the whole journal folded before the first batch, no event handed over.
        assert got.batches[0].base == fold_read(read_journal(run / "journal.jsonl"))
        assert sum(len(b.events) for b in got.batches) == 0
        n = len(got.batches)
        other = tmp_path / "other.jsonl"
        other.write_bytes((JOURNALS / "finished/journal.jsonl").read_bytes())
        JournalWriter(other).close()  # its writer leaves a snapshot of all of it
        snapshot.path_of(other).replace(snapshot.path_of(run / "journal.jsonl"))
        other.replace(run / "journal.jsonl")
        got.wait(lambda bs: any(b.base is not None for b in bs[n:]) and bs[-1].caught_up)
    finally:
        stop.set()
        t.join(timeout=5)
    fresh = [b for b in got.batches[n:] if b.base is not None]
    assert len(fresh) == 1 and fresh[0].base is not None and fresh[0].base.last_seq == 341
    assert console_fold(got.batches) == fold_read(read_journal(run / "journal.jsonl"))


# ------------------------------------------------------------------ view


def finished_state() -> tuple[RunState, LoadPlan]:
    return fold(read_events(JOURNALS / "finished/journal.jsonl")), journal_plan("finished")


def test_window_status_puts_the_worst_news_first() -> None:
    st, _ = finished_state()
    assert window_status(st, "s2-qv8") == ("REJECTED", "error")
    assert window_status(st, "s1-ctx") == ("1 void", "error")
    ws = st.windows["s1-ctx"]
    assert window_notes(st, "s1-ctx") == [("knobs act", "success"), ("greedy 20/20", "success")]
    ws.verdicts["no_effect"] = {"check": "no_effect", "verdict": "no observable effect",
                                "summary": "no observable effect"}
    assert window_status(st, "s1-ctx") == ("1 void", "error")
    st.rows["s1-ctx/code/c2"].status = "ok"
    assert window_status(st, "s1-ctx") == ("no effect", "warning")
    ws.verdicts["knobs"] = {"check": "knobs", "verdict": "ruler suspect",
                            "summary": "RULER SUSPECT: seed inert (same output)"}
    assert window_status(st, "s1-ctx") == ("ruler suspect", "error")
    ws.verdicts["greedy"] = {"check": "greedy", "verdict": "diverged",
                             "figures": {"identical": 17, "n": 20}}
    assert ("greedy 17/20", "error") in window_notes(st, "s1-ctx")


def test_the_console_shows_the_engines_verdict_words_and_guesses_none() -> None:
    """Each word the engine's checks emit has its own few words and colour; a word no check emits
    (the console used to colour "pass", "equivalent" and "bad") stands as it is, uncoloured."""
    assert set(Verdict) <= set(VERDICT_SEGS)
    assert verdict_seg({"check": "greedy", "verdict": "equivalent", "summary": "all equal"}) == (
        "greedy equivalent", "")
    assert verdict_seg({"check": "x", "verdict": "pass"}) == ("x pass", "")
    assert verdict_seg({"check": "knobs", "verdict": "bad"}) == ("knobs bad", "")
    assert verdict_seg({"check": "tool_probe", "verdict": "failed",
                             "figures": {"ok": 7, "n": 10}}) == ("tools 7/10", "error")


def test_a_knob_check_that_errored_is_not_a_ruler_suspect() -> None:
    """As for ``ruler status`` and throughput.csv's ruler_check: only "ruler suspect" is."""
    st, _ = finished_state()
    st.windows["s1-ctx"].verdicts["knobs"] = {"check": "knobs", "verdict": "error",
                                              "summary": "HTTPStatusError: 500"}
    st.rows["s1-ctx/code/c2"].status = "ok"  # no void row to outrank it
    assert window_status(st, "s1-ctx") == ("done", "success")
    assert ("knobs error", "error") in window_notes(st, "s1-ctx")


def test_headline_is_the_median_shapes_delta_with_its_interval() -> None:
    st, _ = finished_state()
    deltas = shape_deltas(st, "s1-ctx", DEFAULT_RULE)
    # Void rows carry polluted numbers: they are left out on both sides.
    assert [f"{d.row.cls} {d.row.load}" for d in deltas] == ["prose c1", "code c1"] or len(deltas) >= 1
    h = headline(st, "s1-ctx", DEFAULT_RULE)
    assert h is not None
    ordered = sorted(d.delta for d in deltas)
    middle = ordered[(len(ordered) - 1) // 2: len(ordered) // 2 + 1]
    assert h.delta == min(middle, key=abs)  # one shape's own: of two middle ones, nearer 0
    assert not h.provisional
    # A control is compared with the previous session's control: boot-to-boot drift.
    ref = reference(st, "s2-control")
    assert ref is not None and ref.key == "s1-control"
    assert reference(st, "s1-control") is None


def test_delta_says_why_when_the_control_has_nothing_to_compare_with() -> None:
    """A window whose control rows all went void had a blank Δ ctl and no reason on screen."""
    st, _ = finished_state()
    (d, style), ci = delta_cells(st, "s1-ctx", DEFAULT_RULE)
    assert re.fullmatch(r"[+-]\d+\.\d%", d) and style in ("success", "error", "")
    # One control boot a session and ctx in one session: no noise between boots measured, so no
    # interval (the detail view says why).
    assert ci[0] == ""
    for r in window_rows(st, "s1-control"):
        r.status = RowStatus.VOID
    assert delta_cells(st, "s1-ctx", DEFAULT_RULE)[0] == ("control void", "warning")
    st.rows["s1-control/code/c1"].status = RowStatus.FAILED
    assert delta_cells(st, "s1-ctx", DEFAULT_RULE)[0] == ("control unusable", "warning")
    st.windows["s1-control"].status = WindowStatus.REJECTED
    assert delta_cells(st, "s1-ctx", DEFAULT_RULE)[0] == ("control rejected", "warning")
    # Nothing measured yet on either side: blank, not a verdict.
    st, _ = finished_state()
    for r in window_rows(st, "s1-ctx"):
        r.status, r.row, r.reps = RowStatus.PENDING, {}, {}
    assert delta_cells(st, "s1-ctx", DEFAULT_RULE)[0] == ("", "")


def test_a_suspected_rep_is_marked_and_a_void_row_says_why() -> None:
    st, wl = finished_state()
    row = st.rows["s1-ctx/code/c2"]
    cells = row_cells(row, wl.reps)
    assert [t for t, _ in cells["reps tok/s"]] == ["7.2", "4.5!", "8.5"]
    assert cells["status"] == [("VOID", "error")]
    assert cells["why"][0][0] == "spread 58.9% > 10% at C2 after 2 attempts"
    assert all(style == "error" or style == "warning" for c in cells.values() for _, style in c)
    assert cells["att"][0][0] == "2"


def test_facts_panel_marks_what_differs_from_the_control() -> None:
    st, _ = finished_state()
    lines = facts_lines(st, "s1-ctx")
    changed = [t for t, s in lines if t.startswith("≠")]
    assert "≠ ctx.n_ctx 4096 ← 2048" in changed
    assert all(s == "warning" for t, s in lines if t.startswith("≠"))
    assert any(t.startswith("=") and "equal" in t for t, _ in lines)


def test_eta_without_the_work_of_a_pass_extrapolates_from_finished_windows() -> None:
    events = read_events(JOURNALS / "measuring/journal.jsonl")
    st = fold(events)
    wl = LoadPlan(shapes=4, reps=3)  # a journal and a campaign.yaml that do not say max_tokens
    now = events[-1]["ts"]
    left = eta(st, wl, now)
    # The fold keeps each window's start and end: s1's two windows took these.
    spans = [st.windows[k].ended_ts - st.windows[k].started_ts  # type: ignore[operator]  # both set
             for k in ("s1-control", "s1-ctx")]
    began = st.windows["s2-control"].started_ts
    assert began is not None and all(s > 0 for s in spans)
    # One pending window (s2-qv8) at the mean span, plus what is left of the current one.
    mean = sum(spans) / 2
    assert left == mean + max(0.0, mean - (now - began))
    assert fmt_secs(left).count(":") == 1


def _until(kind: str, nth: int = 1) -> tuple[RunState, float]:
    """The recorded run folded up to its nth event of ``kind``; and that event's time."""
    events = read_events(JOURNALS / "finished/journal.jsonl")
    hits = [i for i, e in enumerate(events) if e["kind"] == kind]
    cut = events[: hits[nth - 1] + 1]
    return fold(cut), cut[-1]["ts"]


def test_eta_comes_from_the_workload_once_the_first_rep_lands() -> None:
    """It was "~?" until a whole shape had finished. One rep gives a rate; the workload gives the
    rest: passes of requests x max_tokens tokens, a warm pass and the reps per shape."""
    wl = journal_plan("finished")
    assert (wl.classes, wl.concurrency, wl.requests, wl.max_tokens) == (
        ("prose", "code"), (1, 2), (2, 2), 16)
    st, now = _until("warm_done")
    assert eta(st, wl, now) is None  # no rep yet: nothing says how fast this server is
    st, now = _until("rep_done")
    rate = st.rows["s1-control/prose/c1"].reps[1][1]
    boot = st.windows["s1-control"].boot_s
    assert boot is not None
    pass_s = 2 * 16 / rate  # C2 is not measured yet: it takes C1's rate
    # This window: prose c1 has 2 of its 4 passes left (warm and rep 1 are done), 3 shapes x 4;
    # then three windows still to boot, each a boot and 4 shapes x 4 passes.
    expected = (2 + 3 * 4) * pass_s + 3 * (boot + 16 * pass_s)
    assert eta(st, wl, now) == pytest.approx(expected, rel=0, abs=1e-6)


def test_eta_is_refined_as_reps_land() -> None:
    wl = journal_plan("finished")
    st, now = _until("rep_done", 4)  # prose c1's three reps, prose c2's first
    c1 = list(st.rows["s1-control/prose/c1"].reps[1].values())
    c2 = list(st.rows["s1-control/prose/c2"].reps[1].values())
    assert len(c1) == 3 and len(c2) == 1
    # A pass's time is its tokens over the rate: the mean time is tokens / the harmonic mean.
    p1, p2 = 32 / statistics.harmonic_mean(c1), 32 / c2[0]
    boot = st.windows["s1-control"].boot_s or 0.0
    # prose c2: 2 passes left; code c1 and c2: 4 each; three windows to come, 8 passes per C.
    expected = 2 * p2 + 4 * p1 + 4 * p2 + 3 * (boot + 8 * p1 + 8 * p2)
    assert eta(st, wl, now) == pytest.approx(expected, rel=0, abs=1e-6)
    # A finished window teaches what the passes do not: its quality checks, its reruns.
    st, now = _until("window_finished")
    done = st.windows["s1-control"]
    rates = _rates(st)
    passes = 2 * (32 / rates[1] + 32 / rates[2]) * 4  # 2 classes x (C1 + C2) x 4 passes
    assert done.ended_ts is not None and done.started_ts is not None
    after = done.ended_ts - done.started_ts - (done.boot_s or 0.0) - passes
    assert after > 0  # two rows were rerun in that window
    expected = 3 * ((done.boot_s or 0.0) + passes + after)
    assert eta(st, wl, now) == pytest.approx(expected, rel=0, abs=1e-6)


def test_eta_shares_the_work_left_between_places_running_at_once() -> None:
    wl = journal_plan("finished")
    st, now = _until("rep_done")
    alone = eta(st, wl, now)
    per_session = {s: sum(1 for k in st.order if k.startswith(s + "-")) for s in ("s1", "s2")}
    assert per_session == {"s1": 2, "s2": 2}
    # s2's control waits in a second place's batch queue while s1's control measures: two lanes.
    st.windows["s2-control"].status = WindowStatus.QUEUED
    both = eta(st, wl, now)
    assert both is not None and alone is not None and both < alone
    st.windows["s2-control"].status, st.windows["s2-control"].started_ts = WindowStatus.BOOTING, now
    assert eta(st, wl, now) == both  # booting from now: a full boot still, as when queued
    # Never less than what s1 alone still has to do (it runs on one place from start to end).
    st2, _ = _until("rep_done")
    st2.windows["s2-control"].status = st2.windows["s2-qv8"].status = WindowStatus.DONE
    s1_alone = eta(st2, wl, now)
    assert s1_alone is not None and both >= s1_alone


def journal_plan(name: str) -> LoadPlan:
    """The load plan of a recorded run, as its journal reads (a format 1 journal upgraded)."""
    return load_plan(fold(read_events(JOURNALS / name / "journal.jsonl")))


def test_the_workload_comes_from_run_started(tmp_path: Path) -> None:
    st = fold(read_events(JOURNALS / "booting/journal.jsonl"))  # format 1: from campaign.yaml
    # 2 classes x 2 concurrencies, 3 reps, 2 requests of 16 tokens a pass
    assert load_plan(st) == LoadPlan(4, 3, ("prose", "code"), (1, 2), (2, 2), 16)
    (tmp_path / "journal.jsonl").write_bytes((JOURNALS / "booting/journal.jsonl").read_bytes())
    assert load_plan(fold(read_events(tmp_path / "journal.jsonl"))) == LoadPlan()  # no campaign
    st.workload = {"classes": ["prose", "code", "tools"], "concurrency": [1, 8], "reps": 5,
                   "requests": [4, 16], "max_tokens": 512}
    wl = load_plan(st)
    assert wl == LoadPlan(6, 5, ("prose", "code", "tools"), (1, 8), (4, 16), 512)
    assert (wl.pass_tokens(1), wl.pass_tokens(8), wl.pass_tokens(4)) == (4 * 512, 16 * 512, None)
    st.workload = {"classes": ["prose"], "concurrency": [1], "reps": 3}  # before it carried the work
    assert load_plan(st) == LoadPlan(1, 3, ("prose",), (1,))


def test_the_header_tells_a_pause_asked_for_from_a_pause_in_effect() -> None:
    events = read_events(JOURNALS / "measuring/journal.jsonl")
    st, seq, now = fold(events), events[-1]["seq"], events[-1]["ts"]
    wl = journal_plan("measuring")

    def head() -> str:
        return " ".join(t for line in header_lines(st, wl, st.current, (True, ""), now)
                        for t, _ in line)

    where = {"session": "s2", "window": "control", "class": "code", "concurrency": 1}
    fold([{"seq": seq + 1, "ts": now, "kind": "command", "cmd": "pause", "args": [], "reply": ""}], st)
    assert "pausing after this rep" in head() and "PAUSED" not in head()
    fold([{"seq": seq + 2, "ts": now, "kind": "paused", **where, "attempt": 1, "rep": 3}], st)
    assert "PAUSED" in head() and "pausing" not in head()
    fold([{"seq": seq + 3, "ts": now, "kind": "command", "cmd": "resume", "args": [], "reply": ""}], st)
    assert "PAUSED" not in head() and "pausing" not in head()


def test_quality_started_puts_the_window_in_the_quality_phase() -> None:
    events = read_events(JOURNALS / "measuring/journal.jsonl")
    st, seq, ts = fold(events), events[-1]["seq"], events[-1]["ts"]
    for r in window_rows(st, "s2-control"):
        r.status = "ok"  # the shapes are over: what comes next is the quality phase
    assert phase(st) == ("measuring", "muted")
    fold([{"seq": seq + 1, "ts": ts, "kind": EventKind.QUALITY_STARTED, "session": "s2",
           "window": "control"}], st)
    assert phase(st) == ("quality", "accent")
    assert window_status(st, "s2-control") == ("quality", "accent")  # the windows list too
    fold([{"seq": seq + 2, "ts": ts, "kind": "quality_done", "session": "s2", "window": "control",
           "status": "done"}], st)
    assert phase(st) == ("measuring", "muted")


# ------------------------------------------------------------------ sessions on places


def places_state() -> tuple[RunState, LoadPlan, int, float]:
    """The recorded two-place run (fixtures/journals/places): s1's ctx on place a and s2's ctx on
    place b both measuring, s3 waiting; with its last seq and time, to append to."""
    events = read_events(JOURNALS / "places/journal.jsonl")
    wl = journal_plan("places")
    return fold(events), wl, events[-1]["seq"], events[-1]["ts"]


def lines(state: RunState, wl: LoadPlan, shown: str | None, now: float) -> list[str]:
    return [" ".join(t for t, _ in line)
            for line in header_lines(state, wl, shown, (True, ""), now)]


def test_every_live_window_is_in_the_header_with_its_place_shape_and_rep() -> None:
    """The header showed the last window started, its shape and rep: with two places measuring
    it flipped between them at every window_started. Now a line per place; ▸ marks the one
    under the cursor (the one the window keys act on)."""
    st, wl, _, now = places_state()
    assert [w.key for w in st.live] == ["s1-ctx", "s2-ctx"]
    assert st.current == "s2-ctx"
    head = lines(st, wl, "s1-ctx", now)
    assert head[0] == "tui-places · sessions 2 running, 1 queued, 0 done · 0:57 ~1:21 left"
    assert head[1] == "● engine connected · axis: context 4096"
    assert head[2:] == ["▸ place a · s1 ctx · prose c2 attempt 2 rep 3/3",
                        "  place b · s2 ctx · code c1 attempt 1 rep 3/3"]
    assert [h[0] for h in lines(st, wl, "s2-qv8", now)[2:]] == [" ", "▸"]  # s2's window, b's mark
    # One session at a time (no places): the two lines of before, the current window's.
    single = fold(read_events(JOURNALS / "measuring/journal.jsonl"))
    assert len(lines(single, wl, "s1-ctx", now)) == 2


def test_sessions_are_counted_running_queued_and_done() -> None:
    """Done: every window complete (a rejected one is); queued: not begun; running in between."""
    events = read_events(JOURNALS / "places/journal.jsonl")
    st = fold(events[:1])  # run_started: nothing begun
    assert sessions_text(st) == "sessions 0 running, 3 queued, 0 done"
    st = fold(events[:2])  # session_started s1 on place a: begun before any window of it
    assert sessions_text(st) == "sessions 1 running, 2 queued, 0 done"
    st, _, seq, ts = places_state()
    where = {"session": "s2", "window": "ctx"}
    fold([{"seq": seq + 1, "ts": ts, "kind": "window_finished", **where, "status": "done"}], st)
    assert [st.windows[k].status for k in st.order if k.startswith("s2-")] == [
        "done", "rejected", "done"]
    assert sessions_text(st) == "sessions 1 running, 1 queued, 1 done"
    assert st.session_status() == {"s1": SessionStatus.RUNNING, "s2": SessionStatus.DONE,
                                   "s3": SessionStatus.QUEUED}
    fold([{"seq": seq + 2, "ts": ts, "kind": "session_started", "session": "s3", "place": "b"},
          {"seq": seq + 3, "ts": ts, "kind": "window_started", "session": "s3", "window": "control",
           "axis": "control", "log": "windows/s3-control/boot.log"}], st)
    assert sessions_text(st) == "sessions 2 running, 0 queued, 1 done"
    wl = journal_plan("places")
    assert lines(st, wl, "s3-control", ts)[2:] == ["  place a · s1 ctx · prose c2 "
                                                   "attempt 2 rep 3/3",
                                                   "▸ place b · s3 control · booting"]
    fold([{"seq": seq + 4, "ts": ts, "kind": "run_finished", "status": "aborted"}], st)
    assert sessions_text(st) == "sessions 2 stopped, 1 done"


def test_the_window_keys_name_the_session_under_the_cursor() -> None:
    """advance, rewarm and pause sent no session, which the engine refuses while two run."""
    st, _, seq, ts = places_state()
    assert session_args(st, "s1-ctx") == ["s1"]
    assert session_args(st, "s2-ctx") == ["s2"]
    assert session_args(st, "s2-control") == ["s2"]  # a done window of a running session
    assert session_args(st, "s3-ctx") is None  # s3 has not begun: which of s1, s2 is meant?
    # One session left running: it is the one, wherever the cursor is.
    fold([{"seq": seq + 1, "ts": ts, "kind": "window_finished", "session": "s2", "window": "ctx",
           "status": "done"}], st)
    assert session_args(st, "s3-ctx") == session_args(st, "s2-ctx") == ["s1"]
    # Sessions one at a time (no places): sent as before, naming none.
    single = fold(read_events(JOURNALS / "measuring/journal.jsonl"))
    assert session_args(single, "s2-control") == session_args(single, "s1-ctx") == []


def test_a_pause_is_per_session_on_places() -> None:
    """pause s1 pauses s1 only: its place says so, and p on s2's window still pauses."""
    st, wl, seq, ts = places_state()
    cmd = {"kind": "command", "who": {}, "reply": ""}
    fold([{"seq": seq + 1, "ts": ts, **cmd, "cmd": "pause", "args": ["s1"]}], st)
    assert (session_paused(st, "s1"), session_paused(st, "s2")) == (True, False)
    assert lines(st, wl, "s2-ctx", ts)[2:] == [
        "  place a · s1 ctx · prose c2 attempt 2 rep 3/3 pausing after this rep",
        "▸ place b · s2 ctx · code c1 attempt 1 rep 3/3"]
    fold([{"seq": seq + 2, "ts": ts, "kind": "paused", "session": "s1", "window": "ctx",
           "class": "prose", "concurrency": 2, "attempt": 2, "rep": 3}], st)
    assert lines(st, wl, "s1-ctx", ts)[2].endswith("rep 3/3 PAUSED")
    del st.rows["s1-ctx/prose/c2"]  # between two shapes: the window's phase instead
    assert lines(st, wl, "s1-ctx", ts)[2] == "▸ place a · s1 ctx · measuring PAUSED"
    assert st.paused and st.pause_held  # ruler status: some session is paused
    fold([{"seq": seq + 3, "ts": ts, **cmd, "cmd": "resume", "args": ["s1"]}], st)
    assert not session_paused(st, "s1") and not st.paused and "PAUSED" not in " ".join(
        lines(st, wl, "s1-ctx", ts))


def test_the_window_on_screen_follows_its_place_not_the_last_window_started() -> None:
    """The reps, the chart, the facts and the log show focus_window(): it was the window started
    last, so with two places it flipped between them. Now it follows the shown window's place."""
    st, _, seq, ts = places_state()
    assert focus_window(st, "s2-ctx") == "s2-ctx"
    assert focus_window(st, "s1-ctx") == "s1-ctx"  # not the current one, s2-ctx
    assert focus_window(st, "s1-control") == "s1-ctx"  # its place's live window
    assert focus_window(st, "s3-control") == "s2-ctx"  # no place yet: the current one
    assert focus_window(st, None) == "s2-ctx"
    fold([{"seq": seq + 1, "ts": ts, "kind": "window_finished", "session": "s1", "window": "ctx",
           "status": "done"}], st)
    assert focus_window(st, "s1-ctx") == "s1-ctx"  # between a's windows: stays
    fold([{"seq": seq + 2, "ts": ts, "kind": "window_started", "session": "s1", "window": "qv8",
           "axis": "q8", "log": "windows/s1-qv8/boot.log"}], st)
    assert st.current == "s1-qv8"
    assert focus_window(st, "s1-ctx") == "s1-qv8"
    assert focus_window(st, "s2-ctx") == "s2-ctx"  # b's window stays on screen


# ------------------------------------------------------------------ fitting columns to a width


@given(widths=st.lists(st.integers(2, 60), min_size=len(REP_COLS), max_size=len(REP_COLS)),
       room=st.integers(0, 250))
def test_fitted_columns_never_overflow_and_go_by_rank(widths: list[int], room: int) -> None:
    cols = REP_COLS
    want = {c.name: w for c, w in zip(cols, widths, strict=True)}
    shown = fit_columns(cols, want, room)
    core = [c.name for c in cols if c.rank == 0]
    assert [c for c in core if c in shown] == core  # always there
    assert list(shown) == [c.name for c in cols if c.name in shown]  # in display order
    if sum(want[c] for c in core) <= room:
        assert sum(shown.values()) <= room  # whole columns, never one over another
    by_name = {c.name: c for c in cols}
    for name, w in shown.items():
        c = by_name[name]
        assert w == want[name] or (c.cut and c.cut <= w < want[name]) or (c.rank == 0 and c.cut)
    left = room - sum(shown.values())
    for c in cols:  # a column left out did not fit even at its cut
        if c.name not in shown:
            assert min(want[c.name], c.cut or want[c.name]) > left
        elif shown[c.name] < want[c.name] and c.rank:  # a cut one had nothing more to take
            assert left == 0


def test_a_long_reason_is_cut_before_it_pushes_other_columns_out() -> None:
    widths = {"shape": 9, "reps tok/s": 14, "median": 7, "spread": 7, "status": 7, "att": 4,
              "user": 5, "acc len": 8, "acc rate": 9, "req/s": 6, "good/s": 7, "ttft ms": 8, "acc pos": 0,
              "why": 44}
    at = {room: fit_columns(REP_COLS, widths, room) for room in (43, 61, 95, 108, 135)}
    # The reps, the median and the spread are never dropped: on the narrowest, the reps are cut.
    assert at[43] == {"shape": 9, "reps tok/s": 14 - 1, "median": 7, "spread": 7, "status": 7}
    assert at[61]["why"] == 61 - 44 and "acc rate" not in at[61]  # a void reason, cut
    # The request rates go before the other figures (the attempt, narrower, still fits): every
    # other column, the reason cut, first.
    # No drafting: the per-position column has nothing to show and takes no room.
    rates, shown = ["req/s", "good/s"], [c for c in REP_COLUMNS if c != "acc pos"]
    assert list(at[95]) == [c for c in shown if c not in rates] and at[95]["why"] == 95 - 94 + 16
    assert list(at[108]) == shown and at[108]["why"] == 108 - 107 + 16  # all, why cut
    assert "att" not in fit_columns(REP_COLS, {**widths, "att": 7}, 95)  # no room: the attempt goes
    assert at[135] == {k: w for k, w in widths.items() if w}  # room for everything: nothing cut


def test_a_column_with_nothing_to_show_takes_no_room() -> None:
    widths = {"shape": 9, "reps tok/s": 14, "median": 7, "spread": 7, "status": 7, "att": 4,
              "user": 5, "acc len": 0, "acc rate": 0, "req/s": 0, "good/s": 0, "ttft ms": 8, "acc pos": 0,
              "why": 44}
    shown = fit_columns(REP_COLS, widths, 200)
    assert "acc len" not in shown and "req/s" not in shown and shown["why"] == 44


def test_a_rate_row_shows_its_finished_rate_and_goodput_and_dash_without_slos() -> None:
    """A rate sweep is read by each row's finished requests a second and, of them, those within
    the SLOs: the reps table shows both as the row_done event carries them (stats.row_figures),
    and "-" for goodput where no SLO is set."""
    def request(start: float, ttft: float, end: float) -> dict[str, object]:
        return {"start": start, "first_token": start + ttft, "end": end, "completion_tokens": 11,
                "chunks": 11, "gaps_ms": [40.0] * 10, "error": None}

    # Four requests over 2 s, one of them past the 200 ms TTFT: 2.00 finished a second, 1.50 good.
    records = [request(0.0, 0.1, 0.5), request(0.5, 0.1, 1.0), request(1.0, 0.3, 1.5),
               request(1.5, 0.1, 2.0)]
    reps = [({"rep": 1}, records), ({"rep": 2}, records)]
    policy = stats.LeakPolicy()
    slo = stats.Slo(ttft_ms=200, tpot_ms=50)
    state = RunState()
    for seq, (rate, figures) in enumerate(((2.0, stats.row_figures(reps, 0, policy, slo)),
                                           (4.0, stats.row_figures(reps, 0, policy))), start=1):
        apply(state, {"seq": seq, "ts": 1.0, "kind": EventKind.ROW_DONE, "session": "s1",
                      "window": "control", "class": "prose", "concurrency": 0, "rate": rate,
                      "axis": "control", "attempts": 1, "reason": "", "source": "", **figures})
    with_slo, without = state.rows["s1-control/prose/r2"], state.rows["s1-control/prose/r4"]
    cells = row_cells(with_slo, 2)
    assert cells["shape"][0][0] == "prose r2"
    assert (cells["req/s"][0][0], cells["good/s"][0][0]) == ("2.00", "1.50")
    cells = row_cells(without, 2)
    assert (cells["req/s"][0][0], cells["good/s"][0][0]) == ("2.00", "-")
    # A row recorded before open-loop load carries neither: "-", not an error.
    st, wl = finished_state()
    cells = row_cells(st.rows["s1-ctx/code/c2"], wl.reps)
    assert (cells["req/s"][0][0], cells["good/s"][0][0]) == ("-", "-")
