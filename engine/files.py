"""Opening a file ruler did not make sure of: a data file a person names, or a file of a run
directory (its journal, receipts, CSVs), which anyone may have replaced. Every such read goes
through :func:`open_bounded`, so a FIFO, a device or a sparse file of 50 GB where a file should be
is refused by name at once, never read until memory runs out, never waited on forever."""

import errno
import io
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, TextIO

# A file of a run directory ruler reads back (the journal, a rep receipt, throughput.csv, a quality
# receipt, engine.json): each is read whole or nearly, at a few times its size in memory. A real
# run's largest, its journal, holds tens of MB after days; past this bound it is a mistake (a sparse
# or device file put there) rather than a run.
MAX_RUN_FILE_BYTES = 1 << 30
_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


class Unreadable(ValueError):
    """A file :func:`read_bounded` will not read: the problem, without the path (a caller says it
    its own way); ``size`` the bytes it has where that is the problem (None: it is not a regular
    file); ``path`` the file, where it was opened here."""

    def __init__(self, problem: str, size: int | None = None, path: str | Path | None = None) -> None:
        super().__init__(problem)
        self.size, self.path = size, path


def size_text(n: int) -> str:
    """A byte count as a person reads it: ``1 GiB``, ``50.2 GiB``, ``512 bytes``."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.3g} {unit}"
    return f"{n} bytes"


def open_fd(path: str | Path, flags: int = os.O_RDONLY, mode: int = 0o600) -> int:
    """A regular file's descriptor, opened with ``flags`` (read, append, create): the one way ruler
    opens a file a person names or a run directory holds, which anyone may have replaced. Opened
    without blocking (a FIFO with no writer, or no reader, would wait forever) and checked before
    a byte moves: anything but a regular file (a FIFO, /dev/zero, a directory, a socket) is
    Unreadable; a file that cannot be opened is an OSError."""
    reading = flags & (os.O_WRONLY | os.O_RDWR) == 0
    use = "reads" if reading else "writes"
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as e:
        if e.errno == errno.ENXIO:  # a FIFO opened for writing, with no reader
            raise Unreadable(f"not a regular file (a FIFO); ruler {use} regular files only",
                             path=path) from None
        if e.errno == errno.EISDIR:
            raise Unreadable(f"not a regular file (a directory); ruler {use} regular files only",
                             path=path) from None
        if e.errno == errno.ELOOP:
            raise Unreadable("a symbolic link that loops (too many levels of symbolic links); "
                             f"ruler {use} regular files only", path=path) from None
        raise
    st = os.fstat(fd)
    kind = next((name for test, name in _KINDS if test(st.st_mode)), None)
    if kind is not None or not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise Unreadable(f"not a regular file ({kind or 'a special file'}); ruler {use} "
                         + ("files only" if reading else "regular files only"), path=path)
    os.set_blocking(fd, True)  # a regular file: what a blocking write of it means (a full one)
    return fd


def open_regular(path: str | Path) -> BinaryIO:
    """A regular file open for reading (:func:`open_fd`), for a reader that follows it as it grows
    (a log, a live journal) and so bounds what it reads itself."""
    return os.fdopen(open_fd(path), "rb")


@contextmanager
def open_bounded(path: str | Path, limit: int = MAX_RUN_FILE_BYTES) -> Iterator[BinaryIO]:
    """A regular file of at most ``limit`` bytes, open for reading (:func:`open_regular`): the one
    way ruler opens a file a person names or a run directory holds. A file over ``limit`` (a
    sparse 50 GB file) is Unreadable before a byte is read. A reader still counts what it reads: a
    file may grow, or say a size it does not have."""
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise Unreadable(f"{size_text(size)} ({size} bytes), more than the "
                             f"{size_text(limit)} ruler reads", size, path)
        yield f


def read_bounded(path: str | Path, limit: int = MAX_RUN_FILE_BYTES, start: int = 0) -> bytes:
    """A regular file's bytes from ``start`` on, at most ``limit`` of them in all
    (:func:`open_bounded`)."""
    with open_bounded(path, limit) as f:
        if start:
            f.seek(start)
        # In pieces, never more than limit + 1 in all: one read(limit + 1) would allocate the
        # whole limit for a file of a few bytes.
        chunks: list[bytes] = []
        total = 0
        while total <= limit and (chunk := f.read(min(1 << 24, limit + 1 - total))):
            chunks.append(chunk)
            total += len(chunk)
        data = b"".join(chunks)
    if len(data) > limit:
        raise Unreadable(f"more than the {size_text(limit)} ruler reads", len(data), path)
    return data


def read_text(path: str | Path, limit: int = MAX_RUN_FILE_BYTES, errors: str = "strict") -> str:
    """A regular file's UTF-8 text with universal newlines, as ``Path.read_text`` gives it
    (:func:`read_bounded`); ``errors`` as ``bytes.decode`` takes it."""
    text = read_bounded(path, limit).decode("utf-8", errors=errors)
    return text.replace("\r\n", "\n").replace("\r", "\n")


@contextmanager
def open_text(path: str | Path, limit: int = MAX_RUN_FILE_BYTES, errors: str = "strict",
              newline: str | None = None) -> Iterator[TextIO]:
    """A regular file of at most ``limit`` bytes open as UTF-8 text (:func:`open_bounded`), for a
    reader that takes it a line at a time (``csv``): ``newline`` as ``open`` takes it."""
    with open_bounded(path, limit) as f, io.TextIOWrapper(f, encoding="utf-8", errors=errors,
                                                          newline=newline) as text:
        yield text
