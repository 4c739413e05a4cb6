"""The run's journal: one JSON event a line, fsync'd, the single source of truth.

Every view of a run (the headless printer, the console, ``status``, resume) is ``fold(events)``.
A torn last line, as a power loss leaves it, is dropped on read and cut off before the next append.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

Event = dict[str, Any]


def _parse(lines: Iterable[bytes]) -> Iterator[Event]:
    for raw in lines:
        if not raw.endswith(b"\n"):
            return  # torn tail: the write never completed
        try:
            yield json.loads(raw)
        except ValueError:
            return


def read_events(path: str | Path) -> list[Event]:
    try:
        with open(path, "rb") as f:
            return list(_parse(f))
    except FileNotFoundError:
        return []


class Journal:
    """Append-only writer. Thread-safe: the runner and the control socket both write."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        good = self._good_length()
        self._f = open(self.path, "ab")  # noqa: SIM115 - held for the run's lifetime
        if self._f.tell() != good:
            self._f.truncate(good)  # drop a torn tail so the next event starts on its own line
        events = read_events(self.path)
        self.seq = events[-1]["seq"] if events else 0

    def _good_length(self) -> int:
        length = 0
        try:
            with open(self.path, "rb") as f:
                for raw in f:
                    if not raw.endswith(b"\n"):
                        break
                    try:
                        json.loads(raw)
                    except ValueError:
                        break
                    length += len(raw)
        except FileNotFoundError:
            pass
        return length

    def append(self, kind: str, **data: Any) -> Event:
        with self._lock:
            self.seq += 1
            event = {"seq": self.seq, "ts": round(time.time(), 3), "kind": kind, **data}
            self._f.write(json.dumps(event, separators=(",", ":"), default=str).encode() + b"\n")
            self._f.flush()
            os.fsync(self._f.fileno())
            return event

    def close(self) -> None:
        with self._lock:
            self._f.close()
