"""``ruler validate FILE``: the campaign loads (exit 0, with warnings on stderr) or every problem as
file:line:col on stderr (exit 2)."""

from __future__ import annotations

import sys

from engine.campaign.redact import argv_warnings
from engine.campaign.spec import SpecError, load_campaign


def cmd_validate(path: str) -> int:
    """`ruler validate FILE`: a one-line summary and 0, or every problem on stderr and 2."""
    try:
        campaign = load_campaign(path)
    except SpecError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return 2
    workload = campaign.workload
    print(
        f"OK: {campaign.name}: {len(campaign.windows)} windows in {len(campaign.sessions)} "
        f"sessions, {len(workload.classes)} classes x concurrency {list(workload.concurrency)}, "
        f"{workload.reps} reps"
    )
    for warning in argv_warnings(campaign):
        print(warning, file=sys.stderr)
    return 0
