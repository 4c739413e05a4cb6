"""The journal's one writer: append-only, fsync'd, thread-safe; it refuses a damaged journal.

Reading and parsing live in ``engine.record.journal``; the refusal needs the fold's sequence checks
(``engine.record.state``), hence a module of its own above both.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from engine.record.journal import Damage, Event, damage_report, read_journal
from engine.record.results import open_append
from engine.record.state import fold_read


class JournalDamaged(ValueError):
    """The journal has lines that are not events: appending after them would bury them."""

    def __init__(self, path: Path, damage: list[Damage]) -> None:
        self.path, self.damage = path, damage
        super().__init__(f"damaged journal:\n{damage_report(path, damage)}")


class Journal:
    """Append-only writer. Thread-safe: the runner and the control socket both write.

    It cuts a torn last line and nothing else; a damaged journal is refused, never trimmed.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        read = read_journal(self.path)
        damage = fold_read(read).damage  # lines that are not events, and seqs out of sequence
        if damage:
            raise JournalDamaged(self.path, damage)
        self._f = open_append(self.path)
        if read.torn:
            self._f.truncate(read.length)  # so the next event starts on its own line
        self.seq = max((e["seq"] for _, e in read.events), default=0)

    def append(self, kind: str, **data: Any) -> Event:
        with self._lock:
            self.seq += 1
            event = {"seq": self.seq, "ts": round(time.time(), 3), "kind": kind, **data}
            self._f.write(json.dumps(event, separators=(",", ":"), default=str).encode() + b"\n")
            self._f.flush()
            os.fsync(self._f.fileno())
            return event

    def close(self) -> None:
        # Only an append that already raised (disk full) leaves bytes to flush.
        with self._lock, contextlib.suppress(OSError):
            self._f.close()
