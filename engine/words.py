"""The words every layer shares, defined once below them all: the control's name, the statuses of
a run, session, window and row, the quality checks and their verdicts, a row's key and a load's
label.

Every enum is a ``StrEnum``: its members are the very strings the journal holds (the events that
carry them: engine.record.events), so the campaign, the record, the run, quality, the report and
the console speak one vocabulary without importing one another.
"""

import functools
from enum import StrEnum

CONTROL = "control"  # the window every session boots first; every other window is a delta to it
# The control booted again at a session's end (``control_position: both`` or ``interleaved``): the
# same server more than once in one session measures how far it moves between boots
# (engine.method.boots). ``interleaved`` boots it between windows too: ``control-2``, ``control-3``...
CONTROL_AGAIN = "control-again"


def control_boot(i: int, boots: int) -> str:
    """The name of a session's i-th control boot of ``boots`` (the first is the control, the last
    the control again, those between ``control-<i+1>``)."""
    if i == 0:
        return CONTROL
    return CONTROL_AGAIN if i == boots - 1 else f"{CONTROL}-{i + 1}"


def is_control(window: str) -> bool:
    """A boot of the control itself (the control, or the control booted again)."""
    if window in (CONTROL, CONTROL_AGAIN):
        return True
    head, _, tail = window.partition("-")
    return head == CONTROL and tail.isdigit() and tail.isascii()


# What a run freezes at its start beside its copy of the campaign, read back by a resume and by
# the campaign layer for a run's own campaign (engine.campaign.frozen): the plain classes' prompts,
# every other class's items, the quality checks' prompts read from files.
FROZEN_PROMPTS = "prompts.json"
FROZEN_ITEMS = "items.json"
FROZEN_QUALITY = "quality.json"


# What stopping a window's server leaves of it, per runtime (engine.runtime): said where an abort
# is asked for and answered, so that no runtime is promised what another does.
STOP_KEEPS = {
    "process": "its process is ended; its log stays in the window's directory",
    "docker": "its container is stopped and kept, for docker logs (removed where docker.keep is "
              "false); its log stays in the window's directory",
    "slurm": "its batch job is cancelled; the job's script, record and log stay in the window's "
             "directory",
    "attach": "it is left running: ruler attached to it and did not start it",
}


def stop_keeps(runtime: str) -> str:
    """What stopping the server leaves on ``runtime``, in words ("" for a runtime not listed)."""
    return STOP_KEEPS.get(runtime, "")


class RunStatus(StrEnum):
    NEW = "new"  # no run_started folded yet
    RUNNING = "running"
    FINISHED = "finished"
    ABORTED = "aborted"
    ERROR = "error"


class WindowStatus(StrEnum):
    PENDING = "pending"  # listed in run_started, not booted yet
    QUEUED = "queued"  # its batch job waits in the scheduler's queue (runtime slurm)
    BOOTING = "booting"
    MEASURING = "measuring"  # ready: measurement and quality phases
    DONE = "done"
    ADVANCED = "advanced"  # the operator ended it; the campaign went on
    ABORTED = "aborted"
    FAILED = "failed"  # the server died mid-window
    REJECTED = "rejected"  # it never became ready


class RowStatus(StrEnum):
    PENDING = "pending"
    WARM = "warm"  # the attempt's warm pass
    MEASURING = "measuring"
    OK = "ok"
    NOISY = "noisy"  # spread above the limit below the leak concurrency
    VOID = "void"  # a leaked pass (or failed requests): no figure
    FAILED = "failed"
    ABORTED = "aborted"  # cut short by the operator: measured again on resume


class SessionStatus(StrEnum):
    """Where a session stands, derived from its windows (``RunState.session_status``)."""

    QUEUED = "queued"  # not begun: no window started, not taken by a place
    RUNNING = "running"  # begun, some window not complete
    DONE = "done"  # every window of it complete


class QualityStatus(StrEnum):
    DONE = "done"
    STOPPED = "stopped"  # the operator aborted or advanced during the checks


class Check(StrEnum):
    """A quality or ruler check: the ``check`` of a verdict event."""

    KNOBS = "knobs"
    GREEDY = "greedy"
    REFERENCE = "reference"  # the control becoming the session's reference (only when that fails)
    TEACHER_FORCED = "teacher_forced"
    SELF_SCORE = "self_score"
    KL = "kl"
    NO_EFFECT = "no_effect"
    TOOL_PROBE = "tool_probe"
    DRIFT = "drift"


class Verdict(StrEnum):
    """Every verdict word a check emits (engine/quality/__init__.py has the table per check)."""

    ACTS = "acts"
    RULER_SUSPECT = "ruler suspect"
    IDENTICAL = "identical"
    DIVERGED = "diverged"
    AGREEMENT = "agreement"  # greedy on another stack: a figure (identical of n), never pass or fail
    NO_REFERENCE = "no reference"
    REFERENCE = "reference"  # a first session's control: it is the reference
    EXACT = "exact"
    CLOSE = "close"
    DIFFERS = "differs"
    REPEAT_IDENTICAL = "repeat-identical"
    REPEAT_DIFFERS = "repeat-differs"
    ABOVE_FLOOR = "above floor"
    AT_FLOOR = "at floor"
    FLOOR = "floor"  # a control's KL verdict: the floor it measured
    NO_OBSERVABLE_EFFECT = "no observable effect"
    OBSERVABLE_EFFECT = "observable effect"
    UNDETERMINED = "undetermined"
    OK = "ok"
    FAILED = "failed"
    WITHIN_SPREAD = "within spread"  # drift before deltas had intervals (older journals)
    WITHIN_NOISE = "within noise"  # drift: the controls' delta is not beyond the noise
    DRIFT = "drift"
    ERROR = "error"  # any check: the server answered with an error
    UNSUPPORTED = "unsupported"  # any check: the server cannot answer it


# Statuses in the groups every consumer asks about.
LIVE_ROWS = frozenset({RowStatus.WARM, RowStatus.MEASURING})
USABLE_ROWS = frozenset({RowStatus.OK, RowStatus.NOISY})  # a row with a figure to compare
COMPLETE_ROWS = USABLE_ROWS | {RowStatus.VOID, RowStatus.FAILED}  # resume skips them
RERUNNABLE_ROWS = frozenset({RowStatus.VOID, RowStatus.FAILED})  # no figure: the operator may rerun
UP_WINDOWS = frozenset({WindowStatus.QUEUED, WindowStatus.BOOTING, WindowStatus.MEASURING})
COMPLETE_WINDOWS = frozenset({WindowStatus.DONE, WindowStatus.ADVANCED, WindowStatus.FAILED,
                              WindowStatus.REJECTED})  # resume skips them; aborted ones boot again
OVER_RUNS = frozenset({RunStatus.FINISHED, RunStatus.ABORTED, RunStatus.ERROR})


# A row's basis (engine.method.steady): its tok/s over the steady windows, or over the whole reps.
STEADY, WHOLE = "steady", "whole"

# A trace class's one load: open loop at its requests' own times (no workers, no rate of ruler's).
TRACE_LOAD = "trace"


def load_label(concurrency: int, rate: float | None = None) -> str:
    """``c4`` (closed loop, four workers), ``r2.5`` (open loop, 2.5 requests a second) or
    ``trace`` (open loop at a trace's times: neither workers nor a rate)."""
    return f"r{rate:g}" if rate else f"c{concurrency}" if concurrency else TRACE_LOAD


def load_text(concurrency: int, rate: float | None = None) -> str:
    """A load as people read it: ``C4``, ``2.5 req/s``, ``trace``."""
    return f"{rate:g} req/s" if rate else f"C{concurrency}" if concurrency else TRACE_LOAD


@functools.lru_cache(maxsize=1 << 14, typed=True)  # a fold asks it of each rep's event: a few rows
def row_key(session: str, window: str, cls: str, concurrency: int, rate: float | None = None) -> str:
    return f"{session}-{window}/{cls}/{load_label(concurrency, rate)}"


def plural(n: int, word: str, many: str = "") -> str:
    """A count with its noun as people write it: ``1 rep``, ``3 reps``, ``1 session``; ``many``
    where the plural is not the word and an s."""
    return f"{n} {word if n == 1 else many or word + 's'}"
