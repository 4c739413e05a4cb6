"""Boots added until decided (engine.record.looks) on synthetic runs (engine.record.simulate): what
a look decides, when it adds a session and of which windows, when it is the last, and that the
looks' levels never spend more than the campaign's error rate."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from engine.method.verdict import Call, Rule
from engine.record.judgement import judgement
from engine.record.looks import take
from engine.record.simulate import Design, Noise, campaign, sequential

RULE = Rule(0.05, "holm", 0.05, None, until_decided=True, max_boots=40)
DESIGN = Design(windows=2, sessions=2, loads=(1, 8), control="both", reps=2)
WINDOWS, SESSIONS = ["w0", "w1"], ["s1", "s2"]


def test_a_plain_effect_is_decided_at_the_first_look_and_not_booted_again() -> None:
    st = campaign(DESIGN, Noise(boot=0.01, rep=0.01), {0: -0.5, 1: 0.02}, np.random.default_rng(1))
    look = take(st, RULE, "both", WINDOWS, SESSIONS)
    assert not look.final and look.level < 0.05 * 0.1
    assert {k for k, v in look.rows.items() if v["call"] == Call.EFFECT} == {
        k for k, r in st.rows.items() if r.window == "w0"}
    assert look.windows["w0"]["call"] == Call.EFFECT
    assert "w0" not in look.undecided and look.order[0] == "control" and look.order[-1] == "control-again"


def test_the_budget_ends_the_looks() -> None:
    st = campaign(DESIGN, Noise(boot=0.05, rep=0.03), {}, np.random.default_rng(2))
    tight = replace(RULE, max_boots=9)  # 8 booted, another session of any window takes 3
    look = take(st, tight, "both", WINDOWS, SESSIONS)
    assert look.final and look.fraction == 1.0 and not look.order
    assert "budget" in look.why and look.level > 0.05 * 0.9


def test_decided_stays_decided_and_the_levels_add_up_to_at_most_the_error_rate() -> None:
    rng = np.random.default_rng(3)
    for _ in range(5):
        st = sequential(DESIGN, Noise(boot=0.02, rep=0.02), {0: -0.08}, RULE, rng)
        assert st.looks[-1]["final"] and sum(look["level"] for look in st.looks) <= 0.05 + 1e-12
        boots = sum(w.started_ts is not None for w in st.windows.values())
        assert boots <= RULE.max_boots  # type: ignore[operator]  # set above
        j = judgement(st, RULE)
        for look in st.looks:
            for key, said in look["rows"].items():
                assert j.rows[key].call == said["call"] and j.rows[key].why().startswith(
                    f"decided at look {look['look']}")


def test_an_earlier_runs_noise_stands_in_where_this_run_measured_none() -> None:
    """A pilot of two sessions measured the noise; a run of one session with the control once
    measured none. With the pilot as its baseline (run_started's record), its deltas have
    intervals, and say whose noise they rest on."""
    from engine.record.judgement import baseline_record

    rule = Rule(0.05, "holm", 0.05, None)
    pilot = campaign(DESIGN, Noise(boot=0.02, rep=0.02), {}, np.random.default_rng(7))
    alone = campaign(Design(windows=2, sessions=1, loads=(1, 8), control="first"), Noise(boot=0.02, rep=0.02),
                     {0: -0.3}, np.random.default_rng(8))
    bare = judgement(alone, rule)
    assert all(j.versus is None or j.versus.se is None for j in bare.rows.values())
    alone.baseline = baseline_record(pilot, rule, "2026-12-07-pilot")
    j = judgement(alone, rule)
    n = j.noise_of("prose", 1, None)
    assert n is not None and n.source == "baseline" and "2026-12-07-pilot" in n.how()
    assert all(c.versus is not None and c.versus.se is not None for c in j.rows.values())
    assert {c.call for k, c in j.rows.items() if "-w0/" in k} == {Call.EFFECT}
