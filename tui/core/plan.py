"""The campaign's leak rule as the console reads it (its noise: the Δ column's floor; its
concurrency: why a leak-shaped row is noisy) from the frozen campaign.yaml. The load plan ("rep
2/3", the ETA) is engine.commands.eta's, shared with ``ruler status``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from engine import files
from engine.campaign import defaults
from engine.method.verdict import Rule


def frozen_yaml(campaign_yaml: Path) -> Any:
    """A run's frozen campaign.yaml as data. libyaml's parser where PyYAML has it: the console
    reads it as it opens, and the pure-Python one took 15 ms."""
    return yaml.load(files.read_text(campaign_yaml), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


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


DEFAULT_RULE = Rule(defaults.ERROR_RATE, defaults.CORRECTION, defaults.MARGIN, defaults.BOOT_NOISE)


def frozen_rule(campaign_yaml: Path) -> Rule:
    """The campaign's verdict rules from a run's frozen campaign.yaml (the defaults where left out
    or unreadable): the Δ column's calls are the run's own (engine.record.judgement)."""
    try:
        v = (frozen_yaml(campaign_yaml) or {}).get("verdict") or {}
        declared = v.get("boot_noise", defaults.BOOT_NOISE)
        boots, minutes = v.get("max_boots"), v.get("max_minutes")
        # Boots added until decided: the calls are at each look's share of the error rate
        # (engine.record.judgement), so the console's are the engine's only with the budget known.
        return Rule(float(v.get("error_rate", defaults.ERROR_RATE)),
                    str(v.get("correction", defaults.CORRECTION)),
                    float(v.get("margin", defaults.MARGIN)),
                    None if declared is None else float(declared),
                    bool(v.get("allow_different", False)), bool(v.get("until_decided", False)),
                    None if boots is None else int(boots), None if minutes is None else float(minutes))
    except (OSError, yaml.YAMLError, AttributeError, TypeError, ValueError):
        return DEFAULT_RULE
