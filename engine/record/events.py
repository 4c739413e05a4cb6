"""The journal's schema, defined once: every event kind with its fields. The words the fields
hold (window, row, session and run statuses, checks, verdicts) are engine.words'.

An event on disk is one JSON object: ``seq``, ``ts``, ``kind`` and the fields of its kind's
TypedDict below. ``EventKind`` is a ``StrEnum``: its members are the very strings the journal
holds. The runner checks each event against its kind before it is written
(engine.record.eventcheck): a ruler bug fails loudly, never as a malformed journal.
"""

# No ``from __future__ import annotations``: TypedDict reads NotRequired[...] only from evaluated
# annotations, and __required_keys__ is what engine.record.eventcheck relies on.

import types
from enum import StrEnum
from typing import Any, NotRequired, TypedDict

from engine.record import figures
from engine.words import Check, QualityStatus, RunStatus, Verdict, WindowStatus


class EventKind(StrEnum):
    # the run
    RUN_STARTED = "run_started"
    RUN_RESUMED = "run_resumed"
    SESSION_STARTED = "session_started"
    SIGNAL = "signal"
    STRAY_STOPPED = "stray_stopped"
    COMMAND = "command"
    # boots added until decided (verdict.until_decided): each look at the evidence, each session added
    VERDICT_LOOK = "verdict_look"
    SESSION_ADDED = "session_added"
    ENGINE_ERROR = "engine_error"
    RUN_FINISHED = "run_finished"
    # a window
    WINDOW_REBOOT = "window_reboot"
    WINDOW_STARTED = "window_started"
    GPU_MEMORY = "gpu_memory"  # before a boot: the owned GPUs' memory back to the session's level?
    SERVER_STARTED = "server_started"
    WINDOW_QUEUED = "window_queued"  # a batch job waits in its scheduler's queue (each new reason)
    WINDOW_PLACED = "window_placed"  # the job runs: its node and port are known; the boot clock starts
    BOOT_FACT = "boot_fact"
    WINDOW_READY = "window_ready"
    WINDOW_REJECTED = "window_rejected"
    PARITY = "parity"  # a window on another stack: its prompts' token ids against the control's
    QUALITY_STARTED = "quality_started"
    VERDICT = "verdict"
    QUALITY_DONE = "quality_done"
    WINDOW_FINISHED = "window_finished"
    SERVER_STOPPING = "server_stopping"  # its stop began: a server may take seconds to go
    SERVER_STOPPED = "server_stopped"
    RERUN_WAITING = "rerun_waiting"  # what an operator's rerun waits on before its window boots
    # a shape (class x concurrency) of a window
    SHAPE_STARTED = "shape_started"
    SHAPE_RESUMED = "shape_resumed"
    WARM_DONE = "warm_done"
    PAUSED = "paused"
    REP_DONE = "rep_done"
    LEAK_SUSPECTED = "leak_suspected"
    ROW_VOID = "row_void"
    RERUN_ABORTED = "rerun_aborted"
    ROW_DONE = "row_done"
    # a class of a window
    CAPACITY = "capacity"  # capacity at an SLA: the search's answer (engine.method.capacity)


# ---------------------------------------------------------------- the fields of each kind

class Where(TypedDict):
    session: str
    window: str


# A shape's load: C closed-loop workers, or (concurrency 0) an open-loop arrival rate, req/s.
Shape = TypedDict("Shape", {"session": str, "window": str, "class": str, "concurrency": int,
                            "rate": NotRequired[float]})


class Workload(TypedDict):
    classes: list[str]
    concurrency: list[int]
    reps: int
    requests: NotRequired[list[int]]  # per pass, at each concurrency in order (the console's ETA)
    max_tokens: NotRequired[int]
    rate: NotRequired[list[float]]  # open-loop rates, req/s, after the concurrencies
    rate_requests: NotRequired[list[int]]  # per pass, at each rate


# The journal's format, run_started's ``format``: 2 carries the workload, 3 the leak and verdict
# rules. An older journal's events are read in this format's shape (engine.record.upgrade).
FORMAT = 3


class LeakRecord(TypedDict):
    """The campaign's leak rule (its ``leak:``) as the console reads a row by it."""

    spread: float  # the declared noise: a row within it is clean, the Δ column's floor
    min_concurrency: int  # below it a leak-shaped row is noisy, not void


class VerdictRecord(TypedDict):
    """The campaign's verdict rule (its ``verdict:``, engine.method.verdict.Rule), whole: the calls
    the console shows are the engine's only with the same rule."""

    error_rate: float
    correction: str
    margin: float
    boot_noise: float | None
    allow_different: bool
    until_decided: bool
    max_boots: int | None
    max_minutes: float | None


class Sweep(TypedDict):
    axis: str  # what the sweep varies: args --flag, env NAME, knobs name, model...
    control: Any  # the control's value of it (None: the control leaves it out)
    windows: dict[str, Any]  # window -> its value


class RunStarted(TypedDict):
    format: int  # the format the journal was written in (a format 1 journal's: upgraded on read)
    campaign: str
    run: str
    runtime: str
    server: str
    pid: int
    sessions: dict[str, list[str]]  # session -> its windows in boot order, the control included
    axes: dict[str, str]  # window -> its axis label
    # Absent only from a format 1 journal whose frozen campaign.yaml cannot be read.
    workload: NotRequired[Workload]
    # The rules the run's rows and windows are judged by. Absent only from an older journal whose
    # frozen campaign.yaml cannot be read; an older one's hold the keys its campaign declared.
    leak: NotRequired[LeakRecord]
    verdict: NotRequired[VerdictRecord]
    # Each sweep (engine.campaign.sweep): the axis it varies, the control's value of it, and each
    # of its windows' value, in the order of the values. Absent from a campaign without sweeps.
    sweeps: NotRequired[dict[str, Sweep]]
    # `ruler run --baseline RUN_DIR`: that run's noise between boots per shape, pooled with this
    # run's by their degrees of freedom (engine.record.judgement): {"run": name, "noise": [...]}
    baseline: NotRequired[dict[str, Any]]


class RunResumed(TypedDict):
    pid: int
    rows_done: int


class SessionStarted(TypedDict):
    session: str
    place: NotRequired[str]  # the place it runs on, when the campaign names places
    where: NotRequired[dict[str, Any]]  # that place as the campaign describes it
    host: NotRequired[dict[str, Any]]  # its machine as its runtime says (runtime.base.Host), or error


class Signal(TypedDict):
    signal: str  # its name: SIGTERM, SIGINT


class StrayStopped(TypedDict):
    """A server a killed engine left running; its fields are the runtime's identity (open)."""

    name: str


class Command(TypedDict):
    cmd: str
    args: list[str]
    who: dict[str, Any]  # the peer's pid, uid, gid
    reply: str


class EngineErrorEvent(TypedDict):
    error: str


class RunFinished(TypedDict):
    status: RunStatus


class WindowReboot(Where):
    row: str  # the void or failed row whose rerun boots the window again
    reason: str
    reboot: int


class WindowStarted(Where):
    axis: str
    runtime: str
    plan: dict[str, Any]  # LaunchPlan.describe()
    tag: str  # "" or "-rerunN"
    log: str  # the boot log, relative to the run directory
    stack: NotRequired[str]  # a window on another stack: its server (its adapter)
    # The setting that makes its server simulate speculative acceptance (engine.servers.launch):
    # its acceptance figures are set, not measured. Absent: the server measures its own.
    simulated: NotRequired[str]


class GpuMemory(Where):
    """GPU hygiene before a window's server starts (engine.run.gpuwatch): the wait for the owned
    GPUs' used memory to come back to where it stood before the session's first boot."""

    settled: bool  # back to that level (within the tolerance) before the wait ran out
    waited_s: float
    used_mib: dict[str, int]  # NVML index -> MiB used when the wait ended
    baseline_mib: dict[str, int]  # ... before the session's first boot
    free_mib: int  # free on the owned GPUs at boot, together (also the boot fact gpu.free_mib)
    holders: list[dict[str, Any]]  # processes still holding memory when it did not settle


class ServerStarted(Where):
    """Where and the runtime's identity of the server (open: container id, pid, url...)."""

    runtime: str


class WindowQueued(Where):
    job: str  # the scheduler's job id
    state: str  # Slurm's job state (PENDING, CONFIGURING...)
    reason: str  # Slurm's reason: Resources, Priority, ReqNodeNotAvail...


class WindowPlaced(Where):
    job: str
    node: str  # the node the scheduler ran the job on: the session's place
    url: str  # where the server listens (the job picked the port on its node)
    queued_s: float  # from submission until the job said where it runs


class BootFact(Where):
    key: str
    value: Any


class WindowReady(Where):
    boot_s: float
    facts: dict[str, Any]
    diff: dict[str, Any] | None  # BootFacts.diff against the session's control; None for it


class WindowRejected(Where):
    reason: str
    errors: list[str]


class QualityStarted(Where):
    pass


class ParityEvent(Where):
    """A window on another stack against its session's control (engine.quality.stacks): per class,
    whether both stacks turned every prompt into the same token ids."""

    reference: str  # the control's server (its adapter)
    stack: str  # the window's
    # class -> {verdict, identical, prompts, differing, failed}
    classes: dict[str, dict[str, Any]]
    file: str  # the receipt, relative to the run directory


class VerdictEvent(Where):
    check: Check
    verdict: Verdict
    summary: str
    file: str | None  # the receipt, relative to the run directory
    figures: dict[str, Any]


class QualityDone(Where):
    status: QualityStatus
    seconds: float
    requests: int
    stages: dict[str, float]


class WindowFinished(Where):
    status: WindowStatus
    reason: NotRequired[str]


class ServerStopping(Where):
    alive: bool  # whether it still ran as its stop began (one killed from outside may not)


class RerunWaiting(Where):
    """What an operator's rerun of rows of this window waits on now, in words: the window up on
    its place to end, a server to stop; the window's boot again (window_reboot) ends the wait."""

    rows: list[str]
    waiting: str


class ServerStopped(Where):
    exit_code: int | None
    kept: bool
    record: NotRequired[dict[str, Any]]  # a batch job: its scheduler's final record (state, reason...)


class ShapeStarted(Shape):
    attempt: int
    rerun: bool
    carried: NotRequired[list[list[int]]]  # [attempt, rep] of each rep kept from a void attempt


class ShapeResumed(Shape):
    attempt: int
    reps_kept: int


class WarmDone(Shape):
    attempt: int
    label: str  # warm, warm2..., rewarm2...
    agg_tok_s: float
    failed: int
    file: str


class Paused(Shape):
    attempt: int
    rep: int  # the rep it waits before


class RepDone(Shape):
    attempt: int
    rep: int
    requests: int  # from here to decode_tok_s: stats.rep_figures
    failed: int
    tokens: int
    wall_s: float
    agg_tok_s: float
    per_user_tok_s: float
    ttft_ms: float | None
    decode_tok_s: float | None
    accept_len: float | None
    accept_rate: float | None
    client_bound: bool
    lag_p99_ms: float
    file: str
    gpu: NotRequired[dict[str, Any]]  # engine.gpu.per_rep: power_w, sm_mhz_min, j_per_token, throttle
    cache_hit: NotRequired[float | None]  # share of prompt tokens served from the prefix cache
    in_flight: NotRequired[float]  # stats.rep_figures: mean requests in flight (Little's law)
    rps: NotRequired[float]  # finished requests a second
    goodput_rps: NotRequired[float | None]  # of them, a second, those within the SLOs (None: none set)
    steady_tok_s: NotRequired[float | None]  # engine.method.steady: tok/s over the steady window
    steady_s: NotRequired[float | None]  # ... its seconds (None: the rep has none)
    ramp_s: NotRequired[float | None]  # the seconds before it
    tail_s: NotRequired[float | None]  # the seconds after it
    steady_cycles: NotRequired[float | None]  # closed loop: request cycles per worker in it
    half_width: NotRequired[float | None]  # with a precision: the row's half-width after this rep
    precision_status: NotRequired[str]  # ... and the rule's word: more | reached | cap | cannot
    turns: NotRequired[list[dict[str, Any]]]  # multi-turn: stats.turn_figures of this rep
    # engine.method.acceptance: per draft position, the share of verify steps that accepted it
    accept_per_pos: NotRequired[list[float]]
    # Only on a window whose server simulates acceptance: "simulated (the setting)", as its rows
    acceptance: NotRequired[str]


class LeakSuspected(Shape):
    attempt: int
    rep: int
    agg_tok_s: float
    median: float | None
    cause: NotRequired[str]  # "throttled" when the GPU telemetry explains the slow rep
    detail: NotRequired[str]  # ... and how (reasons, the SM clock)


class RowVoid(Shape):
    attempt: int
    spread: float | None  # None: no rep moved a token (engine.method.leak.spread_figure)
    reason: str
    rep_tok_s: list[float]
    rerun: bool
    condemned: NotRequired[list[int]]  # the reps measured again (the rest are kept)
    cause: NotRequired[str]  # "throttled": the slowest rep's GPU was throttled (its reason says how)
    spread_shape: NotRequired[str]  # engine.method.leak: leak (only a leak-shaped row is rerun)
    spread_why: NotRequired[str]  # which rep stood alone, against what


class RerunAborted(Shape):
    attempt: int
    reason: str
    reps: int


def _row_done() -> type:
    """A finished row: its shape and the fields engine.record.figures declares for the event, every
    figure absent when no rep was measured."""
    def body(ns: dict[str, Any]) -> None:
        ns["__annotations__"] = {f.name: f.type if f.required else NotRequired[f.type]
                                 for f in figures.ROW if f.journal == figures.ROW_DONE}
        ns["__doc__"] = _row_done.__doc__
    return types.new_class("RowDone", (Shape,), exec_body=body)


RowDone = _row_done()


# The answer of a capacity search for one class of a window: its band and every probe's verdict.
Capacity = TypedDict("Capacity", {
    "session": str, "window": str, "class": str,
    "over": str,  # rate | concurrency
    "criteria": str,  # what must hold, in words
    "found": str,  # engine.method.capacity.Found: bracketed | budget | below range | above range | no answer
    "lo": float | None,  # the highest load shown to hold (the capacity)
    "hi": float | None,  # the lowest load shown to fail
    "mixed": list[float],  # loads whose reps disagreed, inside the band
    "probes": list[dict[str, Any]],  # each: load, probe (holds | fails | mixed | void), held, reps, row
})


class VerdictLook(TypedDict):
    """One look at the evidence of a campaign whose boots are added until decided
    (engine.record.looks): the level spent at it, the budget used, what it decided for good."""

    look: int  # 1, 2, ...
    level: float  # this look's share of the error rate
    fraction: float  # the budget used after it (1: the last look, the rest of the error rate spent)
    final: bool
    boots: int  # boots so far, the control's included
    minutes: float  # of booted servers so far
    rows: dict[str, dict[str, str]]  # row key -> {call, why}: rows decided at this look
    windows: dict[str, dict[str, str]]  # window -> {call, why}: windows decided at this look
    undecided: list[str]  # the windows booted again next (none at the last look)
    why: str  # why it is the last (all decided, the budget) or what comes next, in words


class SessionAdded(TypedDict):
    session: str
    windows: list[str]  # its boot order, the control's boots included
    look: int  # the look that added it


FIELDS: dict[EventKind, type] = {
    EventKind.RUN_STARTED: RunStarted,
    EventKind.RUN_RESUMED: RunResumed,
    EventKind.SESSION_STARTED: SessionStarted,
    EventKind.SIGNAL: Signal,
    EventKind.STRAY_STOPPED: StrayStopped,
    EventKind.COMMAND: Command,
    EventKind.VERDICT_LOOK: VerdictLook,
    EventKind.SESSION_ADDED: SessionAdded,
    EventKind.ENGINE_ERROR: EngineErrorEvent,
    EventKind.RUN_FINISHED: RunFinished,
    EventKind.WINDOW_REBOOT: WindowReboot,
    EventKind.WINDOW_STARTED: WindowStarted,
    EventKind.GPU_MEMORY: GpuMemory,
    EventKind.SERVER_STARTED: ServerStarted,
    EventKind.WINDOW_QUEUED: WindowQueued,
    EventKind.WINDOW_PLACED: WindowPlaced,
    EventKind.BOOT_FACT: BootFact,
    EventKind.WINDOW_READY: WindowReady,
    EventKind.WINDOW_REJECTED: WindowRejected,
    EventKind.PARITY: ParityEvent,
    EventKind.QUALITY_STARTED: QualityStarted,
    EventKind.VERDICT: VerdictEvent,
    EventKind.QUALITY_DONE: QualityDone,
    EventKind.WINDOW_FINISHED: WindowFinished,
    EventKind.SERVER_STOPPING: ServerStopping,
    EventKind.SERVER_STOPPED: ServerStopped,
    EventKind.RERUN_WAITING: RerunWaiting,
    EventKind.SHAPE_STARTED: ShapeStarted,
    EventKind.SHAPE_RESUMED: ShapeResumed,
    EventKind.WARM_DONE: WarmDone,
    EventKind.PAUSED: Paused,
    EventKind.REP_DONE: RepDone,
    EventKind.LEAK_SUSPECTED: LeakSuspected,
    EventKind.ROW_VOID: RowVoid,
    EventKind.RERUN_ABORTED: RerunAborted,
    EventKind.ROW_DONE: RowDone,
    EventKind.CAPACITY: Capacity,
}
OPEN = frozenset({EventKind.SERVER_STARTED, EventKind.STRAY_STOPPED})  # + the runtime's identity
ENVELOPE = frozenset({"seq", "ts", "kind"})  # what the journal adds to every event
