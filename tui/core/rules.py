"""The campaign's leak and verdict rules as the console judges by them: run_started's (the fold's
``leak`` and ``verdict``; an older journal's read from its frozen campaign once, as the journal
is read: engine.record.upgrade), with the spec's defaults for what it leaves out (an older
journal's frozen campaign says only what it declared). The console reads no campaign file."""

from __future__ import annotations

from dataclasses import dataclass

from engine.campaign import defaults
from engine.method.verdict import Rule
from engine.record.state import RunState


@dataclass(frozen=True)
class LeakRule:
    """The campaign's leak rule: ``spread`` is its declared noise, the Δ column's floor; below
    ``min_concurrency`` a leak-shaped row is noisy, not void."""

    spread: float = defaults.LEAK_SPREAD
    min_concurrency: int = defaults.LEAK_MIN_CONCURRENCY


DECLARED = LeakRule()  # the spec's defaults
DEFAULT_RULE = Rule(defaults.ERROR_RATE, defaults.CORRECTION, defaults.MARGIN, defaults.BOOT_NOISE)


def leak_rule(state: RunState) -> LeakRule:
    leak = state.leak
    return LeakRule(leak.get("spread", DECLARED.spread),
                    leak.get("min_concurrency", DECLARED.min_concurrency))


def verdict_rule(state: RunState) -> Rule:
    """The run's verdict rule, whole: with boots added until decided, the calls are at each look's
    share of the error rate (engine.record.judgement), so the console's are the engine's only
    with the budget known too."""
    v, d = state.verdict, DEFAULT_RULE
    return Rule(v.get("error_rate", d.error_rate), v.get("correction", d.correction),
                v.get("margin", d.margin), v.get("boot_noise", d.boot_noise),
                v.get("allow_different", d.allow_different), v.get("until_decided", d.until_decided),
                v.get("max_boots", d.max_boots), v.get("max_minutes", d.max_minutes))
