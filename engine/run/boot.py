"""The boot watcher: tails a server's log from its first byte, extracts boot facts, gates readiness.

"Boot log or it did not happen": a window counts only when its server said so in the log and its
health probe answers ready while the process or container is alive.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx

from engine.record.results import open_append
from engine.runtime.base import BatchServer, Server
from engine.servers.bounded import server_client
from engine.servers.client import Readiness, ServerClient
from engine.servers.logs import BootFacts, Fact, FactValue, LogReader

TAIL_LINES = 200
# boot.log is kept whole up to the server's ready line. After it, a server can log every request
# (llama-server at -lv 4, which its boot facts need: 53-86 MB a window on a GPU), so the rest is
# bounded: the first AFTER_READY_BYTES whole; past them only the lines ruler reads (periodic facts,
# errors, the first MAX_LATE_WARNINGS warnings), and at the end the last TAIL_LINES left out.
AFTER_READY_BYTES = 1024 * 1024
MAX_LATE_WARNINGS = 200
# After the health probe says ready, how long the log pump may take to read up to the server's own
# ready line (a loaded machine lags the pump behind the server): the boot facts are frozen then.
LOG_CATCH_UP_S = 10.0


class LogPump(threading.Thread):
    """Copies the server's output to ``boot.log`` and feeds boot facts until frozen; after the
    ready line, boot.log is bounded (AFTER_READY_BYTES). A batch job's node writes its boot.log
    itself, whole: the pump only reads it (runtime slurm)."""

    def __init__(self, server: Server, adapter: LogReader, log_path: Path,
                 on_fact: Callable[[Fact], None], scrub: Callable[[str], str] = lambda s: s) -> None:
        super().__init__(daemon=True, name="log-pump")
        self.server, self.adapter, self.log_path = server, adapter, log_path
        self.on_fact, self.scrub = on_fact, scrub
        self.facts = BootFacts()
        self.added: set[str] = set()  # the keys of the facts the runtime added (add_facts)
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.lines_seen = 0
        self.ready_seen = threading.Event()  # the server's own ready line was read
        self._frozen = threading.Event()
        self._lock = threading.Lock()
        self.error: OSError | None = None  # boot.log or a boot fact could not be written (disk full)
        self.late_budget = AFTER_READY_BYTES  # bytes after ready still written whole
        self.late_warnings = 0
        self.left_out, self.left_out_bytes = 0, 0
        self.left_out_tail: deque[str] = deque(maxlen=TAIL_LINES)

    def _late(self, line: str) -> list[str]:
        """What boot.log gets for a line after ready (nothing when it is left out)."""
        note: list[str] = []
        if self.late_budget >= 0:
            self.late_budget -= len(line) + 1
            if self.late_budget >= 0:
                return [line]
            note = [f"[ruler] boot.log: the first {AFTER_READY_BYTES // 1024} KiB after ready are "
                    "above; from here only lines with periodic facts, errors and warnings are kept, "
                    f"and the last {TAIL_LINES} others at the end"]
        if self._read(line):
            return [*note, line]
        self.left_out += 1
        self.left_out_bytes += len(line) + 1
        self.left_out_tail.append(line)
        return note

    def _read(self, line: str) -> bool:
        """A line ruler reads after ready: one with periodic facts, an error, a warning (capped)."""
        if self.adapter.is_error(line) or self.adapter.periodic(line):
            return True
        if self.late_warnings < MAX_LATE_WARNINGS and self.adapter.is_warning(line):
            self.late_warnings += 1
            return True
        return False

    def run(self) -> None:
        out: IO[str] | None = None
        try:
            # A batch job's node writes boot.log itself; the pump only reads it.
            if not isinstance(self.server, BatchServer):
                out = open_append(self.log_path, text=True)
        except OSError as e:
            self.error = e
        # The server's output is drained to its end whatever happens to boot.log: a server whose
        # pipe is no longer read blocks mid-request.
        for line in self.server.lines():
            line = self.scrub(line)
            kept = self._late(line) if self.ready_seen.is_set() else [line]
            if out is not None and kept:
                try:
                    out.writelines(x + "\n" for x in kept)
                except OSError as e:
                    self.error = e
                    with contextlib.suppress(OSError):  # the failed write already said why
                        out.close()
                    out = None
            with self._lock:
                self.lines_seen += 1
                self.tail.append(line)
                new = [] if self._frozen.is_set() else self.facts.feed(self.adapter, line)
            for fact in new:
                try:
                    self.on_fact(fact)
                except OSError as e:  # the journal is full or read-only: the runner stops on it
                    self.error = e
            if not self.ready_seen.is_set() and self.adapter.is_ready_line(line):
                self.ready_seen.set()
        if out is not None:
            try:
                if self.left_out:
                    out.write(f"[ruler] boot.log: {self.left_out:,} lines "
                              f"({self.left_out_bytes / 1e6:.1f} MB) after ready left out; the last "
                              f"{len(self.left_out_tail)} of them:\n")
                    out.writelines(x + "\n" for x in self.left_out_tail)
                out.close()
            except OSError as e:
                self.error = e

    def caught_up(self, timeout: float) -> bool:
        """Wait until the pump has read the server's ready line (or the log ended: attach has none)."""
        deadline = time.monotonic() + timeout
        while not self.ready_seen.is_set() and self.is_alive():
            if time.monotonic() >= deadline:
                return False
            self.ready_seen.wait(0.05)
        return True

    def add_facts(self, facts: Mapping[str, FactValue], source: str) -> list[Fact]:
        """Facts the runtime knows and no log line says (a batch job's node, its GPUs, the free
        GPU memory at boot)."""
        added = [Fact(k, v, f"{source}: {k}={v}") for k, v in facts.items()]
        with self._lock:
            for fact in added:
                self.facts.facts[fact.key] = fact
            self.added |= {fact.key for fact in added}
        return added

    def log_facts(self) -> bool:
        """Whether the server's log gave any boot fact (beside those the runtime added)."""
        with self._lock:
            return bool(self.facts.facts.keys() - self.added)

    def freeze(self) -> BootFacts:
        """Stop collecting boot facts (later lines are per-request chatter); the log goes on."""
        with self._lock:
            self._frozen.set()
            return self.facts

    def tail_text(self, n: int = 60) -> str:
        with self._lock:
            return "\n".join(list(self.tail)[-n:])


@dataclass
class BootOutcome:
    ready: bool
    seconds: float
    reason: str = ""
    error_lines: list[str] = field(default_factory=list)


HEALTH_BYTES = 1 << 20  # a health answer is a word or a small object


def probe(client: httpx.Client, base_url: str, adapter: ServerClient) -> Readiness:
    try:
        r = client.get(base_url + adapter.health_path)
    except httpx.TransportError:  # no answer, or one past its bound (engine.servers.bounded)
        return adapter.readiness(None, b"")
    return adapter.readiness(r.status_code, r.content)


def wait_ready(server: Server, adapter: ServerClient, pump: LogPump, timeout: float,
               interval: float = 0.5, cancelled: Callable[[], bool] = lambda: False) -> BootOutcome:
    started = time.monotonic()
    with server_client(timeout=5.0, limit=HEALTH_BYTES) as client:
        while True:
            elapsed = time.monotonic() - started
            if cancelled():
                return BootOutcome(False, elapsed, "boot cancelled by the operator")
            if not server.alive():
                pump.join(timeout=5)  # let the last lines (the error) land
                code = server.exit_code()
                return BootOutcome(False, elapsed, f"server exited during boot (exit code {code})",
                                   list(pump.facts.errors))
            state = probe(client, server.base_url, adapter)
            if state is Readiness.READY:
                # Health can answer before the pump has read the lines that precede the server's
                # ready line: freezing the facts then would lose some of them.
                pump.caught_up(LOG_CATCH_UP_S)
                return BootOutcome(True, time.monotonic() - started)
            if state is Readiness.DEAD:
                return BootOutcome(False, elapsed, "health probe reports a dead engine",
                                   list(pump.facts.errors))
            if elapsed > timeout:
                return BootOutcome(False, elapsed, f"not ready after {timeout:.0f} s (boot timeout)",
                                   list(pump.facts.errors))
            time.sleep(interval)
