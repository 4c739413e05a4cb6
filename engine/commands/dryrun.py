"""``ruler run FILE --dry-run``: print what a run would start, send and watch (the plan is
engine.campaign.dryrun's), or every problem of the campaign on stderr."""

from __future__ import annotations

import sys

from engine.campaign.dryrun import dry_run
from engine.campaign.load import SpecError
from engine.campaign.prompts import DataFileError
from engine.errors import EngineError
from engine.sanitize import terminal_lines


def cmd_dry_run(campaign_path: str, runtime: str | None, results_dir: str = "results") -> int:
    """``ruler run FILE --dry-run``: 0 and the plan, 2 for a bad campaign, 1 if ruler fails."""
    try:
        text = dry_run(campaign_path, runtime, results_dir=results_dir)
    except SpecError as e:
        for problem in e.problems:  # each may quote the file or the name it was given
            print(terminal_lines(problem), file=sys.stderr)
        return 2
    except DataFileError as e:  # a ${...} file path the host resolves to nothing usable
        print(terminal_lines(f"{campaign_path}: {e.what} {e}"), file=sys.stderr)
        return 2
    except EngineError as e:
        print(terminal_lines(f"ruler run --dry-run: {e}"), file=sys.stderr)
        return 1
    print(text, end="")
    return 0
