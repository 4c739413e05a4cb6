"""The quality phase: ``Quality()(run, ctx)`` runs every quality and ruler check of a window.

Journal: ``quality_started`` when it begins, a ``verdict`` event per check, ``quality_done``
(status done or stopped, seconds, requests, seconds per stage) at its end; ``verdicts.csv`` is
rewritten after every window.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx

from engine import files
from engine.context import RunContext, WindowContext
from engine.errors import WindowFailed
from engine.quality.control import ControlChecks
from engine.quality.effect import settle
from engine.quality.knobs import KNOB_PROMPTS, across_stacks, knob_check
from engine.quality.probe import Probe, Stopped
from engine.quality.reference import ReferenceStore
from engine.quality.tools import tool_probe, tool_verdict
from engine.quality.verdicts import verdict_row, write_verdicts
from engine.quality.window import WindowChecks
from engine.record import results
from engine.record.events import EventKind
from engine.servers.bounded import server_client
from engine.words import CONTROL, Check, QualityStatus


class Quality:
    """Callable phase. ``baseline_dir`` (another run directory) adds a baseline to ``drift.json``."""

    def __init__(self, baseline_dir: Path | None = None) -> None:
        self.baseline_dir = baseline_dir
        self.refs = ReferenceStore()  # session -> its control's reference

    def __call__(self, run: RunContext, ctx: WindowContext) -> None:
        if not run.campaign.quality.enabled:
            return
        run.emit(EventKind.QUALITY_STARTED, session=ctx.session, window=ctx.window)
        started = time.monotonic()
        status = QualityStatus.DONE
        with server_client(ctx.server.base_url, run.campaign.timeouts.request) as client:
            probe = Probe(ctx.adapter, client, run.controls.stopping)
            checks = WindowRun(self.refs, self.baseline_dir, run, ctx, probe)
            with results.after(lambda: write_verdicts(run.run_dir, self.rows(run))):
                try:
                    checks.all()
                except Stopped:
                    status = QualityStatus.STOPPED
                except httpx.TransportError as e:
                    if not ctx.server.alive():
                        raise WindowFailed(f"server died during the quality checks ({e})") from e
                    raise
        run.emit(EventKind.QUALITY_DONE, session=ctx.session, window=ctx.window, status=status,
                    seconds=round(time.monotonic() - started, 2), requests=probe.requests,
                    stages=checks.stages)

    def settle(self, run: RunContext) -> None:
        """At the run's end (and each look's): every window's "no observable effect" verdict on
        the whole run's judgement, journaled again where it changed, and verdicts.csv with it."""
        changed = settle(run.state, run.campaign.verdict.rule(), run.run_dir)
        for c in changed:
            results.write_json(c["path"], c["record"])
            run.emit(EventKind.VERDICT, session=c["session"], window=c["window"], check=Check.NO_EFFECT,
                     verdict=c["verdict"], summary=c["summary"], file=c["file"], figures={})
        if changed:
            write_verdicts(run.run_dir, self.rows(run))

    @staticmethod
    def rows(run: RunContext) -> list[dict[str, Any]]:
        out = []
        for key in run.state.order:
            ws = run.state.windows[key]
            if not ws.verdicts:
                continue
            lossy = ws.window != CONTROL and run.campaign.window(ws.window).lossy
            out.append(verdict_row(ws.session, ws.window, ws.axis, lossy, ws.verdicts))
        return out


class WindowRun(ControlChecks, WindowChecks):
    """The checks of one window, in order: greedy, knobs, reference or comparison, tools."""

    def all(self) -> None:
        mine = self.guarded(Check.GREEDY, lambda: self.timed("greedy", self.greedy_outputs))
        if self.q.knobs_check and self.knobs:
            self.guarded(Check.KNOBS, lambda: self.timed("knobs", lambda: self.knobs_check(mine or [])))
        if mine is None:
            return
        for g in mine:
            g.pop("reply")  # kept for the knob check; receipts hold its parts
        if self.is_control and self.session_reference() is None:
            self.guarded(Check.REFERENCE, lambda: self.control(mine))
        else:  # a window; or the control booted again (a rerun) against its first boot's reference
            self.window(mine)
        if self.q.tool_probe is not None:
            self.guarded(Check.TOOL_PROBE, lambda: self.timed("tools", self.tools))

    def greedy_outputs(self) -> list[dict[str, Any]]:
        return self.probe.greedy(self.c.greedy_prompts(self.run.file_variables()), self.knobs,
                                 self.q.greedy.max_tokens, self.seed)

    def knobs_check(self, greedy: list[dict[str, Any]]) -> None:
        """The ruler check; its with-every-knob side is the greedy replies (the same requests)."""
        prompts = self.c.greedy_prompts(self.run.file_variables())[:KNOB_PROMPTS]
        with_all = [g["reply"] for g in greedy[:KNOB_PROMPTS] if g["reply"] is not None]
        report = knob_check(self.probe, prompts, self.knobs, self.q.greedy.max_tokens, self.seed,
                            with_all)
        stack = None if self.is_control else self.c.window(self.ctx.window).server
        if stack is not None:  # the same knobs on another stack: name one that acts on one only
            path = self.run.run_dir / "windows" / f"{self.ctx.session}-{CONTROL}" / "knobs.json"
            control = json.loads(files.read_text(path)) if path.exists() else None
            report["stacks"] = across_stacks(control, report, (stack.adapter, self.c.server))
        self.write("knobs.json", report)
        if report["suspects"]:
            why = "; ".join(f"{n}: {', '.join(report['knobs'][n]['reasons'])}"
                            for n in report["suspects"])
            summary = f"RULER SUSPECT: {', '.join(report['suspects'])} inert ({why})"
        else:
            summary = f"{len(report['knobs'])}/{len(report['knobs'])} knobs act"
        if report.get("stacks", {}).get("one_sided"):
            summary += f"; across stacks: {report['stacks']['said']}"
        self.verdict(Check.KNOBS, report["verdict"], summary, "knobs.json",
                     suspects=report["suspects"], knobs=list(report["knobs"]))

    def tools(self) -> None:
        tp = self.q.tool_probe
        assert tp is not None
        report = tool_probe(self.probe, tp.n, tp.max_tokens, self.seed, self.knobs, tp.tool_choice)
        self.write("tools.json", report)
        verdict, summary = tool_verdict(report)
        self.verdict(Check.TOOL_PROBE, verdict, summary, "tools.json", ok=report["ok"], n=report["n"])
