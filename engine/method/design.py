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


def residual_df(sessions: int, windows: int, controls: int) -> int:
    """The noise's degrees of freedom at a shape when every window is booted once a session beside
    ``controls`` control boots: the boots less a level per session and an effect per window."""
    return max(0, sessions * (windows + controls) - sessions - windows)


def sessions_needed(boot_mean: float, windows: int, controls: int, level: float, effect: float,
                    power: float, equivalence: bool = False, most: int = 50) -> int | None:
    """The fewest sessions (each booting every window once and the control ``controls`` times) at
    which a window's delta at one shape, with a boot's mean varying by ``boot_mean`` (log
    variance), is called at ``level`` when it truly moves by ``effect`` (or, ``equivalence``:
    shown within ±effect when it truly does not move) with probability ``power``; None past
    ``most``. Normal approximations to the t tests, at the design's residual degrees of freedom."""
    from scipy import special  # lazy: the console starts without scipy's import time

    gap = math.log1p(effect) if effect > 0 else -math.log1p(effect)
    for sessions in range(1, most + 1):
        df = residual_df(sessions, windows, controls)
        if df < 1:
            continue
        se = math.sqrt(boot_mean * (1 + 1 / controls) / sessions)
        if equivalence:  # TOST at level: both one-sided tests pass when the truth is 0
            need = float(special.stdtrit(df, 1 - level)) + float(special.stdtrit(df, (1 + power) / 2))
        else:
            need = float(special.stdtrit(df, 1 - level / 2)) + float(special.stdtrit(df, power))
        if gap / se >= need:
            return sessions
    return None


def best_reps(between: float, within: float, boot_s: float, pass_s: float, most: int = 10) -> int:
    """The reps a boot that make a boot's mean most precise for the GPU time spent (Kalibera and
    Jones: the repetitions of the cheap level are the root of the cost ratio times the variance
    ratio): ``boot_s`` a boot's own seconds and its warm passes, ``pass_s`` one rep of every shape."""
    if within <= 0 or pass_s <= 0:
        return 1
    if between <= 0:
        return most
    return max(1, min(most, round(math.sqrt(boot_s / pass_s * within / between))))
