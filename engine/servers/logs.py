"""The log part of a server adapter: what one line of a server's log says.

ruler keeps every server's log and reads it line by line through a :class:`LogReader`: while the
server boots (the window's boot record), in the console, and in ``ruler facts``:

* facts (:meth:`~LogReader.parse_line`): numbers and settings the server prints while it boots
  (KV-cache size, weights memory, speculative settings, ...), each a :class:`Fact` that keeps its
  verbatim line, collected into :class:`BootFacts`, which a window's boot is diffed on against
  the control's;
* sections (:meth:`~LogReader.scope`): which model a line belongs to when a server loads several
  (a drafter after the target) with the same wording;
* errors and warnings (:meth:`~LogReader.is_error`, :meth:`~LogReader.is_warning`), kept verbatim
  in the boot record and coloured by the console;
* the ready line (:meth:`~LogReader.is_ready_line`): the server's own word that it serves
  (readiness itself is decided by the client part's health probe).

A new server must implement :meth:`~LogReader.parse_line`, :meth:`~LogReader.is_error`,
:meth:`~LogReader.is_warning` and :meth:`~LogReader.is_ready_line`; :meth:`~LogReader.scope`
is needed only for a log that repeats one wording per model; the dry run lists
:attr:`~LogReader.watched_facts` and :attr:`~LogReader.ready_text` for the operator. A reader keeps
no state across lines (:class:`BootFacts` does), so one reader can read many logs.
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

FactValue = int | float | str | bool

# A failing boot can print thousands of near-identical lines (one per tensor, per retry); the
# first ones carry the cause, so keep those and count the rest instead of growing without bound.
MAX_ERRORS = 200
MAX_WARNINGS = 200

_NUMBER_RE = re.compile(r"[-+]?(?:\d[\d,_]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")


def parse_number(text: str) -> int | float:
    """Parse a number as servers print it: ``2,042,016`` -> 2042016, ``3.81`` -> 3.81.

    Thousands separators (``,`` or ``_``) are dropped; a value with a decimal point or an
    exponent is a float, anything else an int. Surrounding whitespace is ignored.
    Raises ValueError when ``text`` is not one finite number.
    """
    s = text.strip()
    if not _NUMBER_RE.fullmatch(s):
        raise ValueError(f"not a number: {text!r}")
    s = s.replace(",", "").replace("_", "")
    if any(c in s for c in ".eE"):
        value = float(s)
        if not math.isfinite(value):  # 1e999: no fact a JSON journal can hold
            raise ValueError(f"not a finite number: {text!r}")
        return value
    return int(s)


@dataclass(frozen=True)
class Fact:
    """One fact extracted from a server log line."""

    key: str  # stable dotted name, e.g. "kv.cells"; documented per adapter
    value: FactValue
    line: str  # the verbatim log line it came from


# The boot facts a window on another stack is diffed on against the control, named alike for every
# server (LogReader.common_facts): the KV cache's tokens and element type, the sequences served at
# once (slots), a sequence's context, the weights' type, the speculative method and its depth.
COMMON_FACTS = ("kv.tokens", "kv.dtype", "slots", "context", "dtype", "spec.method", "spec.depth")


def torch_dtype(value: FactValue | None) -> str | None:
    """``torch.bfloat16`` -> ``bfloat16``: a dtype as every stack can name it."""
    return None if value is None else str(value).removeprefix("torch.")


class LogReader(ABC):
    """Facts, errors, warnings and the ready line in one server's log wording."""

    # The facts a window's boot is diffed on first, as the dry run lists them (``*`` and
    # ``<label>`` stand for many keys), and the wording of the ready line, for a person.
    watched_facts: tuple[str, ...] = ()
    ready_text: str = ""
    # Words every line with ``periodic.*`` facts holds (acceptance, throughput while serving). After
    # ready the log pump parses only the lines holding one: parsing every per-request line would
    # cost the engine's CPU while it measures.
    periodic_marks: tuple[str, ...] = ()

    def periodic(self, line: str) -> bool:
        """True when the line carries ``periodic.*`` facts (checked cheaply first by the marks)."""
        return any(m in line for m in self.periodic_marks) and any(
            f.key.startswith("periodic.") for f in self.parse_line(line))

    def scope(self, line: str, current: str) -> str | None:
        """Return a new key scope when ``line`` opens a new section, else None.

        A server that loads several models into one log (a speculative drafter after the
        target) prints the same wording for each; :class:`BootFacts` keeps the current scope
        and hands it back to :meth:`parse_line` (and here as ``current``) so the facts of
        each model stay apart. The scope string is the adapter's own; the target's is ``""``.
        """
        return None

    def common_facts(self, facts: dict[str, FactValue]) -> dict[str, FactValue]:
        """The boot facts that mean the same on every stack (:data:`COMMON_FACTS`), under their
        common names, from this server's own: what a window on another stack is diffed on. A fact
        the server's log does not give is left out (the diff shows it on one side only)."""
        return {}

    @abstractmethod
    def parse_line(self, line: str, scope: str = "") -> list[Fact]:
        """Facts found on one log line (empty when none); ``scope`` is from :meth:`scope`."""

    @abstractmethod
    def is_error(self, line: str) -> bool:
        """True when the line reports an error (kept verbatim in the boot record)."""

    @abstractmethod
    def is_warning(self, line: str) -> bool:
        """True when the line is a warning; never True for a line is_error accepts."""

    @abstractmethod
    def is_ready_line(self, line: str) -> bool:
        """True when the line says the server now accepts requests: the boot watcher reads the log up
        to it before it freezes the boot facts."""


@dataclass
class BootFacts:
    """Facts, errors and warnings accumulated over one boot log."""

    facts: dict[str, Fact] = field(default_factory=dict)  # last value wins per key
    errors: list[str] = field(default_factory=list)  # verbatim, in log order, capped
    warnings: list[str] = field(default_factory=list)  # verbatim, in log order, capped
    dropped_errors: int = 0
    dropped_warnings: int = 0
    scope: str = ""  # current model section, see LogReader.scope

    def feed(self, reader: LogReader, line: str) -> list[Fact]:
        """Read one log line; return the facts found on it."""
        line = line.rstrip("\r\n")
        new_scope = reader.scope(line, self.scope)
        if new_scope is not None:
            self.scope = new_scope
        found = reader.parse_line(line, self.scope)
        for fact in found:
            self.facts[fact.key] = fact
        if reader.is_error(line):
            if len(self.errors) < MAX_ERRORS:
                self.errors.append(line)
            else:
                self.dropped_errors += 1
        elif reader.is_warning(line):
            if len(self.warnings) < MAX_WARNINGS:
                self.warnings.append(line)
            else:
                self.dropped_warnings += 1
        return found

    def feed_text(self, reader: LogReader, text: str) -> list[Fact]:
        """Feed a whole captured log; return every fact found, in order."""
        found: list[Fact] = []
        for line in text.splitlines():
            found.extend(self.feed(reader, line))
        return found

    def value(self, key: str, default: FactValue | None = None) -> FactValue | None:
        fact = self.facts.get(key)
        return default if fact is None else fact.value

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "facts": {k: f.value for k, f in self.facts.items()},
            "lines": {k: f.line for k, f in self.facts.items()},
            "errors": list(self.errors),
            "warnings": list(self.warnings),
        }
        # Only mention truncation when it happened, so ordinary records stay small.
        if self.dropped_errors:
            out["dropped_errors"] = self.dropped_errors
        if self.dropped_warnings:
            out["dropped_warnings"] = self.dropped_warnings
        return out

    @classmethod
    def of(cls, values: dict[str, FactValue]) -> BootFacts:
        """Facts as a journal holds them (``boot_fact`` events): values without their log lines."""
        return cls(facts={k: Fact(k, v, "") for k, v in values.items()})

    def diff(self, other: BootFacts) -> dict[str, Any]:
        """Compare fact values with another boot (typically this window vs the control)."""
        changed: dict[str, list[FactValue]] = {}
        equal: list[str] = []
        for key in sorted(self.facts.keys() & other.facts.keys()):
            a, b = self.facts[key].value, other.facts[key].value
            if a == b and type(a) is type(b):
                equal.append(key)
            else:
                changed[key] = [a, b]
        return {
            "changed": changed,
            "only_here": {
                k: self.facts[k].value for k in sorted(self.facts.keys() - other.facts.keys())
            },
            "only_there": {
                k: other.facts[k].value for k in sorted(other.facts.keys() - self.facts.keys())
            },
            "equal": equal,
        }


def stack_diff(mine: BootFacts, reader: LogReader, control: BootFacts, control_reader: LogReader,
               stacks: tuple[str, str]) -> dict[str, Any]:
    """A window on another stack against its control: the facts that mean the same on both
    (:data:`COMMON_FACTS`) diffed under their common names, every other fact listed per stack
    (``stacks``: the window's server, the control's), since the same key on two servers need not
    mean the same thing."""
    values = {k: f.value for k, f in mine.facts.items()}
    theirs = {k: f.value for k, f in control.facts.items()}
    common = BootFacts.of(reader.common_facts(values)).diff(
        BootFacts.of(control_reader.common_facts(theirs)))
    return {**common, "stacks": {"window": stacks[0], "control": stacks[1]},
            "per_stack": {"window": values, "control": theirs}}
