"""ruler tune's decisions without a server: which round follows which, what a round leaves as the
incumbent, when quality holds, and the tune file's problems at file:line:col (the rounds on the
real testbed, killed and resumed: tests/integration/test_tune.py)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from engine.campaign.load import SpecError
from engine.record.state import WindowState
from engine.record.trade import Cell, Outcome
from engine.tune.judge import decision, no_figure_why, operator_argv, quality_of
from engine.tune.rounds import Candidate, Round, after, next_plan
from engine.tune.spec import Tune, load_tune
from engine.tune.summary import summary, tune_md
from engine.words import Check, Verdict, WindowStatus
from tests.paths import REPO

TUNE = REPO / "campaigns" / "tune" / "smollm2.yaml"
START = {"-m": "${model}", "--spec-draft-n-max": 7}


@pytest.fixture(scope="module")
def tune() -> Tune:
    return load_tune(TUNE)


Cand = tuple[str, object, bool, float]


def done(number: int, kind: str, control: dict[str, object], *cands: Cand) -> Round:
    """A round judged: each candidate (flag, value, kept, delta)."""
    rnd = Round(number, kind, "run", control)
    for flag, value, kept, delta in cands:
        rnd.candidates.append(Candidate(number, kind, "s", f"w{value}", {flag: value}, False, delta=delta,
                                        call=Outcome.BETTER if kept else Outcome.UNDETERMINED, kept=kept))
    return rnd


def test_the_first_round_tries_each_flag_alone_against_the_control(tune: Tune) -> None:
    plan = next_plan(tune, dict(START), [])
    assert plan is not None and plan.kind == "axes" and plan.control == START
    assert [(c.session, c.window, c.change, c.lossy) for c in plan.candidates] == [
        ("spec_draft_n_max", "spec-draft-n-max-3", {"--spec-draft-n-max": 3}, False),
        ("spec_draft_n_max", "spec-draft-n-max-10", {"--spec-draft-n-max": 10}, False),
        ("cache_type_k", "cache-type-k-q8_0", {"--cache-type-k": "q8_0"}, True)]
    # three windows, and the control first and again last in each of the two sessions
    assert plan.boots == 7


def test_nothing_kept_ends_the_tune_with_the_control(tune: Tune) -> None:
    r1 = done(1, "axes", START, ("--spec-draft-n-max", 3, False, 0.02),
              ("--cache-type-k", "q8_0", False, -0.1))
    assert after(r1, START) == START
    assert next_plan(tune, START, [r1]) is None


def test_one_winner_becomes_the_incumbent_and_the_axes_are_tried_again_from_it(tune: Tune) -> None:
    r1 = done(1, "axes", START, ("--spec-draft-n-max", 3, True, 0.12),
              ("--spec-draft-n-max", 10, False, 0.3))
    now = after(r1, START)
    assert now == {**START, "--spec-draft-n-max": 3}
    plan = next_plan(tune, now, [r1])
    assert plan is not None and plan.kind == "axes" and plan.control == now
    # The incumbent's own value is not tried again.
    assert [c.change for c in plan.candidates] == [{"--spec-draft-n-max": 10}, {"--cache-type-k": "q8_0"}]


def test_two_winners_are_combined_against_the_best_single_change(tune: Tune) -> None:
    r1 = done(1, "axes", START, ("--spec-draft-n-max", 10, True, 0.08),
              ("--cache-type-k", "q8_0", True, 0.15))
    assert after(r1, START) == START  # the combine round decides
    plan = next_plan(tune, START, [r1])
    assert plan is not None and plan.kind == "combine"
    assert plan.control == {**START, "--cache-type-k": "q8_0"}  # the best single change
    assert [c.change for c in plan.candidates] == [{"--spec-draft-n-max": 10}]
    kept = done(2, "combine", plan.control, ("--spec-draft-n-max", 10, True, 0.05))
    assert after(kept, START) == {**START, "--cache-type-k": "q8_0", "--spec-draft-n-max": 10}
    lost = done(2, "combine", plan.control, ("--spec-draft-n-max", 10, False, 0.01))
    assert after(lost, START) == {**START, "--cache-type-k": "q8_0"}


def test_an_axes_round_after_a_lost_combination_does_not_ask_again_what_it_answered(tune: Tune) -> None:
    """The combine round judged the other winner over the best single change; the axes round that
    follows starts from that same change, so that question is not asked a second time."""
    r1 = done(1, "axes", START, ("--spec-draft-n-max", 10, True, 0.08),
              ("--cache-type-k", "q8_0", True, 0.15))
    best = {**START, "--cache-type-k": "q8_0"}
    r2 = done(2, "combine", best, ("--spec-draft-n-max", 10, False, 0.01))
    now = after(r2, START)
    assert now == best
    plan = next_plan(tune, now, [r1, r2])
    assert plan is not None and plan.kind == "axes" and plan.control == best
    # 3 over the best change is a new question; 10 over it is round 2's.
    assert [c.change for c in plan.candidates] == [{"--spec-draft-n-max": 3}]
    r3 = done(3, "axes", best, ("--spec-draft-n-max", 3, False, -0.02))
    assert next_plan(tune, after(r3, best), [r1, r2, r3]) is None


def test_quality_holds_lossless_only_identical_and_close_lossy_under_the_bound() -> None:
    good: dict[str, dict[str, Any]] = {Check.GREEDY: {"verdict": Verdict.IDENTICAL},
                                       Check.TEACHER_FORCED: {"verdict": Verdict.CLOSE}}
    assert quality_of(good, False, 0.05)[1:] == (True, "")
    diverged: dict[str, dict[str, Any]] = {**good, Check.GREEDY: {"verdict": Verdict.DIVERGED}}
    assert quality_of(diverged, False, 0.05)[1:] == (False, "greedy diverged")
    kl: dict[str, dict[str, Any]] = {Check.KL: {"verdict": Verdict.ABOVE_FLOOR, "figures": {"mean": 0.08}}}
    assert quality_of(kl, True, 0.05)[1:] == (False, "KL mean 0.08 > kl_max 0.05")
    assert quality_of(kl, True, 0.1)[1] is True
    assert quality_of({}, True, 0.1)[1:] == (False, "no KL measured")


def test_tune_md_says_the_recommendation_and_every_ruled_out_value() -> None:
    r1 = done(1, "axes", START, ("--spec-draft-n-max", 3, False, 0.02))
    r1.candidates[0].why = "ruled out: no decision, the noise does not separate it (+2.0 % [-5.0, +9.0])"
    out = {"campaign": "c.yaml", "objective": "tok/s of prose at c1", "verdict_rule": "rule",
           "kl_max": 0.05, "stop": "nothing separates from the incumbent", "changed": {},
           "command": "llama-server -m m.gguf --spec-draft-n-max 7",
           "rounds": [{"number": 1, "kind": "axes", "control": START, "run": "r", "boots": 3,
                       "seconds": 60.0, "candidates": [vars(c) for c in r1.candidates]}]}
    text = tune_md(out)
    assert "```\nllama-server -m m.gguf --spec-draft-n-max 7\n```" in text
    assert "nothing (the control stays)" in text
    assert ("- round 1: --spec-draft-n-max 3: no decision, the noise does not separate it "
            "(+2.0 % [-5.0, +9.0])") in text


def problems(tmp_path: Path, text: str) -> list[str]:
    """What loading ``text`` as a tune file says, each problem as ``line:col: message``."""
    (tmp_path / "t.yaml").write_text(text)
    with pytest.raises(SpecError) as info:
        load_tune(tmp_path / "t.yaml")
    return [f"{p.line}:{p.col}: {p.message}" for p in info.value.problems]


def test_a_bad_tune_file_is_reported_where_it_is(tmp_path: Path) -> None:
    said = problems(tmp_path, f"""\
campaign: {REPO / 'campaigns' / 'demo-tune.yaml'}
space:
  --spec-draft-n-max: [7]
  -ub: {{values: [], lossy: true}}
objective: {{tok_s: {{class: code, load: c8}}}}
budget: {{windows: 1}}
""")
    assert said == ["4:17: space.-ub.values: must not be empty",
                    "6:19: budget.windows: must be at least 2, got 1"], said
    said = problems(tmp_path, f"""\
campaign: {REPO / 'campaigns' / 'demo-tune.yaml'}
space:
  --spec-draft-n-max: [7]
objective: {{tok_s: {{class: code, load: c8}}}}
""")
    assert said == [
        "3:3: --spec-draft-n-max: every candidate is the control's value already",
        "4:1: the objective's class 'code' is not a class of the campaign (prose)",
        "4:40: load 'c8' is not one the workload measures (c1)"], said


def test_a_candidate_given_twice_is_refused_where_it_is(tmp_path: Path) -> None:
    # [3, 3, 3] was read as three candidates, each a window of its own measuring the same argv;
    # "3" and 3 are one argv too, and so are false and null (the flag left out).
    said = problems(tmp_path, f"""\
campaign: {REPO / 'campaigns' / 'demo-tune.yaml'}
space:
  --spec-draft-n-max: [3, 3, 3]
  -ub: {{values: [512, "512", 1024], lossy: true}}
  --no-mmap: [false, null, true]
objective: {{tok_s: {{class: prose, load: c1}}}}
""")
    assert said == [
        "3:27: --spec-draft-n-max: candidate 3 is candidate 1 again (the same argv): each is measured once",
        "3:30: --spec-draft-n-max: candidate 3 is candidate 1 again (the same argv): each is measured once",
        "4:23: -ub: candidate '512' is candidate 1 again (the same argv): each is measured once",
        "5:22: --no-mmap: candidate null is candidate 1 again (the same argv): each is measured once"], said


@pytest.mark.timeout(60)  # a tune file read the plain way blocks on a FIFO with no writer
def test_a_tune_file_that_is_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "t.yaml")
    with pytest.raises(SpecError) as info:
        load_tune(tmp_path / "t.yaml")
    assert [p.message for p in info.value.problems] == [
        "tune file is not a regular file (a FIFO); ruler reads files only"]


def test_a_failed_windows_reason_is_inert_in_tune_md() -> None:
    """A window that failed says why in tune.md's table and its ruled-out list; the reason may
    quote the server (an error body: a heading, HTML, a link, a table's bar): text there, nothing
    of its own."""
    hostile = "HTTP 500: \n# Owned <script>x</script> [a](javascript:y) | cell"
    ws = WindowState("s", "w3", status=WindowStatus.FAILED, reason=hostile)
    r1 = done(1, "axes", START, ("--spec-draft-n-max", 3, False, 0.02))
    r1.candidates[0].why = no_figure_why(ws)
    out = {"campaign": "c.yaml", "objective": "tok/s of prose at c1", "verdict_rule": "rule",
           "kl_max": 0.05, "stop": "budget spent", "changed": {}, "command": "llama-server",
           "rounds": [{"number": 1, "kind": "axes", "control": START, "run": "r", "boots": 3,
                       "seconds": 60.0, "candidates": [vars(c) for c in r1.candidates]}]}
    text = tune_md(out)
    assert "Owned" in text and "\n# Owned" not in text
    prose = re.sub(r"`[^`]*`", "", text)
    assert "<script>" not in prose and "](javascript:" not in prose and "| cell" not in prose


def _tune_file(tmp_path: Path, space: str, extra: str = "") -> Path:
    path = tmp_path / "t.yaml"
    path.write_text(f"campaign: {REPO / 'campaigns' / 'demo-tune.yaml'}\nspace:\n{space}"
                    f"objective: {{tok_s: {{class: prose, load: c1}}}}\n{extra}")
    return path


def test_two_flags_sharing_their_first_40_characters_sweep_apart(tmp_path: Path) -> None:
    """Their sweeps' names (a flag cut to 40 characters) would be one: each gets its own, and
    each value its own window, in the space's order every round."""
    long = "--a-flag-name-long-enough-to-be-cut-at-forty-"
    tune = load_tune(_tune_file(tmp_path, f"  {long}one: [1, 2]\n  {long}two: [3]\n"))
    plan = next_plan(tune, dict(START), [])
    assert plan is not None
    windows = [(c.window, c.change) for c in plan.candidates]
    assert len({w for w, _ in windows}) == 3 and len({c.session for c in plan.candidates}) == 2
    assert [change for _, change in windows] == [{f"{long}one": 1}, {f"{long}one": 2}, {f"{long}two": 3}]
    assert all(len(w) <= 64 for w, _ in windows)


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf", "[1, .nan]"])
def test_a_candidate_that_is_no_finite_number_is_refused_where_it_is(tmp_path: Path, value: str) -> None:
    with pytest.raises(SpecError) as info:
        load_tune(_tune_file(tmp_path, f"  --spec-draft-n-max: [3, {value}]\n"))
    [problem] = info.value.problems
    assert (problem.line, problem.col) == (3, 27) and "a finite number" in problem.message, problem
    with pytest.raises(SpecError) as info:  # its only value refused: said once, not "empty" too
        load_tune(_tune_file(tmp_path, f"  --spec-draft-n-max: [{value}]\n"))
    [problem] = info.value.problems
    assert (problem.line, problem.col) == (3, 24) and "a finite number" in problem.message, problem


def test_values_that_give_no_window_name_or_hold_a_secret_are_named_by_position(tmp_path: Path) -> None:
    tune = load_tune(_tune_file(tmp_path, "  --api-key: [sk-live-0123456789abcdef]\n"
                                          "  --draft: ['!!', '??']\n"
                                          "  --hf-endpoint: ['https://u:pwInATune12345@h.example']\n"))
    plan = next_plan(tune, dict(START), [])
    assert plan is not None
    assert [c.window for c in plan.candidates] == ["api-key-v1", "draft-v1", "draft-v2", "hf-endpoint-v1"]
    assert not any("pwinatune" in c.window.lower() for c in plan.candidates)
    assert "0123456789" not in str(plan.windows) or all(
        "0123456789" not in c.window and "0123456789" not in c.session for c in plan.candidates)


def test_every_call_of_the_verdict_has_its_words() -> None:
    """A candidate shown equivalent to the control is ruled out as such, not as "no figure ()"."""
    for outcome in Outcome:
        j = Cell(0.001 if outcome != Outcome.NO_FIGURE else None, -0.01, 0.012, outcome,
                 "void row" if outcome == Outcome.NO_FIGURE else "")
        said = decision(j, True, "")
        assert said.startswith(("kept:", "ruled out:")) and "()" not in said, said
    assert "equivalent" in decision(Cell(0.001, -0.01, 0.012, Outcome.EQUIVALENT), True, "")
    # An interval clear of 0 that the campaign did not call: its reason, not "the noise does not
    # separate it" (issue 45: a value at -16.6 % [-27.2, -4.5] was ruled out in those words).
    why = "not called: p 0.004, adjusted 0.21 over 8 windows > 0.05"
    said = decision(Cell(-0.166, -0.272, -0.045, Outcome.UNDETERMINED, why), True, "")
    assert "undetermined" in said and "adjusted 0.21 over 8 windows" in said
    assert "does not separate" not in said


def test_the_recommended_command_is_the_operators_and_the_verdict_is_in_words(tune: Tune) -> None:
    plan = {"argv": ["llama-server", "-m", "m.gguf", "--spec-draft-n-max", "7", "-lv", "4", "--host",
                     "127.0.0.1", "--port", "4242"], "ruler_args": 6}
    assert operator_argv(plan) == ["llama-server", "-m", "m.gguf", "--spec-draft-n-max", "7"]
    rnd = Round(1, "axes", "run", dict(START), argv={"s1-control": operator_argv(plan)})
    out = summary(tune, REPO, [rnd], dict(START), dict(START), "nothing separates from the incumbent")
    assert out["command"] == "llama-server -m m.gguf --spec-draft-n-max 7"
    text = tune_md(out)
    assert "engine.record" not in text and "-lv 4" not in text
    assert "Verdict: each candidate's delta on the objective against its session's control" in text


def test_validate_on_a_tune_file_says_it_is_one_and_checks_it(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 48: `ruler validate` on a tune file checked it as a campaign (13 missing keys); it
    checks it as `ruler tune` does, and `ruler run` on one says in a line what it is."""
    from engine.campaign.load import load_campaign
    from engine.commands.validate import cmd_validate

    assert cmd_validate(str(TUNE)) == 0
    out = capsys.readouterr()
    assert out.out.startswith("OK: tune file: 2 flags (--spec-draft-n-max, --cache-type-k)"), out
    assert "missing required key" not in out.err
    bad = _tune_file(tmp_path, "  --spec-draft-n-max: [3, .nan]\n")
    assert cmd_validate(str(bad)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{bad}:3:27: space.--spec-draft-n-max[1]: expected a finite number"), err
    with pytest.raises(SpecError) as info:
        load_campaign(TUNE)
    assert [p.message for p in info.value.problems] == [
        "a tune file (space, objective), not a campaign: `ruler tune FILE` runs it, "
        "`ruler validate FILE` checks it"]
    # A tune file with one of its keys misspelt is still one: its base campaign (a key no
    # campaign has) says so, and the problem named is the tune file's, not 13 campaign keys.
    typo = tmp_path / "typo.yaml"
    typo.write_text(TUNE.read_text().replace("\nspace:", "\nspaec:").replace(
        "campaign: ../demo-tune.yaml", f"campaign: {REPO / 'campaigns' / 'demo-tune.yaml'}"))
    assert cmd_validate(str(typo)) == 2
    err = capsys.readouterr().err
    assert "missing required key 'control'" not in err, err
    assert "spaec" in err and "space" in err.replace("spaec", ""), err
