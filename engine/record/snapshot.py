"""A snapshot of the fold: the state of a journal's first lines, so that a reader folds only the rest.

The journal stays the run's only record and ``fold`` the only way its state is derived: a snapshot
is a cache of the fold, written by the journal's writer (``engine.record.writer``) every
``EVERY`` events and when it closes, atomically, beside the journal (``state.snapshot.json``). It
says what it covers: the journal's bytes and lines it folded, the sequence number reached, the
first and the last of those lines (the last one's length and hash) and the CRC-32 of every byte
it covers. A reader takes it only when all of that still holds and the same fold wrote it (ruler's
version and the source of the fold's modules); otherwise (no snapshot, a journal shorter than it,
rewritten or damaged inside what it covers, a seq that does not match, a corrupt file, another
version) the reader folds the whole journal, and so sees the damage.

The state is written generically, field by field of its dataclasses, and read back by their type
hints: a field added to ``RunState`` needs no code here, and since the fold's source is part of
the fingerprint, a snapshot written before the field existed is never read as if it had it.
It is strict JSON (RFC 8259) read by orjson, twice the standard parser's speed on a
day-long state. A state it would not read back exactly is not written (its readers fold the whole
journal): a NaN or a lone surrogate, which strict JSON cannot hold, and an integer wider than 64
bits, which orjson reads as a float.

The covered bytes are checked by CRC-32, not a cryptographic hash: it guards against damage (a
run of NULs a crash or a disk leaves, a line edited in place), which it catches whole up to 32
bits in a row and otherwise misses once in 2**32; a forger who can edit the journal can rewrite
the snapshot as well. It reads 20 MB in 20 ms here, sha256 in 50 ms, and every status and attach
pays it. The writer keeps the CRC as it appends, so a snapshot costs no read of the journal.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import json
import os
import sys
import types
import typing
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from engine import __version__, files
from engine.record import results
from engine.record.fold import Folding, fold_read
from engine.record.journal import JournalRead, Reader, read_journal, wide
from engine.record.state import RunState

SNAPSHOT = "state.snapshot.json"
EVERY = 1000  # events between two snapshots: a reader folds fewer than this many itself
FORMAT = 3  # 3: the CRC-32 of the covered bytes; 2: strict JSON, read by orjson (1 allowed NaN)
CHUNK = 1 << 20  # bytes read at a time for the CRC of the covered bytes
FOLD_MODULES = ("engine.record.events", "engine.record.eventcheck", "engine.record.figures",
                "engine.record.journal", "engine.record.state", "engine.record.fold",
                "engine.record.upgrade", __name__)


def path_of(journal: Path) -> Path:
    return journal.with_name(SNAPSHOT)


def _sha1(*parts: bytes | memoryview) -> str:
    """The SHA-1 of the parts, one after the other. hashlib is imported here, not at the top: a
    journal without a snapshot is read without it (OpenSSL's start, 3 ms of `ruler status`)."""
    import hashlib

    h = hashlib.sha1(usedforsecurity=False)
    for part in parts:
        h.update(part)  # not concatenated: a day-long state is megabytes, each copy milliseconds
    return h.hexdigest()


def _check(head: dict[str, Any], body: bytes | memoryview) -> str:
    """The hash of the whole snapshot: its header (but this hash) and its state."""
    fields = {k: v for k, v in head.items() if k != "check"}
    return _sha1(json.dumps(fields, sort_keys=True).encode() + b"\n", body)


@functools.cache
def fingerprint() -> str | None:
    """The fold that writes and reads snapshots: ruler's version and the source of its modules.
    None when a source cannot be read: then no snapshot is written or read."""
    try:
        sources = [Path(sys.modules[name].__file__ or "").read_bytes() for name in FOLD_MODULES]
    except (OSError, KeyError):
        return None
    return _sha1(f"{FORMAT} {__version__}".encode(), *sources)


# ------------------------------------------------------------------ the state, field by field

def _fields(o: Any) -> Any:
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return {f.name: getattr(o, f.name) for f in dataclasses.fields(o)}
    if isinstance(o, set | frozenset):
        return list(o)
    raise TypeError(f"a snapshot cannot hold {type(o).__name__}")


def encode(state: RunState, finite: bool = True) -> bytes:
    """The state as strict JSON; ValueError for one orjson would not read back exactly (NaN, a
    lone surrogate, an integer wider than 64 bits). ``finite``: no event folded into it held a
    NaN or an infinity (engine.record.journal.Parse), so orjson writes it (five times the
    standard encoder's speed); else the standard encoder, which refuses them, where orjson would
    write null, which would read back as None. orjson refuses the other two itself."""
    if finite:
        try:
            return orjson.dumps(state, default=_fields, option=orjson.OPT_NON_STR_KEYS)
        except TypeError as e:  # orjson.JSONEncodeError: a lone surrogate, a wide integer
            raise ValueError(str(e)) from None
    body = json.dumps(state, default=_fields, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode()
    # A long run of digits, even inside a string: a run folded from its journal is slower, never wrong.
    if wide(body):
        raise ValueError("a number orjson may read as a float")
    return body


def _same(v: Any) -> Any:
    return v


Decode = Callable[[Any], Any]


@functools.cache
def decoder(tp: Any) -> Decode:
    """How a value of type ``tp`` reads back from JSON; raises TypeError for a type it cannot."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any or tp in (str, int, float, bool, type(None)) or (
            isinstance(tp, type) and issubclass(tp, str)):
        return _same
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [decoder(a) for a in args if a is not type(None)]
        if all(d is _same for d in inner):
            return _same
        if len(inner) != 1:
            raise TypeError(f"a snapshot cannot read {tp!r}")
        one = inner[0]
        return lambda v: None if v is None else one(v)
    if origin is dict:
        key = int if args[0] is int else _same if args[0] is str else None
        if key is None:
            raise TypeError(f"a snapshot cannot read {tp!r}: JSON keys are strings")
        value = decoder(args[1])
        if key is _same and value is _same:
            return _same
        # zip and map, not a comprehension: a day-long state has thousands of these (each row's
        # reps and receipts by attempt and rep), and their items are then made in C.
        if value is _same:
            return lambda v: dict(zip(map(key, v), v.values(), strict=True))
        if key is _same:
            return lambda v: dict(zip(v, map(value, v.values()), strict=True))
        return lambda v: dict(zip(map(key, v), map(value, v.values()), strict=True))
    if origin is list:
        item = decoder(args[0])
        return _same if item is _same else (lambda v: [item(x) for x in v])
    if origin is set:
        item = decoder(args[0])
        return lambda v: {item(x) for x in v}
    if origin is tuple and args and args[-1] is not Ellipsis:
        items = [decoder(a) for a in args]
        return lambda v: tuple(d(x) for d, x in zip(items, v, strict=True))
    raise TypeError(f"a snapshot cannot read {tp!r}")


def _dataclass(cls: type) -> Decode:
    hints = typing.get_type_hints(cls)
    fields = [(f.name, decoder(hints[f.name])) for f in dataclasses.fields(cls)]
    names = {name for name, _ in fields}
    typed = [(name, d) for name, d in fields if d is not _same]
    plain = all(f.init for f in dataclasses.fields(cls)) and not hasattr(cls, "__post_init__") \
        and "__slots__" not in cls.__dict__

    def read(v: dict[str, Any]) -> Any:
        if v.keys() != names:
            raise KeyError(sorted(names ^ v.keys()))
        if not plain:  # an __init__ that does more than set the fields
            return cls(**{name: d(v[name]) for name, d in fields})
        # Its fields set as __init__ would set them, without the call per object (a day-long
        # state has thousands): the JSON object is the instance's __dict__, its typed fields read.
        for name, d in typed:
            v[name] = d(v[name])
        obj: object = object.__new__(cls)
        object.__setattr__(obj, "__dict__", v)
        return obj

    return read


def decode(data: Any) -> RunState:
    state = decoder(RunState)(data)
    assert isinstance(state, RunState)
    return state


# ------------------------------------------------------------------ writing and reading


@contextlib.contextmanager
def _no_collections() -> Iterator[None]:
    """A day-long state is a million new objects, none in a cycle: the collector would scan the
    growing heap again and again while they are made (a quarter of the load's time)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()

@dataclass
class Prefix:
    """A snapshot that matches its journal: the fold of its first ``lines`` lines."""

    state: RunState
    length: int  # bytes: the end of the last line it covers
    lines: int
    last: bytes  # that last line, with its newline
    crc: int  # the CRC-32 of the ``length`` bytes it covers


def covered_crc(f: typing.BinaryIO, length: int, start: int = 0, crc: int = 0) -> int:
    """The CRC-32 of a journal's first ``length`` bytes, read from ``f``: from ``start`` on,
    continuing ``crc``, that of the bytes before it."""
    f.seek(start)
    left = length - start
    while left > 0:
        chunk = f.read(min(CHUNK, left))
        if not chunk:
            break
        crc, left = zlib.crc32(chunk, crc), left - len(chunk)
    return crc


Stamp = tuple[int, int, int]  # a journal's inode, size and modification time (ns)


def stamp(journal: Path) -> Stamp | None:
    """The journal as it stands now, None where there is none to stat."""
    try:
        st = os.stat(journal)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def write(journal: Path, state: RunState, length: int, lines: int, last: bytes,
          crc: int | None = None, finite: bool = True, read_at: Stamp | None = None) -> None:
    """The snapshot of ``state``, the fold of the journal's first ``lines`` lines (``length``
    bytes, the last of them ``last``, ``crc`` the CRC-32 of them all: read from the journal when
    not given; ``finite`` as :func:`encode` takes it). ``read_at``: the journal's stamp before
    the fold read it, when the CRC is read here: none is written unless the journal still stands
    so, to its file system's clock (a journal written to since, appended or edited in place, may
    no longer hold the bytes the fold read). Atomic, not fsync'd: a snapshot lost to a crash is
    missed, never misread (its hash), and the journal still holds everything."""
    fold = fingerprint()
    if fold is None or not lines:
        return
    try:
        body = encode(state, finite)
    except ValueError:  # a NaN or a lone surrogate in some event: its readers fold it all
        return
    with open(journal, "rb") as f:
        first = f.readline()
        if crc is None:
            crc = covered_crc(f, length)
            if read_at is not None and stamp(journal) != read_at:
                return
    head: dict[str, Any] = {"format": FORMAT, "fold": fold, "seq": state.last_seq, "length": length,
                            "lines": lines, "first": _sha1(first), "last_len": len(last),
                            "last": _sha1(last), "crc": crc}
    head["check"] = _check(head, body)
    # A cache (its hash tells a torn one): not fsync'd. The temporaries a killed writer left go.
    with results.atomic_file(path_of(journal), fsync=False) as f:
        f.write(json.dumps(head).encode() + b"\n" + body + b"\n")


def load(journal: Path) -> tuple[Prefix | None, str]:
    """The snapshot beside ``journal`` when it still matches it, else None and why not."""
    try:
        raw = files.read_bounded(path_of(journal))
    except FileNotFoundError:
        return None, "no snapshot"
    except (OSError, files.Unreadable) as e:  # a FIFO, a device, a sparse file: the journal says it all
        return None, f"snapshot unreadable ({e.strerror if isinstance(e, OSError) else e})"
    # The state read in place (a memoryview): a copy of it costs as much as its hash.
    cut = raw.find(b"\n")
    head_raw, body = (raw, memoryview(b"")) if cut < 0 else (raw[:cut], memoryview(raw)[cut + 1:])
    try:
        head = json.loads(head_raw)
        if not isinstance(head, dict):
            raise ValueError
    except ValueError:
        return None, "snapshot corrupt (its header is not JSON)"
    fold = fingerprint()
    if head.get("format") != FORMAT or fold is None or head.get("fold") != fold:
        return None, "snapshot written by another version of ruler"
    if body[-1:].tobytes() == b"\n":
        body = body[:-1]
    if head.get("check") != _check(head, body):
        return None, "snapshot corrupt (it does not match its hash)"
    try:
        length, lines, seq, last_len, crc = (int(head[k]) for k in (
            "length", "lines", "seq", "last_len", "crc"))
        with files.open_bounded(journal) as f:  # Unreadable (a ValueError): the full read says why
            first = f.readline()
            if os.fstat(f.fileno()).st_size < length:
                return None, "journal shorter than the snapshot"
            f.seek(length - last_len - 1 if length > last_len else 0)
            edge = f.read(last_len + 1 if length > last_len else last_len)
            changed = covered_crc(f, length) != crc
    except FileNotFoundError:
        return None, "no journal"
    except (OSError, KeyError, ValueError, TypeError):
        return None, "snapshot corrupt (its header)"
    last = edge[-last_len:] if last_len else b""
    lone = length == last_len
    if (_sha1(first) != head.get("first") or _sha1(last) != head.get("last")
            or not last.endswith(b"\n") or not (lone or edge[:1] == b"\n")):
        return None, "journal rewritten since the snapshot"
    if changed:
        return None, "journal changed inside what the snapshot covers"
    try:
        with _no_collections():
            state = decode(orjson.loads(body))
    except (ValueError, KeyError, TypeError, AssertionError):
        return None, "snapshot corrupt (its state does not read back)"
    ended = Reader(lines - 1).feed([last])
    damaged = {d.line for d in state.damage}
    if state.last_seq != seq or (ended and ended[0][1]["seq"] != seq and lines not in damaged):
        return None, "seq mismatch between the snapshot and the journal"
    return Prefix(state, length, lines, last, crc), ""


@dataclass
class Folded:
    """A journal's state: a snapshot's and the lines after it, or every line when none matched."""

    state: RunState
    read: JournalRead  # the lines folded here (all of them without a snapshot), less their events
    prefix: Prefix | None
    why: str  # why no snapshot was used ("" when one was)
    read_at: Stamp | None = None  # the journal before the read, where its CRC was not taken

    @property
    def last(self) -> bytes:
        """The journal's last complete line."""
        return self.read.last or (self.prefix.last if self.prefix else b"")


def read_folded(journal: str | Path, keep: bool = True, vouch: bool = False) -> Folded:
    """The journal's state: its snapshot's when one matches, and the lines after it folded here.
    With ``keep``, when this folded ``EVERY`` lines or more itself (a run an older ruler wrote, a
    snapshot refused, a run that stopped without one), their fold is kept as the snapshot for the
    next reader, where the run directory takes it: a day-long journal is folded once. Without
    ``keep``, the read takes no CRC of the bytes it folds (a tenth of `ruler status`'s fold): the
    snapshot kept later, if any, reads it then, and is kept only if the journal was not written to
    since (:func:`write`'s ``read_at``). ``vouch``: the CRC taken as it reads all the same, for a
    reader that keeps snapshots of its own (the journal's writer)."""
    journal = Path(journal)
    prefix, why = load(journal)
    start, lines = (prefix.length, prefix.lines) if prefix else (0, 0)
    crc = (prefix.crc if prefix else 0) if keep or vouch else None
    read_at = None if crc is not None else stamp(journal)
    state = prefix.state if prefix else RunState()
    with _no_collections():  # a hundred thousand events, none in a cycle: see _no_collections
        read = read_journal(journal, start, lines, crc, Folding(state))
        state = fold_read(read, state)  # its damage
    folded = Folded(state, read, prefix, why, read_at)
    if keep:
        keep_fold(journal, folded)
    return folded


def keep_fold(journal: Path, folded: Folded) -> None:
    """The snapshot of a fold :func:`read_folded` made, when it folded ``EVERY`` lines or more
    itself, where the run directory takes it (a reader that has something better to do first
    asks for it later: the console, after its first screen)."""
    read = folded.read
    if _folded_here(folded) >= EVERY:
        with contextlib.suppress(OSError):  # a run directory this reader may not write to
            write(journal, folded.state, read.length, read.lines, read.last, read.crc, read.finite,
                  folded.read_at)


def _folded_here(folded: Folded) -> int:
    """The lines the reader folded itself, past its snapshot."""
    return folded.read.lines - (folded.prefix.lines if folded.prefix else 0)


def keep_fold_behind(journal: Path, folded: Folded) -> None:
    """:func:`keep_fold` by a process of its own, for a one-shot command (``ruler status``) that
    ends next, without waiting for a day-long state's snapshot (0.05 s of its 0.4). The fold is
    the child's by fork, copied only where written; nothing waits on the child (the caller's end
    leaves it to init), and it holds none of the caller's streams (a reader of its pipe sees the
    end when the caller ends; what the caller has not flushed is never written twice: the child
    ends by os._exit). Where fork is refused, the snapshot is written here."""
    if _folded_here(folded) < EVERY:
        return
    try:
        child = os.fork()
    except OSError:
        keep_fold(journal, folded)
        return
    if child:
        return
    try:  # the child: the snapshot's writer, then gone
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        keep_fold(journal, folded)
    finally:
        os._exit(0)


def fold_journal(journal: str | Path) -> RunState:
    """The state of a journal file, with every damaged line (its number and why) in ``damage``:
    its snapshot and the lines after it when it has a matching one, else every line."""
    return read_folded(journal).state
