"""The journal's one writer: append-only, fsync'd, thread-safe; it refuses a damaged journal.

Reading and parsing live in ``engine.record.journal``; the refusal needs the fold's sequence checks
(``engine.record.state``), hence a module of its own above both. The writer keeps the fold of what
the journal holds (:attr:`JournalWriter.state`, each event folded as it reads back from its line) and its
snapshot (``engine.record.snapshot``) every ``snapshot.EVERY`` events and when it closes.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import zlib
from pathlib import Path
from typing import Any

from engine.record import snapshot
from engine.record.fold import apply
from engine.record.journal import Damage, Event, damage_report
from engine.record.results import open_append, scrub_data, scrub_for


class JournalDamaged(ValueError):
    """The journal has lines that are not events: appending after them would bury them."""

    def __init__(self, path: Path, damage: list[Damage]) -> None:
        self.path, self.damage = path, damage
        super().__init__(f"damaged journal:\n{damage_report(path, damage)}")


class JournalClosed(Exception):
    """An append after the run closed its journal (a command racing the run's end)."""


class JournalWriter:
    """Append-only writer. Thread-safe: the runner and the control socket both write.

    It cuts a torn last line and nothing else; a damaged journal is refused, never trimmed.
    """

    def __init__(self, path: str | Path, snapshot_every: int = snapshot.EVERY) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        folded = snapshot.read_folded(self.path, keep=False, vouch=True)  # its own snapshots follow
        if folded.state.damage:  # lines that are not events, and seqs out of sequence
            raise JournalDamaged(self.path, folded.state.damage)
        self.state = folded.state
        self._f = open_append(self.path)
        # The run directory's filter (results.guard), as every other writer under it applies.
        self._scrub = scrub_for(self.path) or None  # none, or one with no secret: nothing to do
        if folded.read.torn:
            self._f.truncate(folded.read.length)  # so the next event starts on its own line
        self.seq = self.state.last_seq
        # The lines folded here rather than read from a snapshot: the next snapshot covers them.
        self._every = snapshot_every
        self._since = folded.read.lines - (folded.prefix.lines if folded.prefix else 0)
        self._length, self._lines, self._last = folded.read.length, folded.read.lines, folded.last
        # The CRC-32 of every byte written, kept as lines are appended: the snapshot vouches for
        # them (the snapshot's, then the lines after it, as they were read).
        assert folded.read.crc is not None  # read_folded vouches for them
        self._crc = folded.read.crc
        self._finite = folded.read.finite  # every line this writer appends is finite (allow_nan)

    def append(self, kind: str, **data: Any) -> Event:
        with self._lock:
            if self._f.closed:
                raise JournalClosed(f"{self.path} is closed: the run has ended")
            if self._scrub:  # a record is filtered before it is serialised
                data = scrub_data(data, self._scrub)
            event = {"seq": self.seq + 1, "ts": round(time.time(), 3), "kind": kind, **data}
            # Strict JSON: Infinity and NaN are refused before the seq is taken (no gap follows).
            line = json.dumps(event, separators=(",", ":"), default=str, allow_nan=False).encode() + b"\n"
            self.seq += 1
            self._f.write(line)
            self._f.flush()
            os.fsync(self._f.fileno())
            self._length, self._lines, self._last = self._length + len(line), self._lines + 1, line
            self._crc = zlib.crc32(line, self._crc)
            # Folded as a reader of the file will fold it (a Path as its text, a tuple as a list).
            apply(self.state, json.loads(line), self._lines)
            self._since += 1
            if self._since >= self._every:
                self._snapshot()
            return event

    def _snapshot(self) -> None:
        self._since = 0
        # A cache of the fold: one not written costs readers time, never a figure.
        with contextlib.suppress(OSError):
            snapshot.write(self.path, self.state, self._length, self._lines, self._last, self._crc,
                           self._finite)

    def close(self) -> None:
        with self._lock:
            if self._since and not self._f.closed:
                self._snapshot()
            # Only an append that already raised (disk full) leaves bytes to flush.
            with contextlib.suppress(OSError):
                self._f.close()
