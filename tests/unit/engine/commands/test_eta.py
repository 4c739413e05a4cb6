"""The ETA while a window boots (engine.commands.eta): its boot is estimated from the boots of its
own stack, and a boot well past every one of them, or of a stack never booted before, leaves the
time left unknown ("~? left"), never a count that stands still (it read 0:23 left through a 41 s vLLM
boot, llama.cpp's two-second boots its estimate)."""

from __future__ import annotations

import pytest

from engine.commands.eta import BOOT_SLACK_S, eta, load_plan
from engine.record.fold import fold
from engine.record.journal import read_events
from tests.paths import FIXTURES

JOURNAL = FIXTURES / "journals" / "finished" / "journal.jsonl"


def booting(stack: str, age: float) -> tuple[float | None, float]:
    """The recorded run up to its second window's start, that window a boot of ``stack`` ("" the
    campaign's own) ``age`` seconds in: the ETA, and the control's boot."""
    events = read_events(JOURNAL)
    starts = [i for i, e in enumerate(events) if e["kind"] == "window_started"]
    cut = [dict(e) for e in events[: starts[1] + 1]]
    if stack:
        cut[-1]["stack"] = stack
    st = fold(cut)
    boot = st.windows["s1-control"].boot_s
    assert boot is not None
    return eta(st, load_plan(st), cut[-1]["ts"] + age), boot


def test_a_boot_within_its_stacks_boots_counts_what_is_left_of_it() -> None:
    early, boot = booting("", 0.0)
    later, _ = booting("", boot / 2)
    assert early is not None and later is not None
    assert early - later == pytest.approx(boot / 2)  # the count goes down as the boot goes on


def test_a_boot_well_past_every_boot_of_its_stack_leaves_the_time_left_unknown() -> None:
    _, boot = booting("", 0.0)
    assert booting("", boot + BOOT_SLACK_S - 1)[0] is not None  # an axis may slow a boot down
    assert booting("", boot + BOOT_SLACK_S + 1)[0] is None


def test_the_first_boot_of_another_stack_has_no_estimate() -> None:
    assert booting("vllm", 1.0)[0] is None
