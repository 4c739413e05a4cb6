"""What a phase (measurement, quality) and an operator command are given: never the runner itself.

``RunContext`` is the run as a phase sees it (its campaign, its folded state, the operator's
controls, an emit function); ``WindowContext`` is the window a phase runs in. Below the run layer
and quality alike: the quality phase receives its context without importing engine.run.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from engine import gpu
from engine.campaign.sources import Item
from engine.campaign.spec import Campaign, ServerConfig
from engine.method.stats import LeakPolicy
from engine.record.send import Emit
from engine.record.state import RunState
from engine.runtime.base import Server
from engine.servers.adapter import ServerAdapter
from engine.servers.logs import BootFacts
from engine.words import CONTROL, WindowStatus, is_control


@dataclass
class Controls:
    """Operator requests, set from signal handlers or the control socket, read between steps."""

    abort: threading.Event = field(default_factory=threading.Event)
    advance: threading.Event = field(default_factory=threading.Event)
    rewarm: threading.Event = field(default_factory=threading.Event)
    paused: threading.Event = field(default_factory=threading.Event)
    reruns: list[str] = field(default_factory=list)  # row keys queued by the operator
    # How often each key was taken off ``reruns`` to be measured: whoever boots a window for a
    # rerun tells from it whether the window measured it (a copy queued since then stays queued).
    reruns_taken: Counter[str] = field(default_factory=Counter)
    signals: list[str] = field(default_factory=list)  # caught, not yet in the journal
    window_timeout: float = 0.0  # timeouts.window of the window in flight
    deadline: float | None = None  # time.monotonic() at which that window runs out

    def take_rerun(self, key: str) -> None:
        """``key`` taken off the queue (its first copy) to be measured now."""
        self.reruns.remove(key)
        self.reruns_taken[key] += 1

    def start_window(self, timeout: float) -> None:
        self.window_timeout, self.deadline = timeout, time.monotonic() + timeout

    def timed_out(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def stopping(self) -> bool:
        return self.abort.is_set() or self.advance.is_set() or self.timed_out()

    def cut(self) -> bool:
        """A pass in flight is cut short by an abort or the window timeout; an advance lets it end."""
        return self.abort.is_set() or self.timed_out()

    def ending(self) -> tuple[WindowStatus, str]:
        """How the window in flight ends now: its status and why."""
        if self.abort.is_set():
            return WindowStatus.ABORTED, "operator abort"
        if self.timed_out():
            return WindowStatus.FAILED, f"window timeout after {self.window_timeout:g} s"
        if self.advance.is_set():
            return WindowStatus.ADVANCED, "operator advanced the window"
        return WindowStatus.DONE, ""

    def wait_if_paused(self) -> None:
        """Hold while paused; an abort or an advance ends the hold (the window ends at once)."""
        held = time.monotonic()
        while self.paused.is_set() and not (self.abort.is_set() or self.advance.is_set()):
            self.abort.wait(0.2)
        if self.deadline is not None:  # a pause is the operator's time, not the window's
            self.deadline += time.monotonic() - held


@dataclass
class RunContext:
    """The run as its phases see it. ``state`` is the live fold: read it, change it only by emit."""

    campaign: Campaign
    run_dir: Path
    run_id: str
    state: RunState
    controls: Controls
    emit: Emit
    items: dict[str, list[Item]]  # frozen at the run's start: a resume sends the same ones
    leak_policy: LeakPolicy
    control_facts: dict[str, BootFacts] = field(default_factory=dict)  # session -> its control's
    # The testbed's ${...} values the run resolved its files' paths with (engine.json's): a
    # quality file's path, read mid-run, resolves as the run's start read it.
    variables: dict[str, str] = field(default_factory=dict)

    def file_variables(self) -> dict[str, str]:
        """What a ${...} in a data file's path stands for: the environment, then the testbed's
        (as engine.campaign.launch.campaign_items resolves a class's file)."""
        return dict(os.environ) | self.variables

    def axis(self, window: str) -> str:
        return CONTROL if is_control(window) else self.campaign.window(window).axis


@dataclass
class WindowContext:
    """What a measurement phase needs about the window it runs in."""

    session: str
    window: str
    dir: Path
    server: Server
    adapter: ServerAdapter
    config: ServerConfig
    facts: BootFacts
    # The GPUs its server owns, sampled around every pass; none (and why) without NVML.
    gpus: gpu.Gpus = field(default_factory=lambda: gpu.absent(gpu.NO_GPU))


Phase = Callable[[RunContext, WindowContext], None]
