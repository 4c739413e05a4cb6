"""What the run's campaign asks of each window, as the console reads it: the load plan ("rep 2/3",
the ETA) from run_started, and the leak rule (its noise: the Δ column's floor) from the frozen
campaign.yaml."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from engine.campaign import defaults
from engine.record.state import RunState


@dataclass(frozen=True)
class LoadPlan:
    """What each window measures: its shapes (class x concurrency), reps per shape, and the work
    of one pass (requests x max_tokens at each concurrency), for "rep 2/3" and the ETA."""

    shapes: int | None = None
    reps: int | None = None
    classes: tuple[str, ...] = ()
    concurrency: tuple[int, ...] = ()
    requests: tuple[int, ...] = ()  # per pass, at each concurrency in order; () unknown
    max_tokens: int | None = None
    rates: tuple[float, ...] = ()  # open-loop rates, req/s: a pass lasts its arrivals, not tokens/rate

    @classmethod
    def of(cls, wl: dict[str, Any]) -> LoadPlan:
        """From run_started's workload, where reps left out are the spec's default and any other
        figure left out is unknown (the ETA then goes by spans)."""
        try:
            classes, conc = tuple(wl["classes"]), tuple(int(c) for c in wl.get("concurrency") or ())
            reps = int(wl.get("reps", defaults.REPS))
        except (KeyError, TypeError, ValueError):
            return cls()
        requests: tuple[int, ...] = ()
        try:
            if wl.get("requests"):
                requests = tuple(int(n) for n in wl["requests"])
            tokens = int(wl["max_tokens"]) if wl.get("max_tokens") else None
        except (TypeError, ValueError):
            requests, tokens = (), None
        if len(requests) != len(conc):
            requests = ()
        try:
            rates = tuple(float(r) for r in wl.get("rate") or ())
        except (TypeError, ValueError):
            rates = ()
        specs = wl["classes"] if isinstance(wl["classes"], dict) else {}

        def shapes(name: str) -> int:  # a trace's one row; a multi-turn class's closed loop only
            spec = specs.get(name)
            if isinstance(spec, dict) and spec.get("trace") is not None:
                return 1
            if isinstance(spec, dict) and spec.get("conversations") is not None:
                return len(conc)
            return len(conc) + len(rates)

        return cls(sum(shapes(c) for c in classes), reps, classes, conc, requests, tokens, rates)

    def pass_tokens(self, concurrency: int) -> int | None:
        """Tokens one pass asks for at ``concurrency`` (an upper bound: a reply may stop early)."""
        if not self.requests or not self.max_tokens or concurrency not in self.concurrency:
            return None
        return self.requests[self.concurrency.index(concurrency)] * self.max_tokens


def frozen_yaml(campaign_yaml: Path) -> Any:
    """A run's frozen campaign.yaml as data. libyaml's parser where PyYAML has it: the console
    reads it as it opens, and the pure-Python one took 15 ms."""
    return yaml.load(campaign_yaml.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def load_plan(state: RunState) -> LoadPlan:
    return LoadPlan.of(state.workload) if state.workload else LoadPlan()


@dataclass(frozen=True)
class LeakRule:
    """The campaign's leak rule as declared (the spec's defaults where left out): ``spread`` is
    its declared noise, the Δ column's floor; below ``min_concurrency`` a leak-shaped row is noisy,
    not void."""

    spread: float = defaults.LEAK_SPREAD
    min_concurrency: int = defaults.LEAK_MIN_CONCURRENCY


DECLARED = LeakRule()  # the spec's defaults


def frozen_leak(campaign_yaml: Path) -> LeakRule:
    """The leak rule from a run's frozen campaign.yaml."""
    try:
        leak = (frozen_yaml(campaign_yaml) or {}).get("leak") or {}
        return LeakRule(float(leak.get("spread", defaults.LEAK_SPREAD)),
                        int(leak.get("min_concurrency", defaults.LEAK_MIN_CONCURRENCY)))
    except (OSError, yaml.YAMLError, AttributeError, TypeError, ValueError):
        return DECLARED
