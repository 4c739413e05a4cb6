"""What every check of one window shares: its context, receipts, verdict events, timing, guards."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from engine.campaign.spec import Campaign
from engine.context import RunContext, WindowContext
from engine.quality.probe import Probe
from engine.quality.reference import Reference, ReferenceStore
from engine.record import results
from engine.record.events import EventKind
from engine.record.state import earlier_sessions
from engine.servers.client import Unsupported
from engine.words import CONTROL, Check, Verdict


class Checks:
    """One window's checks; each writes its receipt and journals its verdict."""

    def __init__(self, refs: ReferenceStore, baseline_dir: Path | None, run: RunContext,
                 ctx: WindowContext, probe: Probe) -> None:
        self.refs, self.baseline_dir = refs, baseline_dir
        self.run, self.ctx, self.probe = run, ctx, probe
        self.c: Campaign = run.campaign
        self.q = self.c.quality
        self.seed = self.c.quality_seed()
        self.knobs = self.c.knobs_for(ctx.window)
        self.top_k = max(self.q.teacher_forced.top_k, self.q.kl.top_k)
        self.is_control = ctx.window == CONTROL
        self.lossy = not self.is_control and self.c.window(ctx.window).lossy
        self.stages: dict[str, float] = {}  # seconds per stage, for the quality_done event

    def verdict(self, check: Check, verdict: Verdict, summary: str, file: str | None,
                **figures: Any) -> None:
        rel = str((self.ctx.dir / file).relative_to(self.run.run_dir)) if file else None
        self.run.emit(EventKind.VERDICT, session=self.ctx.session, window=self.ctx.window, check=check,
                         verdict=verdict, summary=summary, file=rel, figures=figures)

    def write(self, name: str, data: dict[str, Any]) -> None:
        results.write_json(self.ctx.dir / name, {"session": self.ctx.session,
                                                 "window": self.ctx.window, **data})

    def timed(self, stage: str, fn: Callable[[], Any]) -> Any:
        t0 = time.monotonic()
        try:
            return fn()
        finally:
            self.stages[stage] = round(self.stages.get(stage, 0) + time.monotonic() - t0, 3)

    def guarded(self, check: Check, fn: Callable[[], Any]) -> Any:
        """A check the server cannot answer is a verdict, not a crash of the campaign.

        Whatever a live server sends (an HTTP error, a dropped connection, an answer that does not
        parse: BadServerData is a ValueError) is this check's "error"; a dead server fails the window.
        """
        try:
            return fn()
        except Unsupported as e:
            self.verdict(check, Verdict.UNSUPPORTED, str(e), None)
        except (httpx.HTTPError, ValueError, KeyError) as e:
            if isinstance(e, httpx.HTTPStatusError) or self.ctx.server.alive():
                self.verdict(check, Verdict.ERROR, f"{type(e).__name__}: {e}"[:300], None)
            else:
                raise
        return None

    def session_reference(self) -> Reference | None:
        return self.refs.get(self.run.run_dir, self.ctx.session)

    def earlier_sessions(self) -> list[str]:
        """The sessions this one's control is compared with, nearest first (on its own place when
        sessions run on places: see engine.record.state.earlier_sessions)."""
        return earlier_sessions(list(self.c.sessions), self.run.state.session_places, self.ctx.session)

    def previous_reference(self) -> Reference | None:
        """The nearest earlier session's control reference, if any."""
        for s in self.earlier_sessions():
            ref = self.refs.get(self.run.run_dir, s)
            if ref is not None:
                return ref
        return None
