"""Following a run directory from a worker thread: the journal and one window's log, in batches.

No Textual here (as toolong keeps ``log_file.py`` free of it): a thread reads and hands over
:class:`Batch` objects through a callback; the App applies them. A batch is handed over only after
the App acknowledged the previous one, so a slow screen makes batches bigger, never a queue longer:
a server log growing at 10,000 lines a second costs the UI one bounded batch per tick.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine import control, files
from engine.errors import BadInput
from engine.record import snapshot
from engine.record.journal import Damage, Event, Reader
from engine.record.liveness import read_pid
from engine.record.state import RunState
from tui.core.logview import MARK, ServingView

CHUNK = 64 * 1024
JOURNAL = "journal.jsonl"


class Tail:
    """Complete lines appended to one file, read 64 KiB at a time.

    A line without its newline is read again next time rather than kept: the engine, resuming
    after a kill, cuts a torn last line and writes a new one in its place, and the new bytes must
    not be glued to the torn ones. A file cut shorter than what was handed out, or replaced,
    starts over and sets :attr:`reset`.
    """

    def __init__(self, path: Path, start_from_end: int | None = None) -> None:
        self.path = path
        self._start_from_end = start_from_end
        self._f: Any = None
        self._ino: int | None = None
        self.consumed = 0  # end of the last complete line handed out
        self.skipped = 0  # bytes at the start never read (a huge log: its end only)
        self._start = 0  # where the first open starts reading (seek)
        self.reset = False
        self.at_eof = False
        self._skip_fragment = False

    def _open(self) -> bool:
        try:
            f = files.open_regular(self.path)  # kept open while following
        except (OSError, files.Unreadable):  # a FIFO or a device in its place: never waited on
            return False
        st = os.fstat(f.fileno())
        self._f, self._ino, self.consumed, self._start = f, st.st_ino, self._start, 0
        if self._start_from_end is not None and st.st_size > self._start_from_end:
            # A huge log of a finished window: only its end is worth reading.
            self.consumed = self.skipped = st.st_size - self._start_from_end
            self._skip_fragment = True
        return True

    def seek(self, offset: int) -> None:
        """Hand out the lines after byte ``offset`` (the end of a complete line) next."""
        if self._f is None:
            self._start = offset
        else:
            self.consumed = offset

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None

    def _check_replaced(self) -> None:
        try:
            st = os.stat(self.path)
        except OSError:
            return
        if st.st_ino != self._ino:
            self.close()
            self.reset = True
            self._start_from_end = None  # a new file: read it all
            self._open()
            self.skipped = 0
        elif st.st_size < self.consumed:
            self.consumed, self.skipped, self.reset = 0, 0, True

    def read(self, budget: int) -> list[bytes]:
        """Complete lines (without newline) from up to ``budget`` bytes; sets :attr:`at_eof`."""
        self.at_eof = False
        if self._f is None and not self._open():
            self.at_eof = True
            return []
        self._check_replaced()
        lines: list[bytes] = []
        fragment = b""
        self._f.seek(self.consumed)
        read = 0
        while read < budget:
            data = self._f.read(CHUNK)
            if not data:
                self.at_eof = True
                break
            read += len(data)
            parts = (fragment + data).split(b"\n")
            fragment = parts.pop()
            if self._skip_fragment and parts:
                self.consumed += len(parts[0]) + 1
                parts = parts[1:]
                self._skip_fragment = False
            self.consumed += sum(len(x) + 1 for x in parts)
            lines.extend(parts)
        return lines


@dataclass(frozen=True)
class LogView:
    """Where the serving view of the watched log stands."""

    ready: bool  # past the ready line: serving lines are folded
    folded: int  # lines folded so far
    pending: int  # folded since the last line shown (their count line comes with the next)


@dataclass
class Batch:
    """What changed since the last batch."""

    events: list[Event] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)  # each event's line in the journal
    damage: list[Damage] = field(default_factory=list)  # journal lines that are not events
    log: list[str] = field(default_factory=list)
    log_gen: int = 0  # which watch_log() call these lines belong to
    log_clear: bool = False  # a new log, or the file started over: clear the view first
    log_dropped: int = 0  # lines skipped before these (the screen fell behind a flood)
    log_view: LogView | None = None  # the serving view's counts after these lines (None: raw)
    # The state these events fold onto, in place of the console's: the journal's snapshot's (or
    # an empty one) when following starts and when the journal was replaced.
    base: RunState | None = None
    caught_up: bool = False  # both files were read to their end when this batch was cut

    def empty(self) -> bool:
        return not (self.events or self.damage or self.log or self.log_clear or self.base is not None
                    or self.log_dropped)


class Follower:
    """Reads the journal and the watched log; hands over batches at most every ``interval`` s.

    The journal is folded first, from its snapshot when one matches it (the first batch carries
    that fold as its ``base``) and read from the end of what it covered, unless ``from_snapshot``
    is off: then every event is handed over, from the first."""

    def __init__(self, run_dir: Path, post: Callable[[Batch], Any], *, interval: float = 0.05,
                 max_events: int = 5000, max_log_lines: int = 5000,
                 log_tail_bytes: int = 512 * 1024, budget: int = 4 * CHUNK,
                 from_snapshot: bool = True) -> None:
        self.run_dir = run_dir
        self.post = post
        self._unkept: snapshot.Folded | None = None  # a fold made here, its snapshot not kept yet
        self.interval, self.max_events, self.max_log_lines = interval, max_events, max_log_lines
        self.log_tail_bytes, self.budget = log_tail_bytes, budget
        self._journal = Tail(run_dir / JOURNAL)
        self._reader = Reader(run_dir=run_dir)
        self.from_snapshot = from_snapshot
        self._log: Tail | None = None
        self._lock = threading.Lock()
        self._want: tuple[int, str | None, ServingView | None] = (0, None, None)
        self._view: ServingView | None = None
        self._told_skip = False
        self._gen = 0
        self._acked = threading.Event()
        self._acked.set()
        self._lines: deque[str] = deque(maxlen=max_log_lines)  # log lines not handed over yet
        self._preloaded: tuple[snapshot.Folded | None] | None = None  # preload()'s, not used yet

    def watch_log(self, rel: str | None, view: ServingView | None = None) -> int:
        """Follow another log (relative to the run directory) from its start, raw or through a
        fresh serving ``view``; returns its generation."""
        with self._lock:
            self._want = (self._want[0] + 1, rel, view)
            return self._want[0]

    def ack(self) -> None:
        """The App applied the last batch: the next one may be handed over."""
        self._acked.set()

    def _switch_log(self, pending: Batch) -> None:
        with self._lock:
            gen, rel, view = self._want
        if gen == self._gen:
            return
        if self._log:
            self._log.close()
        self._gen, self._view, self._told_skip = gen, view, False
        self._log = Tail(self.run_dir / rel, self.log_tail_bytes) if rel else None
        self._lines.clear()
        pending.log_gen, pending.log_clear = gen, True

    def _start_journal(self, pending: Batch) -> bool:
        """Read the journal from its first line, or from the end of what its fold covers (its
        snapshot and the lines after it); True when it was folded (the lines already read are then
        not the next ones)."""
        if self._preloaded is not None:
            (folded,), self._preloaded = self._preloaded, None
        else:
            folded = self._fold() if self.from_snapshot else None
        pending.events, pending.lines, pending.damage = [], [], []
        pending.base = folded.state if folded else RunState()
        self._unkept = folded
        self._reader = Reader(folded.read.lines if folded else 0, self.run_dir)
        self._journal.seek(folded.read.length if folded else 0)
        return folded is not None

    def preload(self) -> RunState | None:
        """Fold the journal now, before :meth:`run` (which starts after what this folded and hands
        its state over as the first batch's base): the state, or None."""
        if not self.from_snapshot:
            return None
        self._preloaded = (self._fold(),)
        folded = self._preloaded[0]
        return folded.state if folded else None

    def _fold(self) -> snapshot.Folded | None:
        """The journal's state from its snapshot and the lines after it, or, without a snapshot
        that matches (an older ruler's run, a snapshot refused), from every line, at once, with
        the snapshot kept for the next reader (engine.record.snapshot.read_folded): never a
        day-long journal's events handed over a batch at a time to be folded by the screen.
        Frozen out of the collector's sight as it is read: a day-long fold is a million objects
        that live as long as the console, none in a cycle, and collections scanning them took
        0.2-0.3 s before the first screen. What else lives then (Textual's startup, a few hundred
        garbage objects among it) is frozen with it, once. None for a journal that cannot be
        read as a file (a FIFO in its place): the follower's reading says nothing of it either."""
        was = gc.isenabled()
        gc.disable()  # no collection between the fold and the freeze: each would scan it all
        try:
            # Its snapshot is kept after the first whole screen (run, _keep), not before it.
            folded = snapshot.read_folded(self.run_dir / JOURNAL, keep=False)
            gc.freeze()
        except BadInput:
            return None
        finally:
            if was:
                gc.enable()
        return folded

    def _read(self, pending: Batch) -> bool:
        """One round of reading; True when something new arrived."""
        got = False
        if len(pending.events) < self.max_events:
            lines = self._journal.read(self.budget)
            if self._journal.reset:
                self._journal.reset = False
                if self._start_journal(pending):
                    lines = []
            if lines:
                seen = len(self._reader.damage)
                for line, e in self._reader.feed(lines):
                    pending.lines.append(line)
                    pending.events.append(e)
                pending.damage += self._reader.damage[seen:]
                got = True
        self._switch_log(pending)
        if self._log is not None:
            lines = self._log.read(self.budget)
            if self._log.reset:
                self._log.reset = False
                self._lines.clear()
                pending.log_clear = True
                if self._view is not None:
                    self._view = ServingView(self._view.adapter)  # a new log: a new boot
            text = [b.decode("utf-8", "replace").rstrip("\r") for b in lines]
            if self._log.skipped and not self._told_skip:
                self._told_skip = True
                text.insert(0, f"{MARK}the first {self._log.skipped / 2**20:,.1f} MiB of this log "
                               "are not shown; the file has every line]")
                if self._view is not None:
                    self._view.start_unread()
            if self._view is not None and lines:
                text = self._view.feed(text)
            if text:
                # A bounded view of a flood: what does not fit is counted, and said, not shown.
                pending.log_dropped += max(0, len(self._lines) + len(text) - self.max_log_lines)
                self._lines.extend(text)
            got = got or bool(lines)
        pending.caught_up = self._journal.at_eof and (self._log is None or self._log.at_eof)
        return got

    def run(self, cancelled: Callable[[], bool]) -> None:
        pending = Batch()
        self._start_journal(pending)
        last_post = float("-inf")
        told_caught_up = attached = False
        try:
            while not cancelled():
                got = self._read(pending)
                now = time.monotonic()
                full = len(pending.events) >= self.max_events
                has = not pending.empty() or bool(self._lines)
                # The first time both files are read to their end is the console's first whole
                # screen ("attached"): handed over at once, not an interval after the batch before.
                due = now - last_post >= self.interval or full or (pending.caught_up and not attached)
                news = has or (pending.caught_up and not told_caught_up)
                if news and due and self._acked.is_set():
                    pending.log = list(self._lines)
                    view = self._view
                    pending.log_view = None if view is None else LogView(view.ready, view.folded,
                                                                         view.pending)
                    self._lines.clear()
                    self._acked.clear()
                    told_caught_up = pending.caught_up
                    attached = attached or told_caught_up
                    self.post(pending)
                    last_post = now
                    pending = Batch(log_gen=self._gen)
                elif not got:
                    if attached and now - last_post >= self.interval:
                        self._keep()
                    time.sleep(self.interval / 4)
                if not pending.caught_up:
                    told_caught_up = False
        finally:
            self._keep()
            self._journal.close()
            if self._log:
                self._log.close()

    def _keep(self) -> None:
        """The snapshot of a fold made here, for the next reader: once the console's first whole
        screen was handed over and the follower is idle an interval after it (written at once, it
        held that screen a tenth of a second back on a day-long run), else as the follower stops."""
        if self._unkept is not None:
            snapshot.keep_fold(self.run_dir / JOURNAL, self._unkept)
            self._unkept = None


def out_of_sight() -> None:
    """Once the console has read what it follows: what lives then lives as long as the console.

    Textual's startup objects and the folded journal, frozen out of the collector's sight: a full
    collection scans only what the flood leaves behind (unfrozen, those pauses reached 80 ms under
    a 10,000 lines/s log). Textual leaves cyclic garbage behind every frame (Strips that cache
    themselves, a table's row renders, each command's worker): 600 objects a second under a log
    flood, and RSS grew with them for as long as no full collection ran (64 -> 78 MiB in two
    minutes). The console then collects what came after the freeze every second, between two
    frames, which keeps it bounded and short (a second's garbage: 4-10 ms on two busy cores),
    where the collector's own came rarely, at any moment, with all of it.
    """
    gc.collect()
    gc.freeze()
    first, second, _ = gc.get_threshold()
    gc.set_threshold(first, second, 100)  # the collector's own: ten times rarer


# ------------------------------------------------------------------ is the engine there?


@dataclass(frozen=True)
class Link:
    connected: bool
    detail: str


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, it is just not ours
    return True


def engine_pid(run_dir: Path, fallback: int | None) -> int | None:
    pid = read_pid(run_dir)
    return fallback if pid is None else pid


def probe(run_dir: Path, pid_hint: int | None,
          send: Callable[..., dict[str, Any]] = control.send) -> Link:
    """Connected when the socket answers ``status``; otherwise say what is known about the pid."""
    pid = engine_pid(run_dir, pid_hint)
    try:
        reply = send(run_dir, "status", [], timeout=2.0)
    except (OSError, ValueError) as e:
        if pid_alive(pid):
            return Link(False, f"engine pid {pid} is alive but its socket does not answer ({e})")
        return Link(False, f"no engine answers ({'pid ' + str(pid) + ' gone' if pid else 'no pid'})")
    if reply.get("ok"):
        return Link(True, str(reply.get("reply", "")))
    return Link(True, str(reply.get("error", "")))
