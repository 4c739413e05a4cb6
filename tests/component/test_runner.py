"""The run loop (engine.run.runner.Runner with Measurement, and Quality) against a FAKE server.

Every test here runs the real Runner, phases, journal, fold and receipts; only the server is fake:
tests/component/fakes.py (an in-process stand-in for llama-server, with real recorded boot logs) and
its runtime. The fake injects what a real server cannot do on cue (a slow rep, a death mid-stream,
a hang, a boot that never becomes ready); :class:`fakes.Hooks` flips it the moment the engine
journals the event a test names. The same paths on the real llama-server are in
tests/integration/ (test_run, test_leak, test_failures, test_control).
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from engine.commands.eta import LoadPlan
from engine.commands.status import format_summary, summary
from engine.control import CommandRefused
from engine.method.stats import LeakPolicy
from engine.quality import Quality
from engine.record import results
from engine.record.fold import fold
from engine.record.journal import Event, read_events
from engine.record.receipts import read_rep
from engine.run import loadgen
from engine.run.attempt import CLIENT_STALL_RERUNS
from engine.run.client.record import Events
from engine.run.measure import Measurement, recompute_row
from engine.words import RunStatus
from tests.campaigns import CTX, LEAKY, campaign
from tests.component.fakes import LOGS, Behaviour, FakeRuntime, FakeServer, Hooks, by_window
from tests.component.helpers import PACE, WHO, events, rows, runner, slow_rep_two
from tui.core.detail import detail
from tui.core.header import header_lines
from tui.core.rules import DECLARED, DEFAULT_RULE
from tui.core.sorting import cell_text
from tui.core.versus import delta_cells, row_delta

pytestmark = pytest.mark.timeout(60)

QUALITY = {"greedy": {"n": 2, "max_tokens": 8}, "teacher_forced": {"positions": 2}}


def test_a_clean_campaign_gives_its_rows_and_verdicts(tmp: Path, fake: FakeRuntime) -> None:
    spec = campaign("clean", CTX, {"s1": ["ctx"]},
                    classes={"prose": {"prompts": ["Write one sentence about the sea."]},
                             "code": {"prompts": ["Write a Python function that adds two numbers."]}},
                    concurrency=[1, 4], requests_per_rep=4,
                    quality={"greedy": {"n": 2, "max_tokens": 8}, "teacher_forced": {"positions": 2}})
    r = runner(tmp, spec, fake, phases=[Measurement(), Quality()])
    assert r.run() == "finished"
    run = r.run_dir
    got = rows(run)
    assert sorted(got) == sorted(f"s1-{w}/{c}/c{n}" for w in ("control", "ctx")
                                 for c in ("prose", "code") for n in (1, 4))
    policy = LeakPolicy(8, 0.9, 1)
    for key, row in got.items():
        # Noisy is a busy host's jitter in the fake's pace (on a loaded CI box the reps of these
        # short rows spread past leak.spread); never void, rerun or short of reps.
        assert row["status"] in ("ok", "noisy") and (row["attempts"], row["reps"]) == ("1", "3"), key
        # Acceptance from the /metrics delta (engine.method.acceptance): the counts the fake's
        # requests each reported (timings) add up to the row's, rep by rep.
        assert row["accept_source"] == "metrics"
        reps = [read_rep(run / p) for p in row["source"].split(";")]
        for header, records in reps:
            for k in ("drafted", "accepted"):
                assert sum(r["acceptance"][k] for r in records) == header["metrics_delta"][k], (key, k)
        total = {k: sum(h["metrics_delta"][k] for h, _ in reps) for k in ("drafts", "drafted", "accepted")}
        assert float(row["accept_len"]) == round(1 + total["accepted"] / total["drafts"], 4)
        assert float(row["accept_rate"]) == round(total["accepted"] / total["drafted"], 4)
        curve = [float(x) for x in row["accept_per_pos"].split()]
        assert len(curve) == 2 and curve[0] >= curve[1]
        assert sum(curve) == pytest.approx(float(row["accept_len"]) - 1, abs=0.02)
        assert row["accept_len_lo"] and row["accept_rate_hi"]  # three reps: an interval
        # Each rep's own curve is journaled with it, as the row's per-rep lists are.
        done = events(run, "rep_done", session="s1", window=key.split("/")[0][3:],
                      **{"class": row["class"]}, concurrency=int(row["concurrency"]))
        assert [len(e["accept_per_pos"]) for e in done] == [2, 2, 2]
        again = recompute_row(run, row["source"], int(row["concurrency"]), policy)
        assert float(row["agg_tok_s"]) == pytest.approx(again["agg_tok_s"])
        # A request lasts at least the fake's sleeps between its 6 tokens, so no rep can beat
        # C x 6 tokens / (5 / PACE): a rate above that would be a wrong clock.
        assert 0 < float(row["agg_tok_s"]) <= int(row["concurrency"]) * 6 / (5 / PACE), key
        assert len(row["source"].split(";")) == 3

    # Boot facts come from the recorded logs: the axis changes the cache and nothing else.
    ctx = fold(read_events(run / "journal.jsonl")).windows["s1-ctx"]
    assert ctx.diff is not None and ctx.diff["changed"]["kv.cells"] == [2048, 1024]
    assert not any(k.startswith("weights.") for k in ctx.diff["changed"])

    # The quality phase ran on the fake's toy model: the window's greedy replies match the control's.
    verdicts = {v["window"]: v for v in csv.DictReader((run / "verdicts.csv").open())}
    assert verdicts["control"]["greedy"] == "reference"
    assert verdicts["ctx"]["greedy"] == "2/2"
    assert verdicts["control"]["self_score"].startswith("self-score repeat-identical")
    assert float(verdicts["ctx"]["dlogp_max"]) == 0.0


def test_a_leaked_rep_is_voided_rewarmed_and_rerun(tmp: Path, fake: FakeRuntime) -> None:
    hooks = Hooks()
    slow_rep_two(hooks, fake)
    r = runner(tmp, campaign("leak", CTX, {"s1": ["ctx"]}, leak=LEAKY, max_tokens=16), fake, hooks)
    assert r.run() == "finished"
    hooks.check()
    run = r.run_dir
    leaks = events(run, "leak_suspected", window="control")
    # Said once, when the rule could judge it: rep 3 landed beside it.
    assert [(e["attempt"], e["rep"]) for e in leaks] == [(1, 2)]
    attempt1 = [e["agg_tok_s"] for e in events(run, "rep_done", window="control", attempt=1)]
    assert attempt1[1] < 0.5 * min(attempt1[0], attempt1[2]), attempt1
    void = events(run, "row_void", window="control")
    assert [(e["attempt"], e["rerun"]) for e in void] == [(1, True)]
    assert void[0]["reason"].startswith("rep 2 ")  # the condemned rep, against leak.spread's bar
    # The bar is leak.spread's 50 %, or more where a busy host made the fake's reps noisier.
    said = re.fullmatch(r"rep 2 (\d+\.\d)% below the next lowest > the leak bar (\d+\.\d)% at C2",
                        void[0]["reason"])
    assert said and float(said[1]) > float(said[2]) >= 50.0, void[0]["reason"]
    # The rerun measures again only what the rule condemned: a fresh warm pass, then one rep;
    # reps 1 and 3 are kept, as the new attempt's first two.
    assert void[0]["condemned"] == [2]
    started = events(run, "shape_started", window="control")
    assert [(e["attempt"], e.get("carried")) for e in started] == [(1, None), (2, [[1, 1], [1, 3]])]
    assert [e["attempt"] for e in events(run, "warm_done", window="control")] == [1, 2]
    assert [e["rep"] for e in events(run, "rep_done", window="control", attempt=2)] == [3]
    row = rows(run)["s1-control/prose/c2"]
    assert (row["status"], row["attempts"], row["reps"]) == ("ok", "2", "3")
    reps = "windows/s1-control/reps/prose-c2"
    assert row["source"] == f"{reps}-1-1.jsonl;{reps}-1-3.jsonl;{reps}-2-3.jsonl"
    done = events(run, "row_done", window="control")[-1]
    landed = [e["steady_tok_s"] or e["agg_tok_s"] for e in events(run, "rep_done", window="control")]
    assert done["rep_tok_s"] == [landed[0], landed[2], landed[3]]
    # The fold gives the new attempt all three, and a resume would read the same receipts.
    state = fold(read_events(run / "journal.jsonl")).rows["s1-control/prose/c2"]
    assert state.files[2] == {1: f"{reps}-1-1.jsonl", 2: f"{reps}-1-3.jsonl", 3: f"{reps}-2-3.jsonl"}
    assert state.reps[2][1] == state.reps[1][1] and state.reps[2][2] == state.reps[1][3]
    # The void attempt's receipts stay on disk.
    for rep in (1, 2, 3):
        assert (run / "windows" / "s1-control" / "reps" / f"prose-c2-1-{rep}.jsonl").is_file()
    assert rows(run)["s1-ctx/prose/c2"]["status"] in ("ok", "noisy")  # noisy: a busy host


def test_an_operator_rerun_of_a_void_row_boots_its_window_again(tmp: Path,
                                                                 fake: FakeRuntime) -> None:
    """The control's void row rerun on a boot of its own after the window: its quality checks run
    again on that boot, against the reference its first boot made (which the window was compared
    with, so it stays as it was)."""
    hooks = Hooks()
    slow_rep_two(hooks, fake)
    replies: list[str] = []
    reference: list[bytes] = []

    def rerun(_: Event) -> None:
        reference.append((r.run_dir / "windows" / "s1-control" / "reference.json").read_bytes())
        replies.append(r.command("rerun", ["s1-control/prose/c2"], WHO))

    hooks.on(rerun, kind="window_started", window="ctx")
    spec = campaign("rerun", CTX, {"s1": ["ctx"]}, quality=QUALITY,
                    leak={**LEAKY, "max_reruns": 0}, max_tokens=16)
    r = runner(tmp, spec, fake, hooks, phases=[Measurement(), Quality()])
    assert r.run() == "finished"
    hooks.check()
    run = r.run_dir
    first = events(run, "row_done", window="control")[0]
    assert (first["status"], first["attempts"]) == ("void", 1)
    assert first["reason"].split("; ")[0].endswith("after 1 attempt")  # then the basis: whole reps
    assert replies == ["queued s1-control/prose/c2: its window will be booted again once window "
                       "s1-ctx has ended"]
    greedy = [e for e in events(run, "verdict", window="control") if e["check"] == "greedy"]
    assert [(e["verdict"], e["figures"]["reference"]) for e in greedy] == [
        ("reference", "self"), ("identical", "s1-control (its first boot)")]
    assert (run / "windows" / "s1-control" / "reference.json").read_bytes() == reference[0]
    reboot = events(run, "window_reboot")
    assert [(e["window"], e["row"], e["reboot"]) for e in reboot] == [
        ("control", "s1-control/prose/c2", 1)]
    assert [s.plan.labels["ruler.window"] for s in fake.servers] == ["s1-control", "s1-ctx", "s1-control"]
    assert fake.servers[2].plan.name == fake.servers[0].plan.name + "-rerun1"
    assert (run / "windows" / "s1-control" / "boot-rerun1.log").is_file()
    row = rows(run)["s1-control/prose/c2"]
    assert (row["status"], row["attempts"]) == ("ok", "2")
    assert "prose-c2-1-" not in row["source"]
    assert (run / "windows" / "s1-control" / "reps" / "prose-c2-1-2.jsonl").is_file()


def test_a_killed_engine_resumes_at_the_next_rep(tmp: Path, fake: FakeRuntime) -> None:
    """The kill: at rep 2 of the last shape the run directory is copied as it stands (the journal
    is fsync'd per event and each receipt is written before its event, so the copy is what a
    kill -9 leaves) and that window's server is left running (a killed engine never stops it).
    The fake runtime finds strays by the journal's identities alone, so it takes the copy for the
    killed directory; the real runtimes' proof by the directory's identity is
    tests/unit/engine/runtime/test_strays.py's."""
    killed = tmp / "killed"
    spec = campaign("resume", CTX, {"s1": ["ctx"]}, concurrency=[1, 2])
    hooks = Hooks()

    def kill(_: Event) -> None:
        shutil.copytree(a.run_dir, killed)
        fake.current.orphan()
        a.controls.abort.set()  # the original run is only wound down; its copy is the subject

    hooks.on(kill, kind="rep_done", window="ctx", concurrency=2, rep=2)
    a = runner(tmp, spec, fake, hooks)
    assert a.run() == "aborted"
    hooks.check()
    stray = fake.current
    assert stray.alive()

    b = runner(tmp, spec, fake, run_dir=killed)
    assert b.run() == "finished"
    after = read_events(killed / "journal.jsonl")
    after = after[next(i for i, e in enumerate(after) if e["kind"] == "run_resumed"):]
    assert after[0]["rows_done"] == 3
    assert [(e["name"], e["port"]) for e in after if e["kind"] == "stray_stopped"] == [
        (stray.plan.name, stray.port)]
    assert not stray.alive()
    assert fake.dirs_asked == [results.dir_identity(killed)]  # the resumed directory's own
    # Nothing finished is measured again: one rep (after its warm pass) on a new server.
    assert [(e["window"], e["concurrency"], e["attempt"], e["rep"])
            for e in after if e["kind"] == "rep_done"] == [("ctx", 2, 1, 3)]
    assert [e["label"] for e in after if e["kind"] == "warm_done"] == ["warm3"]
    assert [(e["reps_kept"], e["attempt"]) for e in after if e["kind"] == "shape_resumed"] == [(2, 1)]
    assert [e["window"] for e in after if e["kind"] == "window_started"] == ["ctx"]
    assert fake.current.requests == {"chat": 4}  # warm + rep 3, two requests each
    got = rows(killed)
    assert len(got) == 4 and all(row["status"] == "ok" for row in got.values())
    assert got["s1-ctx/prose/c2"]["source"] == ";".join(
        f"windows/s1-ctx/reps/prose-c2-1-{n}.jsonl" for n in (1, 2, 3))


def test_abort_cancels_the_pass_in_flight_and_a_resume_finishes(tmp: Path,
                                                                fake: FakeRuntime) -> None:
    hooks = Hooks()
    replies: list[str] = []

    def hang_then_abort(_: Event) -> None:
        fake.current.behaviour.hang = True  # rep 2's requests stream one token, then hang
        # The operator's command arrives on another thread (the control socket's), mid-pass.
        timer = threading.Timer(0.3, lambda: replies.append(r.command("abort", [], WHO)))
        timer.start()

    hooks.on(hang_then_abort, kind="rep_done", window="control", rep=1)
    spec = campaign("abort", CTX, {"s1": ["ctx"]})
    r = runner(tmp, spec, fake, hooks)
    assert r.run() == "aborted"
    hooks.check()
    run = r.run_dir
    assert replies == ["aborting: the current server is stopped; rows in flight become aborted"]
    row = events(run, "row_done", window="control")
    assert [(e["status"], e["reason"]) for e in row] == [("aborted", "operator abort after 1 rep")]
    assert row[0]["source"] == "windows/s1-control/reps/prose-c2-1-1.jsonl"
    assert sorted(p.name for p in (run / "windows" / "s1-control" / "reps").iterdir()) == [
        "prose-c2-1-1.jsonl", "prose-c2-1-warm.jsonl"]  # the cancelled pass is not a rep
    assert not events(run, "window_started", window="ctx")
    assert [e["status"] for e in events(run, "window_finished")] == ["aborted"]

    # A resume measures the aborted row on from its next rep, then the rest of the campaign.
    again = runner(tmp, spec, FakeRuntime())
    try:
        assert again.run() == "finished"
    finally:
        again.rt.close()  # type: ignore[attr-defined]  # a FakeRuntime's
    resumed = events(run, "shape_resumed", window="control")
    assert [(e["attempt"], e["reps_kept"]) for e in resumed] == [(1, 1)]
    got = rows(run)
    assert got["s1-control/prose/c2"]["source"] == ";".join(
        f"windows/s1-control/reps/prose-c2-1-{n}.jsonl" for n in (1, 2, 3))
    assert got["s1-ctx/prose/c2"]["status"] == "ok"


def test_advance_ends_the_window_and_the_campaign_goes_on(tmp: Path, fake: FakeRuntime) -> None:
    hooks = Hooks()
    replies: list[str] = []
    hooks.on(lambda e: replies.append(r.command("advance", [], WHO)),
             kind="rep_done", window="ctx", concurrency=1, rep=1)
    windows = {**CTX, "other": {"axis": "context 1024", "args": {"-c": 1024}}}
    r = runner(tmp, campaign("advance", windows, {"s1": ["ctx", "other"]}, concurrency=[1, 2]),
               fake, hooks)
    assert r.run() == "finished"
    hooks.check()
    run = r.run_dir
    assert replies == ["ending window s1/ctx; the campaign goes on with the next"]
    finished = {e["window"]: e["status"] for e in events(run, "window_finished")}
    assert finished == {"control": "done", "ctx": "advanced", "other": "done"}
    got = rows(run)
    assert (got["s1-ctx/prose/c1"]["status"], got["s1-ctx/prose/c1"]["reason"]) == (
        "aborted", "operator advanced the window after 1 rep")
    assert "s1-ctx/prose/c2" not in got  # the window ended before this shape
    assert all(got[f"s1-other/prose/c{n}"]["status"] == "ok" for n in (1, 2))


def test_advance_while_paused_ends_the_window_at_once_and_the_pause_holds_on(
        tmp: Path, fake: FakeRuntime) -> None:
    """Issue 26 item 11: advance while paused said it was ending the window, which waited for a
    resume. It ends now (no resume sent), and the pause, which the operator never lifted, holds the
    next window before its first rep; the reply says both."""
    hooks = Hooks()
    replies: list[str] = []
    held: dict[str, Any] = {}
    hooks.on(lambda e: replies.append(r.command("pause", [], WHO)), kind="rep_done", window="ctx", rep=1)

    def advance_later(_: Event) -> None:  # from another thread, as the control socket's, while held
        threading.Timer(0.2, lambda: replies.append(r.command("advance", [], WHO))).start()

    def held_again(e: Event) -> None:
        st = fold(read_events(r.run_dir / "journal.jsonl"))
        held.update(ctx=st.windows["s1-ctx"].status, cmds=[c["cmd"] for c in st.commands],
                    rep=e["rep"], pause_held=st.pause_held)
        r.command("resume", [], WHO)

    hooks.on(advance_later, kind="paused", window="ctx")
    hooks.on(held_again, kind="paused", window="other")
    windows = {**CTX, "other": {"axis": "context 1024", "args": {"-c": 1024}}}
    r = runner(tmp, campaign("advance-paused", windows, {"s1": ["ctx", "other"]}), fake, hooks)
    assert r.run() == "finished"
    hooks.check()
    assert replies == ["pausing before the next rep",
                       "ending window s1/ctx; the campaign goes on with the next, still paused: the "
                       "next window boots, then holds before its first rep (resume to go on)"]
    # The window ended with no resume sent; the next one held before its first rep.
    assert held == {"ctx": "advanced", "cmds": ["pause", "advance"], "rep": 1, "pause_held": True}
    got = rows(r.run_dir)
    assert (got["s1-ctx/prose/c2"]["status"], got["s1-ctx/prose/c2"]["reason"]) == (
        "aborted", "operator advanced the window after 1 rep")
    assert got["s1-other/prose/c2"]["status"] == "ok"


def test_a_command_with_a_word_it_does_not_take_is_refused_and_nothing_done(
        tmp: Path, fake: FakeRuntime) -> None:
    """Issue 49 (class 7): `advance s1 nowindow` ended s1's running window, the word it did not
    take ignored. Said while the window is held paused (so nothing else ends it): refused, naming
    the word, and the window measures on to its end; so is `abort now`."""
    hooks = Hooks()
    refused: list[str] = []
    hooks.on(lambda e: r.command("pause", [], WHO), kind="rep_done", window="ctx", rep=1)

    def held(_: Event) -> None:
        for cmd, args in (("advance", ["s1", "nowindow"]), ("abort", ["now"]), ("status", ["x"])):
            with pytest.raises(CommandRefused) as no:
                r.command(cmd, args, WHO)
            refused.append(str(no.value))
        r.command("resume", [], WHO)

    hooks.on(held, kind="paused", window="ctx")
    r = runner(tmp, campaign("extra-word", CTX, {"s1": ["ctx"]}), fake, hooks)
    assert r.run() == "finished"
    hooks.check()
    assert refused == [
        "not understood: 'nowindow' (advance takes only the session it acts on, as in `advance s1`); "
        "nothing done",
        "not understood: 'now' (abort takes no argument); nothing done",
        "not understood: 'x' (status takes no argument); nothing done"]
    st = fold(read_events(r.run_dir / "journal.jsonl"))
    assert [c["cmd"] for c in st.commands] == ["pause", "resume"]  # the refused ones not journaled
    assert {e["window"]: e["status"] for e in events(r.run_dir, "window_finished")} == {
        "control": "done", "ctx": "done"}
    assert rows(r.run_dir)["s1-ctx/prose/c2"]["status"] == "ok"


def test_an_abort_while_paused_leaves_no_pause_on_record(tmp: Path, fake: FakeRuntime) -> None:
    """Issue 26 item 10: pause then abort showed "aborted PAUSED" (ruler status) and "ABORTED ·
    pausing after this rep" (the console): the pause ends with the run."""
    hooks = Hooks()
    hooks.on(lambda e: r.command("pause", [], WHO), kind="rep_done", window="control", rep=1)
    hooks.on(lambda e: threading.Timer(0.2, lambda: r.command("abort", [], WHO)).start(),
             kind="paused", window="control")
    r = runner(tmp, campaign("abort-paused", CTX, {"s1": ["ctx"]}), fake, hooks)
    assert r.run() == "aborted"
    hooks.check()
    st = fold(read_events(r.run_dir / "journal.jsonl"))
    assert [c["cmd"] for c in st.commands] == ["pause", "abort"]
    assert not st.paused and not st.pause_held and not st.paused_sessions
    status = format_summary(summary(r.run_dir)).splitlines()[0]
    assert status.startswith("abort-paused  aborted  engine") and "PAUSED" not in status
    head = " ".join(t for line in header_lines(st, LoadPlan(), None, (False, ""), 0.0) for t, _ in line)
    assert "ABORTED" in head and "PAUS" not in head


def dying(hooks: Hooks, fake: FakeRuntime) -> dict[str, Any]:
    """A session of two windows, each of two shapes, whose first (victim) has its server die in
    the pass after its first rep (the fake's fault, on cue); the next window (after) runs."""

    def die(_: Event) -> None:
        fake.current.behaviour.die_mid_stream = True

    hooks.on(die, kind="rep_done", window="victim", rep=1)
    windows = {"victim": {"axis": "context 4096", "args": {"-c": 4096}},
               "after": {"axis": "context 1024", "args": {"-c": 1024}}}
    return campaign("dies", windows, {"s1": ["victim", "after"]}, concurrency=[1],
                    classes={"prose": {"prompts": ["Write one sentence about the sea."]},
                             "code": {"prompts": ["Write a Python function that adds two numbers."]}})


def test_a_server_dying_mid_stream_fails_its_window_and_the_next_runs(tmp: Path,
                                                                    fake: FakeRuntime) -> None:
    hooks = Hooks()
    r = runner(tmp, dying(hooks, fake), fake, hooks)
    assert r.run() == "finished"
    hooks.check()
    run = r.run_dir
    reason = "server died during a pass (exit code 137)"
    assert [(e["window"], e["status"], e.get("reason")) for e in events(run, "window_finished")] == [
        ("control", "done", None), ("victim", "failed", reason), ("after", "done", None)]
    assert [e["exit_code"] for e in events(run, "server_stopped", window="victim")] == [137]
    got = rows(run)
    assert (got["s1-victim/prose/c1"]["status"], got["s1-victim/prose/c1"]["reason"]) == (
        "failed", f"the server failed after 1 rep: {reason}")
    assert got["s1-victim/prose/c1"]["source"] == "windows/s1-victim/reps/prose-c1-1-1.jsonl"
    assert (got["s1-victim/code/c1"]["status"], got["s1-victim/code/c1"]["reason"]) == (
        "failed", "not measured: the server failed earlier in the window")
    failure = (run / "windows" / "s1-victim" / "failure.txt").read_text()
    assert failure.startswith(f"reason: {reason}\n") and "all slots are idle" in failure
    assert all(got[f"s1-after/{c}/c1"]["status"] == "ok" for c in ("prose", "code"))


def test_a_server_death_seen_late_is_the_reason_not_a_rep_with_failed_requests(
        tmp: Path, fake: FakeRuntime, monkeypatch: pytest.MonkeyPatch) -> None:
    """The victim's server dies mid-rep and its runtime reports the death late (FAKED: the first
    time it is asked after the death, the fake says the server is alive, as Docker does while it
    records a container's exit): the rep cut short is not kept as a rep of failed requests to
    suspect of a leak; the server's death is the row's and the window's reason."""
    stale: dict[int, bool] = {}
    alive = FakeServer.alive

    def late(self: FakeServer) -> bool:
        if self.ended.is_set() and not stale.get(id(self)):
            stale[id(self)] = True
            return True
        return alive(self)
    monkeypatch.setattr(FakeServer, "alive", late)
    hooks = Hooks()
    r = runner(tmp, dying(hooks, fake), fake, hooks)
    assert r.run() == "finished"
    hooks.check()
    run = r.run_dir
    assert stale, "the fake never reported the death late"
    assert [e["rep"] for e in events(run, "rep_done", window="victim")] == [1]
    assert not events(run, "leak_suspected")
    reason = "server died during a pass (exit code 137)"
    got = rows(run)
    assert (got["s1-victim/prose/c1"]["status"], got["s1-victim/prose/c1"]["reason"]) == (
        "failed", f"the server failed after 1 rep: {reason}")
    assert [(e["status"], e.get("reason")) for e in events(run, "window_finished", window="victim")] == [
        ("failed", reason)]


def test_an_operator_rerun_of_a_failed_window_boots_it_again_and_measures_its_failed_rows(
        tmp: Path, fake: FakeRuntime) -> None:
    """The first row an operator wants to rerun is one whose server was killed from outside: the
    window's failed rows (the one cut short, the one never measured) are queued by the window's
    key, measured on a fresh boot after the current window, and journaled as failed rows' reruns."""
    hooks = Hooks()
    replies: list[str] = []
    refused: list[str] = []

    def rerun(_: Event) -> None:
        replies.append(r.command("rerun", ["s1-victim"], WHO))
        try:
            r.command("rerun", ["s1-victim/prose/c1"], WHO)  # queued already, with its window
        except CommandRefused as e:
            refused.append(str(e))
        try:
            r.command("rerun", ["s1-control/prose/c1"], WHO)  # an ok row has its figure
        except CommandRefused as e:
            refused.append(str(e))

    hooks.on(rerun, kind="window_started", window="after")
    r = runner(tmp, dying(hooks, fake), fake, hooks)
    assert r.run() == "finished"
    hooks.check()
    run = r.run_dir
    assert replies == ["queued 2 rows of s1-victim (s1-victim/prose/c1, s1-victim/code/c1): its "
                       "window will be booted again once window s1-after has ended"]
    assert refused == ["row s1-victim/prose/c1 is already queued",
                       "row s1-control/prose/c1 is ok, not void or failed"]
    assert [(e["row"], e["reason"], e["reboot"]) for e in events(run, "window_reboot")] == [
        ("s1-victim/prose/c1", "operator rerun of a failed row", 1)]
    assert [s.plan.labels["ruler.window"] for s in fake.servers] == [
        "s1-control", "s1-victim", "s1-after", "s1-victim"]
    assert [(e["class"], e["attempt"], e["rerun"]) for e in events(run, "shape_started", window="victim")
            ] == [("prose", 1, False), ("prose", 2, True), ("code", 1, True)]
    got = rows(run)
    assert (got["s1-victim/prose/c1"]["status"], got["s1-victim/prose/c1"]["attempts"]) == ("ok", "2")
    assert (got["s1-victim/code/c1"]["status"], got["s1-victim/code/c1"]["attempts"]) == ("ok", "1")
    state = fold(read_events(run / "journal.jsonl"))
    assert state.windows["s1-victim"].status == "done"  # the rerun's boot ended well
    assert (run / "windows" / "s1-victim" / "failure.txt").is_file()  # the first boot's receipt stays


def test_a_boot_that_never_gets_ready_or_exits_is_rejected(tmp: Path) -> None:
    runtime = FakeRuntime(by_window({
        "stuck": Behaviour(ready=False),
        "broken": Behaviour(boot_log=LOGS / "llamacpp_missing_model.log", boot_exit=1)}))
    windows = {"stuck": {"axis": "a server that never answers ready", "args": {"-c": 1024}},
               "broken": {"axis": "a missing model", "args": {"-m": "/tmp/models/missing.gguf"}},
               "fine": {"axis": "context 4096", "args": {"-c": 4096}}}
    r = runner(tmp, campaign("boots", windows, {"s1": ["stuck", "broken", "fine"]}, boot=2),
               runtime)
    try:
        assert r.run() == "finished"
    finally:
        runtime.close()
    run = r.run_dir
    rejected = {e["window"]: e for e in events(run, "window_rejected")}
    assert sorted(rejected) == ["broken", "stuck"]
    assert rejected["stuck"]["reason"] == "not ready after 2 s (boot timeout)"
    assert rejected["broken"]["reason"] == "server exited during boot (exit code 1)"
    assert any("failed to open GGUF file '/tmp/models/missing.gguf'" in line
               for line in rejected["broken"]["errors"])
    text = (run / "windows" / "s1-broken" / "rejection.txt").read_text()
    assert "exiting due to model loading error" in text
    assert {k.split("/")[0] for k in rows(run)} == {"s1-control", "s1-fine"}
    assert fold(read_events(run / "journal.jsonl")).windows["s1-fine"].status == "done"


def test_passes_past_the_shard_rate_run_on_shards(tmp: Path, fake: FakeRuntime) -> None:
    """The warm pass runs on one loop (C2 is under shard.concurrency); its chunk rate is over
    shard.chunk_rate, so every rep after it runs on two shard processes, and the rows read their
    merged records as one loop's."""
    spec = campaign("shards", CTX, {"s1": ["ctx"]}, reps=2, requests_per_rep=4,
                    shard={"chunk_rate": 1.0})
    r = runner(tmp, spec, fake)
    assert r.run() == "finished"
    shards = min(2, len(os.sched_getaffinity(0)))
    for window in ("control", "ctx"):
        reps = r.run_dir / "windows" / f"s1-{window}" / "reps"
        warm, _ = read_rep(reps / "prose-c2-1-warm.jsonl")
        assert warm["client"]["shards"] == 1
        for rep in (1, 2):
            header, records = read_rep(reps / f"prose-c2-1-{rep}.jsonl")
            assert header["client"]["shards"] == shards
            assert len(header["client"]["shard_lag_p99_ms"]) == shards
            assert [x["index"] for x in records] == [0, 1, 2, 3]
            assert {x["worker"] for x in records} == {0, 1}
            assert all(x["error"] is None and x["completion_tokens"] == 6 for x in records)
    for row in rows(r.run_dir).values():
        assert (row["status"], row["reps"]) == ("ok", "2")


def test_a_rerun_queued_as_the_last_rerun_of_its_row_ends_runs_too(tmp: Path) -> None:
    """The control's requests all fail (FAKED: its server answers HTTP 500), so its row stays void
    after the operator's rerun; the operator queues it again as that rerun's row is done, while
    its window stops: the engine said "queued", so it boots the window again."""
    fake = FakeRuntime(by_window({"control": Behaviour(stream_status=500)}))
    key = "s1-control/prose/c2"
    hooks = Hooks()
    replies: list[str] = []
    hooks.on(lambda e: replies.append(r.command("rerun", [key], WHO)), kind="window_started", window="ctx")

    def again(_: Event) -> None:  # the rerun's window, once booted, finishes: queued as it stops
        hooks.on(lambda e: replies.append(r.command("rerun", [key], WHO)), kind="window_finished",
                 window="control")
    hooks.on(again, kind="window_reboot", reboot=1)
    spec = campaign("rerun-again", CTX, {"s1": ["ctx"]}, leak={**LEAKY, "max_reruns": 0})
    r = runner(tmp, spec, fake, hooks)
    try:
        assert r.run() == "finished"
    finally:
        fake.close()
    hooks.check()
    assert [x.split(":")[0] for x in replies] == [f"queued {key}"] * 2
    assert [(e["row"], e["reboot"]) for e in events(r.run_dir, "window_reboot")] == [(key, 1), (key, 2)]
    assert [e["attempts"] for e in events(r.run_dir, "row_done", window="control")] == [1, 2, 3]


def test_a_command_racing_the_end_of_the_run_is_refused_plainly(tmp: Path, fake: FakeRuntime) -> None:
    """A command accepted as the run closes its journal (the run's end racing the socket's
    thread; here the journal is closed before the fold says the run ended) is refused saying so,
    not "internal error: ValueError: write to closed file"."""
    r = runner(tmp, campaign("ended", CTX, {"s1": ["ctx"]}), fake)
    r.journal.close()
    r.state.status = RunStatus.RUNNING  # the fold an instant before its run_finished
    with pytest.raises(CommandRefused, match=r"the run has ended \(its journal is closed\)"):
        r.command("abort", [], WHO)


def test_a_client_that_stalled_mid_rep_voids_the_rep_as_its_own_not_a_leak(
        tmp: Path, fake: FakeRuntime, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine stops mid-rep (FAKED: the load loop is blocked for 4.5 s once, over twice STALL_S,
    as a SIGSTOP of the engine blocks it): that rep measured the client, so it is voided as
    client-stalled and the attempt measured again, though the campaign allows no leak rerun (the
    server's budget); no leak is suspected of the server."""
    stall = threading.Event()
    feed = Events.feed

    def stalling_feed(self: Events, bodies: list[bytes], times: list[float]) -> None:
        if stall.is_set():
            stall.clear()
            time.sleep(4.5)  # the loop's thread stops, as a stopped process's does
        feed(self, bodies, times)

    monkeypatch.setattr(Events, "feed", stalling_feed)
    hooks = Hooks()
    hooks.on(lambda e: stall.set(), kind="rep_done", window="control", attempt=1, rep=1)
    spec = campaign("stall", CTX, {"s1": ["ctx"]}, leak={**LEAKY, "max_reruns": 0}, max_tokens=16)
    r = runner(tmp, spec, fake, hooks)
    assert r.run() == "finished"
    hooks.check()
    run = r.run_dir
    assert not events(run, "leak_suspected")
    [void] = events(run, "row_void", window="control")
    assert void["attempt"] == 1 and "rep 2: client stalled: its load loop stopped for" in void["reason"]
    header, _ = read_rep(run / "windows/s1-control/reps/prose-c2-1-2.jsonl")
    assert header["client"]["stall_s"] >= loadgen.STALL_S and header["void"].startswith("client stalled")
    row = rows(run)["s1-control/prose/c2"]
    assert (row["status"], row["attempts"]) == ("ok", "2")


def test_a_client_that_stalls_every_attempt_ends_its_row_void_after_its_own_reruns(
        tmp: Path, fake: FakeRuntime, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine stops in the first rep of every attempt (FAKED: the load loop blocked for 2.5 s,
    past STALL_S, after each warm pass): its row is measured again CLIENT_STALL_RERUNS times past
    the first, then ends void with the client's stall as its reason, and the run goes on."""
    stall = threading.Event()
    feed = Events.feed

    def stalling_feed(self: Events, bodies: list[bytes], times: list[float]) -> None:
        if stall.is_set():
            stall.clear()
            time.sleep(2.5)
        feed(self, bodies, times)

    monkeypatch.setattr(Events, "feed", stalling_feed)
    hooks = Hooks()
    for attempt in range(1, CLIENT_STALL_RERUNS + 2):
        hooks.on(lambda e: stall.set(), kind="warm_done", window="control", attempt=attempt)
    spec = campaign("starved", CTX, {"s1": ["ctx"]}, leak={**LEAKY, "max_reruns": 0}, max_tokens=16)
    r = runner(tmp, spec, fake, hooks)
    assert r.run() == "finished"
    hooks.check()
    # Each attempt but the last is voided and measured again; the last ends the row void.
    voids = events(r.run_dir, "row_void", window="control")
    assert [v["attempt"] for v in voids] == list(range(1, CLIENT_STALL_RERUNS + 1))
    assert all("client stalled" in v["reason"] for v in voids)
    row = rows(r.run_dir)["s1-control/prose/c2"]
    assert (row["status"], row["attempts"]) == ("void", str(CLIENT_STALL_RERUNS + 1))
    assert "client stalled" in row["reason"], row["reason"]
    assert rows(r.run_dir)["s1-ctx/prose/c2"]["status"] in ("ok", "noisy")


def test_a_rep_whose_requests_failed_is_not_suspected_of_a_leak(tmp: Path, fake: FakeRuntime) -> None:
    """Rep 3's requests all fail (FAKED: the server answers HTTP 500 from then on, as one dying
    under the rep does before it is seen dead): its tok/s is low for that reason, which the row's
    failed requests say; no leak is suspected of the server."""
    hooks = Hooks()

    def failing(_: Event) -> None:
        fake.current.behaviour.stream_status = 500
    hooks.on(failing, kind="rep_done", window="control", attempt=1, rep=2)
    spec = campaign("failing-rep", CTX, {"s1": ["ctx"]}, leak={**LEAKY, "max_reruns": 0})
    r = runner(tmp, spec, fake, hooks)
    assert r.run() == "finished"
    hooks.check()
    assert [e["failed"] for e in events(r.run_dir, "rep_done", window="control")] == [0, 0, 2]
    assert not events(r.run_dir, "leak_suspected")


def verdict_rows(run: Path) -> dict[str, dict[str, str]]:
    return {v["window"]: v for v in csv.DictReader((run / "verdicts.csv").open())}


def test_an_operator_rerun_of_a_failed_window_ends_with_its_quality_checks_and_says_what_it_waits_on(
        tmp: Path, fake: FakeRuntime) -> None:
    """The victim's server dies mid-window (the fake's fault, on cue), so its quality checks never
    ran. The operator reruns the window while its server is being stopped: the engine journals
    that the rerun waits on that server, then boots the window again, measures its failed rows and
    runs its quality checks, so verdicts.csv, greedy.json and the window's verdicts are there."""
    hooks = Hooks()
    replies: list[str] = []
    hooks.on(lambda e: replies.append(r.command("rerun", ["s1-victim"], WHO)),
             kind="server_stopping", window="victim")
    spec = dying(hooks, fake)
    spec["quality"] = QUALITY
    r = runner(tmp, spec, fake, hooks, phases=[Measurement(), Quality()])
    assert r.run() == "finished"
    hooks.check()
    run = r.run_dir
    assert replies == ["queued 2 rows of s1-victim (s1-victim/prose/c1, s1-victim/code/c1): its "
                       "window will be booted again once the server of s1-victim has stopped"]
    waits = events(run, "rerun_waiting")
    assert [(e["window"], e["rows"], e["waiting"]) for e in waits] == [
        ("victim", ["s1-victim/prose/c1", "s1-victim/code/c1"], "the server of s1-victim to stop")]
    kinds = [e["kind"] for e in read_events(run / "journal.jsonl") if e.get("window") == "victim"]
    reboot = kinds.index("window_reboot")
    # The wait was said while the server stopped, the verdicts came after the window's second boot.
    assert kinds.index("rerun_waiting") < kinds.index("server_stopped") < reboot
    assert "verdict" in kinds[reboot:] and "verdict" not in kinds[:reboot]
    assert verdict_rows(run)["victim"]["greedy"] == "2/2"
    assert (run / "windows" / "s1-victim" / "greedy.json").is_file()
    state = fold(read_events(run / "journal.jsonl"))
    assert state.windows["s1-victim"].verdicts["greedy"]["verdict"] == "identical"
    assert not state.reruns_waiting  # each wait ended with its window's boot
    assert all(rows(run)[f"s1-victim/{c}/c1"]["status"] == "ok" for c in ("prose", "code"))


def test_a_rerun_of_a_control_that_died_makes_the_reference_and_settles_its_windows(
        tmp: Path, fake: FakeRuntime) -> None:
    """The control's server dies mid-window (the fake's fault): the next window's greedy check has
    no reference to compare with. The operator's rerun of the control boots it again; its quality
    checks make the session's reference, and the window that waited on it gets its verdict."""
    hooks = Hooks()

    def die(_: Event) -> None:
        fake.current.behaviour.die_mid_stream = True

    hooks.on(die, kind="rep_done", window="control", rep=1)
    hooks.on(lambda e: r.command("rerun", ["s1-control"], WHO), kind="window_started", window="ctx")
    spec = campaign("control-dies", CTX, {"s1": ["ctx"]}, concurrency=[1], quality=QUALITY)
    r = runner(tmp, spec, fake, hooks, phases=[Measurement(), Quality()])
    assert r.run() == "finished"
    hooks.check()
    run = r.run_dir
    waits = [(e["window"], e["waiting"]) for e in events(run, "rerun_waiting")]
    assert waits == [("control", "window s1-ctx to end"), ("control", "the server of s1-ctx to stop")]
    got = verdict_rows(run)
    assert got["control"]["greedy"] == "reference"
    assert (got["ctx"]["greedy"], got["ctx"]["reference"]) == ("2/2", "s1-control (ran after this window)")
    assert (run / "windows" / "s1-control" / "reference.json").is_file()


def test_a_window_told_to_simulate_acceptance_says_so_everywhere_and_has_no_delta(
        tmp: Path, fake: FakeRuntime) -> None:
    """A window whose llama-server is given --spec-synth-len (its acceptance set, not measured;
    the FAKE server reports acceptance either way): every acceptance figure of its rows says
    simulated, and its delta against the control, whose acceptance is measured, is withheld."""
    windows = {"synth": {"axis": "synthetic acceptance 2.5", "args": {"--spec-synth-len": 2.5}}}
    r = runner(tmp, campaign("synth", windows, {"s1": ["synth"]}), fake)
    assert r.run() == "finished"
    run = r.run_dir
    [started] = events(run, "window_started", window="synth")
    assert started["simulated"] == "--spec-synth-len 2.5"
    assert "simulated" not in events(run, "window_started", window="control")[0]
    got = rows(run)
    synth, control = got["s1-synth/prose/c2"], got["s1-control/prose/c2"]
    assert synth["acceptance"] == "simulated (--spec-synth-len 2.5)" and synth["accept_len"]
    assert control["acceptance"] == "natural"
    assert synth["delta"] == "" and synth["verdict_why"].startswith(
        "delta withheld: one row's acceptance is simulated (--spec-synth-len 2.5)")
    from engine.report import write_report
    from engine.report.export import export
    write_report(run)
    report = (run / "report.md").read_text()
    line = next(x for x in report.splitlines() if x.startswith("| s1 | synth |"))
    assert "simulated (--spec-synth-len 2.5)" in line
    [vllm] = [p for p in export(run, "vllm-bench") if "synth" in p.name]
    assert json.loads(vllm.read_text())["ruler_acceptance"] == "simulated (--spec-synth-len 2.5)"
    # The headless line of each rep says it too (issue 48's walk: "accept 3.22/0.59" alone).
    from engine.commands.progress import format_event
    for rep in events(run, "rep_done", window="synth"):
        assert "accept" in (format_event(rep) or "") and "simulated (--spec-synth-len 2.5)" in (
            format_event(rep) or ""), format_event(rep)
    assert all("simulated" not in (format_event(e) or "")
               for e in events(run, "rep_done", window="control"))
    # The console withholds it too: no Δ of its own beside the engine's withheld one (issue 48's
    # walk: the windows list read "+29.1%" for a --spec-synth-len window).
    state = fold(read_events(run / "journal.jsonl"))
    assert cell_text([delta_cells(state, "s1-synth", DEFAULT_RULE)[0]]) == "withheld"
    assert row_delta(state, state.rows["s1-synth/prose/c2"], DEFAULT_RULE) is None
    shown = detail(state, "s1-synth", DECLARED, DEFAULT_RULE)
    assert shown is not None
    assert any("delta withheld: one row's acceptance is simulated (--spec-synth-len 2.5)" in
               cell_text(line) for line in shown.lines)
