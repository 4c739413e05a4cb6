"""The run's journal: one JSON event a line, fsync'd, the single source of truth.

Every view of a run (the headless printer, the console, ``status``, resume) is ``fold(events)``.
A torn last line (no newline: the write never completed, as a power loss leaves it) is dropped on
read and cut off before the next append. Any other line that is not an event is *damage*: reading
skips it, says where it is, and nothing ever cuts it away: the file is the run's only record.
"""

from __future__ import annotations

import contextlib
import json
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import Any

import orjson

from engine import files
from engine.errors import BadInput
from engine.record.events import EventKind
from engine.record.upgrade import upgraded

Event = dict[str, Any]
EXCERPT = 60  # characters of a damaged line worth showing
BLOCK = 1024  # lines handed to a fold at a time (read_journal)
PIECE = 1 << 20  # bytes read from the file at a time by read_journal, its lines cut into blocks


@dataclass(frozen=True)
class Damage:
    """One line of the journal that is not the event it should be."""

    line: int | None  # 1-based; None for an event that did not come from a file
    reason: str
    excerpt: str = ""

    def __str__(self) -> str:
        where = f"line {self.line}" if self.line else "an event"
        return f"{where}: {self.reason}" + (f": {self.excerpt}" if self.excerpt else "")

    def as_json(self) -> dict[str, Any]:
        return {"line": self.line, "reason": self.reason, "excerpt": self.excerpt}


def excerpt(raw: bytes | str) -> str:
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    text = text.rstrip("\n")
    short = text[:EXCERPT]
    return repr(short)[1:-1] + ("…" if len(text) > EXCERPT else "")


# Every digit as 0, a minus kept, the rest blank: a run of digits found without a regular expression
# (13 ms over a day-long journal, a regular expression takes ten times that).
DIGITS = bytes(48 if 48 <= i <= 57 else 45 if i == 45 else 32 for i in range(256))
_WIDE = (b"0" * 20, b"-" + b"0" * 19)  # 10**19 and more, -10**18 and less: maybe wider than 64 bits


def wide(data: bytes) -> bool:
    """Whether ``data`` may hold an integer wider than 64 bits (a run of 20 digits, or a minus
    and 19), which orjson reads as a float where the standard parser keeps it exact."""
    digits = data.translate(DIGITS)
    return any(w in digits for w in _WIDE)


class Parse:
    """One line's JSON, as the standard parser reads it, at orjson's speed: orjson's value where
    it gives one (it refuses what it does not read as the standard parser does: NaN, Infinity, a
    lone surrogate, a byte-order mark, invalid UTF-8, a document nested past 1024), the standard
    parser's otherwise, and always on a line that may hold a wide integer (``careful``). A
    non-finite float read (NaN, Infinity, 1e400) clears :attr:`finite`: a snapshot written by
    orjson would hold it as null (``engine.record.snapshot``)."""

    def __init__(self) -> None:
        self.finite = True

    def __call__(self, raw: bytes, careful: bool = False) -> Any:
        if not careful:
            try:
                return orjson.loads(raw)
            except orjson.JSONDecodeError:
                pass
        return json.loads(raw, parse_float=self._float, parse_constant=self._float)

    def _float(self, text: str) -> float:
        x = float(text)  # the standard parser's own reading of a float, NaN and Infinity too
        if x - x != 0.0:  # inf - inf and nan - nan are nan
            self.finite = False
        return x


_loads, _Invalid = orjson.loads, orjson.JSONDecodeError
_UPGRADED = EventKind.RUN_STARTED.value  # the one kind engine.record.upgrade may change
_SEQ, _KIND = itemgetter("seq"), itemgetter("kind")


def _event(raw: bytes, run_dir: Path | None, parse: Parse | None = None,
           careful: bool = True) -> Event | str:
    """The event on one complete line in the current format's shape (engine.record.upgrade), or
    why it is not one."""
    try:
        e = (parse or Parse())(raw, careful)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        return "not JSON" if raw.strip() else "empty line"
    if not isinstance(e, dict):
        return "not a JSON object"
    seq = e.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
        return "no sequence number"
    if not isinstance(e.get("kind"), str):
        return "no kind"
    return upgraded(e, run_dir)


class Reader:
    """The one parser of journal lines. Fed complete lines in file order (each with or without
    its newline), it numbers them, returns ``(line, event)`` for each event and keeps the rest in
    :attr:`damage`. Sequence numbers are the fold's business (``engine.record.fold.apply``).
    ``run_dir``: the run directory, whose frozen campaign upgrades a format 1 journal."""

    def __init__(self, line: int = 0, run_dir: Path | None = None) -> None:
        self.line = line  # the lines before the first one fed (a snapshot covers them)
        self.run_dir = run_dir
        self.damage: list[Damage] = []
        self.parse = Parse()  # its ``finite``: every float read was finite

    def one(self, raw: bytes, line: int) -> Event | None:
        """The event on one line numbered ``line`` (not counted: the caller numbers its lines),
        or None, its damage kept."""
        got = _event(raw, self.run_dir, self.parse, wide(raw))
        if isinstance(got, str):
            self.damage.append(Damage(line, got, excerpt(raw)))
            return None
        return got

    def feed(self, lines: Iterable[bytes], careful: bool | None = None) -> list[tuple[int, Event]]:
        """``careful``: whether the lines may hold an integer wider than 64 bits (:func:`wide`):
        None to look at each line, False when the caller found none in them all."""
        if careful is False:
            lines = lines if isinstance(lines, list) else list(lines)
            whole = self._whole(lines)
            if whole is not None:
                return whole
        out: list[tuple[int, Event]] = []
        append, run_dir, parse, n = out.append, self.run_dir, self.parse, self.line
        for raw in lines:
            n += 1
            if careful is False:  # the common line, checked here as _event checks it: a day-long
                try:              # journal has a hundred thousand
                    e = _loads(raw)
                except _Invalid:
                    e = None
                if (type(e) is dict and type(seq := e.get("seq")) is int and seq >= 1
                        and type(e.get("kind")) is str and e["kind"] != _UPGRADED):
                    append((n, e))
                    continue
            got = _event(raw, run_dir, parse, wide(raw) if careful is None else careful)
            if isinstance(got, str):
                self.damage.append(Damage(n, got, excerpt(raw)))
            else:
                append((n, got))
        self.line = n
        return out

    def _whole(self, lines: list[bytes]) -> list[tuple[int, Event]] | None:
        """Every line read at once when each is an event (the common journal: no damage, no wide
        integer), the checks of :func:`_event` made over them all by C loops, no Python step a
        line; None when some line is not one, and they are read one by one, each damaged line
        said."""
        try:
            events = list(map(_loads, lines))
            # A value orjson reads that is not an object has no "seq": a TypeError.
            seqs, kinds = list(map(_SEQ, events)), list(map(_KIND, events))
        except (_Invalid, KeyError, TypeError):  # not JSON, no seq or kind, not an object
            return None
        if not events:
            return []
        if set(map(type, seqs)) != {int} or min(seqs) < 1 or set(map(type, kinds)) != {str}:
            return None
        at = -1
        with contextlib.suppress(ValueError):  # list.index: no (further) run_started
            while True:
                at = kinds.index(_UPGRADED, at + 1)
                events[at] = upgraded(events[at], self.run_dir)
        out = list(zip(range(self.line + 1, self.line + 1 + len(events)), events, strict=True))
        self.line += len(events)
        return out


@dataclass
class JournalRead:
    events: list[tuple[int, Event]]  # (line, event)
    damage: list[Damage]
    length: int  # bytes up to the end of the last complete line
    torn: bool  # a last line without its newline follows
    lines: int = 0  # complete lines up to ``length``
    last: bytes = b""  # the last complete line, with its newline
    crc: int | None = None  # the CRC-32 of the journal's first ``length`` bytes, when asked for
    finite: bool = True  # no event read holds a NaN or an infinity


class BlockFold(ABC):
    """A fold of a journal's events (called with them, as read_journal's ``fold``) that may fold
    a block of lines itself first (engine.record.fold.Folding)."""

    @abstractmethod
    def __call__(self, events: list[tuple[int, Event]]) -> object:
        """The events read, in order."""

    @abstractmethod
    def block(self, lines: list[bytes], reader: Reader) -> bool:
        """True when it folded these lines itself (``reader`` numbers them); else they are read."""


def read_journal(path: str | Path, start: int = 0, line: int = 0, crc: int | None = None,
                 fold: Callable[[list[tuple[int, Event]]], object] | None = None) -> JournalRead:
    """The complete lines from byte ``start`` on, numbered after ``line`` (the lines before it);
    with ``crc``, that of the bytes before ``start``, the CRC-32 of every complete line's bytes
    too (a snapshot vouches for them: engine.record.snapshot). With ``fold``, the events are
    handed to it a block of lines at a time, in order, and not kept (``events`` stays empty): a
    day-long journal's hundred thousand events are never in memory at once, each block's made
    where the one before was (half the page faults, and the fold's peak memory halved); nor are
    its bytes, read a piece at a time. A :class:`BlockFold` is offered each block's lines first,
    and those it folds are not read here."""
    reader = Reader(line, Path(path).parent)
    events: list[tuple[int, Event]] = []
    block_fold = fold.block if isinstance(fold, BlockFold) else None
    length, last, pending = start, b"", list[bytes]()  # pending: a line not yet complete
    try:
        for piece in files.read_pieces(path, start, PIECE):
            # Split where it lies: no copy of the piece, nor of a block, is made to split it.
            lines = piece.split(b"\n")
            tail = lines.pop()  # what follows the piece's last newline: a line not yet complete
            if not lines:  # a line longer than a piece
                pending.append(piece)
                continue
            if crc is not None:
                for done in pending:
                    crc = zlib.crc32(done, crc)
                crc = zlib.crc32(memoryview(piece)[:len(piece) - len(tail)], crc)
            length += sum(map(len, pending)) + len(piece) - len(tail)
            if pending:
                lines[0] = b"".join((*pending, lines[0]))
            pending = [tail] if tail else []
            last = lines[-1] + b"\n"
            for at in range(0, len(lines), BLOCK):
                block = lines[at:at + BLOCK] if len(lines) > BLOCK else lines
                if block_fold is not None and block_fold(block, reader):
                    continue
                got = reader.feed(block, None if wide(b"\n".join(block)) else False)
                if fold is None:
                    events += got
                else:
                    fold(got)
    except FileNotFoundError:
        pass
    except files.Unreadable as exc:  # a FIFO, /dev/zero, a sparse file: never waited on or read
        raise BadInput(f"{path}: {exc}") from None
    return JournalRead(events, reader.damage, length, any(pending), reader.line, last, crc,
                       reader.parse.finite)


def read_kinds(path: str | Path, kinds: Iterable[str]) -> list[Event]:
    """The events of these kinds, in file order, without parsing the other lines: a line is parsed
    when it holds one of the names as a JSON string or any ``\\u`` escape (behind which a name
    could hide). Damaged lines are the fold's to report, not this function's."""
    wanted = set(kinds)
    try:
        data = files.read_bounded(path)
    except FileNotFoundError:
        return []
    except files.Unreadable as exc:
        raise BadInput(f"{path}: {exc}") from None
    data = data[:data.rfind(b"\n") + 1]  # a torn last line never completed
    starts: set[int] = set()
    for needle in [json.dumps(k).encode() for k in wanted] + [b"\\u"]:
        at = data.find(needle)  # bytes.find, not one regex of alternatives: ten times faster
        while at != -1:
            starts.add(data.rfind(b"\n", 0, at) + 1)
            at = data.find(needle, at + 1)
    out: list[Event] = []
    for start in sorted(starts):
        raw = data[start:data.index(b"\n", start) + 1]
        got = _event(raw, Path(path).parent, careful=wide(raw))
        if not isinstance(got, str) and got["kind"] in wanted:
            out.append(got)
    return out


def read_events(path: str | Path) -> list[Event]:
    """Every event in the file, damaged lines left out (``read_journal`` says which)."""
    return [e for _, e in read_journal(path).events]


def damage_report(path: str | Path, damage: list[Damage], limit: int = 5) -> str:
    """``path:line: reason: excerpt`` for the first few, then how many more."""
    lines = [f"{path}:{d.line}: {d.reason}" + (f": {d.excerpt}" if d.excerpt else "")
             if d.line else f"{path}: {d}" for d in damage[:limit]]
    if len(damage) > limit:
        lines.append(f"... and {len(damage) - limit} more damaged lines")
    return "\n".join(lines)
