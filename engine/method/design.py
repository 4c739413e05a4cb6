"""The design of a campaign: where a session's control boots go, how many reps and sessions a
question needs, and how the error rate is spent over looks when boots are added until decided.

Pure arithmetic on the method's words; the campaign (engine.campaign.spec) lays sessions out with
it, ``ruler plan`` sizes a campaign with it, the runner adds boots by it.
"""

from __future__ import annotations

import math

from engine.words import CONTROL, control_boot


def control_boots(windows: int, position: str) -> int:
    """A session's control boots: ``both`` two; ``interleaved`` about the root of its windows (the
    allocation that makes many windows' deltas against one control most precise for the boots
    spent, Dunnett 1955), at least two and at most one more than its windows."""
    if position == "interleaved":
        return max(2, min(windows + 1, math.ceil(math.sqrt(windows))))
    return 2 if position == "both" else 1


def interleave(names: list[str], boots: int) -> list[str]:
    """The control's boots spread through a session's windows: first, last, and evenly between."""
    if boots < 2:
        return [CONTROL, *names]
    gaps = boots - 1
    sizes = [len(names) // gaps + (i < len(names) % gaps) for i in range(gaps)]
    out, at = [CONTROL], 0
    for i, size in enumerate(sizes):
        out += names[at:at + size]
        at += size
        out.append(control_boot(i + 1, boots))
    return out


# Boots added until decided: the share of the error rate the looks before the last may spend. They
# call only what is plain (flash attention off) and stop booting it; the last look, on all the
# boots, keeps the rest, so adding boots costs a design little power where it decides.
INTERIM = 0.1


def interim_level(alpha: float, fraction: float, before: float) -> float:
    """A look before the last: its share of the interim error rate, in proportion to the budget
    used since the look before (``before``: the budget used then)."""
    return alpha * INTERIM * max(0.0, fraction - before)


def final_level(alpha: float, before: float) -> float:
    """The last look: what the looks before (the last at budget fraction ``before``) left."""
    return alpha * (1 - INTERIM * min(1.0, before))
