"""Plain progress lines read the way the run went: a boot-fact change reads control -> window."""

from __future__ import annotations

from engine.commands.progress import format_event
from engine.servers import BootFacts
from engine.servers.llamacpp import LlamaCppAdapter
from tests.paths import FIXTURES

LOGS = FIXTURES / "logs"


def boot(name: str) -> BootFacts:
    facts = BootFacts()
    facts.feed_text(LlamaCppAdapter(), (LOGS / name).read_text(encoding="utf-8"))
    return facts


def test_window_ready_line_reads_from_the_control_to_the_window() -> None:
    """Control `-c 2048`, window `-c 4096` (real llama-server logs): the line said 4096->2048."""
    control, window = boot("llamacpp_c2048_np2.log"), boot("llamacpp_c4096_np2.log")
    diff = window.diff(control)  # as engine/run/runner.py records it
    line = format_event({"kind": "window_ready", "session": "s1", "window": "ctx4k", "boot_s": 3.14,
                         "diff": diff})
    assert line == ("s1/ctx4k ready in 3.1 s | vs control: compute.CPU_mib 14.51->15.51, "
                    "ctx.n_ctx 2048->4096, ctx.n_ctx_seq 1024->2048, kv.CPU_mib 45.0->90.0 (+7)")
    # The eighth, server.url (a port per boot), differs at every boot and is not counted.
    assert "server.url" in diff["changed"]


def rep_done(window: str, rep: int, steady_s: float | None, ramp_s: float | None,
             tail_s: float | None, cycles: float | None = None) -> dict[str, object]:
    e: dict[str, object] = {"kind": "rep_done", "session": "s1", "window": window, "class": "prose",
                            "concurrency": 8, "attempt": 1, "rep": rep, "agg_tok_s": 900.0, "failed": 0,
                            "steady_tok_s": None if steady_s is None else 1000.0, "steady_s": steady_s,
                            "ramp_s": ramp_s, "tail_s": tail_s}
    if cycles is not None:  # a rep of a journal from before the cycles: none
        e["steady_cycles"] = cycles
    return e


def line(e: dict[str, object]) -> str:
    text = format_event(e)
    assert text is not None, e
    return text


def test_the_controls_first_rep_says_when_reps_are_too_short_for_a_steady_window() -> None:
    """The H200 method run's C8 reps: 0.5 s of steady window between ramp and tail of 0.4 s each."""
    short = line(rep_done("control", 1, 0.52, 0.41, 0.37))
    said = "TOO SHORT for a steady window (ramp 0.41 s, tail 0.37 s): a steady window of 0.52 s"
    assert said in short, short
    assert "the row is over the whole reps" in short
    assert "TOO SHORT" in line(rep_done("control", 1, None, None, None))
    # Said once, where it can be acted on: not on later reps, nor on a window's reps.
    assert "TOO SHORT" not in line(rep_done("control", 2, 0.52, 0.41, 0.37))
    assert "TOO SHORT" not in line(rep_done("fa-off", 1, 0.52, 0.41, 0.37))
    assert "TOO SHORT" not in line(rep_done("control", 1, 8.0, 0.41, 0.37))


def test_a_closed_loop_window_under_two_cycles_a_worker_is_too_short_however_long() -> None:
    """Two requests a worker (the old default): about one cycle each, whatever the seconds."""
    short = line(rep_done("control", 1, 8.0, 3.0, 3.0, cycles=0.97))
    assert "TOO SHORT" in short and "0.97 request cycles per worker" in short, short
    assert "TOO SHORT" not in line(rep_done("control", 1, 8.0, 3.0, 3.0, cycles=2.98))
    # The cycles are the rule for a closed loop: a window shorter than its edges may hold them.
    assert "TOO SHORT" not in line(rep_done("control", 1, 3.0, 3.0, 3.0, cycles=2.0))


def test_a_rep_line_gives_its_acceptance_per_draft_position() -> None:
    e = {**rep_done("ngram", 1, None, None, None), "accept_len": 2.5, "accept_rate": 0.5,
         "accept_per_pos": [0.8, 0.5, 0.2]}
    line = format_event(e)
    assert line is not None and " accept 2.5/0.5 pos 0.80/0.50/0.20" in line
