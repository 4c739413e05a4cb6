"""The send, typed: each event kind's fields are its TypedDict's (engine.record.events), so strict
mypy checks an event where it is sent, field by field. ``Emit`` is what a phase, an operator
command and the runner send through (``RunContext.emit``, ``Runner.emit``); the journal's writer
checks every event again at run time (``eventcheck.check``: the keys of a spread ``dict[str, Any]``
are beyond mypy) and the journal's readers check the fields' types (``eventcheck.mistyped``).
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, Unpack, overload

from engine.record import events as ev
from engine.record.events import EventKind, Shape
from engine.record.journal import Event


class RowWords(Shape):
    """A finished row's words, as mypy sees a row_done sent: the fields every row_done has. Its
    figures (engine.record.figures) are spread in from the statistics' dict; the run-time check
    (``events.RowDone``, built from the figures' declaration) holds those."""

    axis: str
    status: str
    attempts: int
    reason: str
    source: str


class Emit(Protocol):
    """Append one event to the journal (and fold it into the state); returns the event.

    One overload per kind: ``data`` is its TypedDict's fields (tests/unit/engine/record/test_send.py
    holds them to ``events.FIELDS``); anything else raises ``MalformedEvent`` before the journal is
    touched.
    """

    @overload
    def __call__(self, kind: Literal[EventKind.RUN_STARTED], /,
                 **data: Unpack[ev.RunStarted]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.RUN_RESUMED], /,
                 **data: Unpack[ev.RunResumed]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.SESSION_STARTED], /,
                 **data: Unpack[ev.SessionStarted]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.SIGNAL], /,
                 **data: Unpack[ev.Signal]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.STRAY_STOPPED], /,
                 **data: Unpack[ev.StrayStopped]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.COMMAND], /,
                 **data: Unpack[ev.Command]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.VERDICT_LOOK], /,
                 **data: Unpack[ev.VerdictLook]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.SESSION_ADDED], /,
                 **data: Unpack[ev.SessionAdded]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.ENGINE_ERROR], /,
                 **data: Unpack[ev.EngineErrorEvent]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.RUN_FINISHED], /,
                 **data: Unpack[ev.RunFinished]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.WINDOW_REBOOT], /,
                 **data: Unpack[ev.WindowReboot]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.WINDOW_STARTED], /,
                 **data: Unpack[ev.WindowStarted]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.GPU_MEMORY], /,
                 **data: Unpack[ev.GpuMemory]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.SERVER_STARTED], /,
                 **data: Unpack[ev.ServerStarted]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.WINDOW_QUEUED], /,
                 **data: Unpack[ev.WindowQueued]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.WINDOW_PLACED], /,
                 **data: Unpack[ev.WindowPlaced]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.BOOT_FACT], /,
                 **data: Unpack[ev.BootFact]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.WINDOW_READY], /,
                 **data: Unpack[ev.WindowReady]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.WINDOW_REJECTED], /,
                 **data: Unpack[ev.WindowRejected]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.PARITY], /,
                 **data: Unpack[ev.ParityEvent]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.QUALITY_STARTED], /,
                 **data: Unpack[ev.QualityStarted]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.VERDICT], /,
                 **data: Unpack[ev.VerdictEvent]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.QUALITY_DONE], /,
                 **data: Unpack[ev.QualityDone]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.WINDOW_FINISHED], /,
                 **data: Unpack[ev.WindowFinished]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.SERVER_STOPPING], /,
                 **data: Unpack[ev.ServerStopping]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.SERVER_STOPPED], /,
                 **data: Unpack[ev.ServerStopped]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.RERUN_WAITING], /,
                 **data: Unpack[ev.RerunWaiting]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.SHAPE_STARTED], /,
                 **data: Unpack[ev.ShapeStarted]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.SHAPE_RESUMED], /,
                 **data: Unpack[ev.ShapeResumed]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.WARM_DONE], /,
                 **data: Unpack[ev.WarmDone]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.PAUSED], /,
                 **data: Unpack[ev.Paused]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.REP_DONE], /,
                 **data: Unpack[ev.RepDone]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.LEAK_SUSPECTED], /,
                 **data: Unpack[ev.LeakSuspected]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.ROW_VOID], /,
                 **data: Unpack[ev.RowVoid]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.RERUN_ABORTED], /,
                 **data: Unpack[ev.RerunAborted]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.ROW_DONE], /,
                 **data: Unpack[RowWords]) -> Event: ...
    @overload
    def __call__(self, kind: Literal[EventKind.CAPACITY], /,
                 **data: Unpack[ev.Capacity]) -> Event: ...

    def __call__(self, kind: EventKind, /, **data: Any) -> Event: ...
