"""Opening a file ruler did not make sure of: a data file a person names, or a file of a run
directory (its journal, receipts, CSVs), which anyone may have replaced. Every such read goes
through :func:`open_bounded`, so a FIFO, a device or a sparse file of 50 GB where a file should be
is refused by name at once, never read until memory runs out, never waited on forever. Every write
into a run directory looks first at what is there (:func:`check_file`, :func:`make_dir`,
:func:`clear`): anything but what ruler makes there is :class:`Unwritable`, named with its path."""

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


class Unwritable(OSError):
    """A path ruler will not write, or make a directory at: something else is there (a directory
    or a FIFO where a file goes, a device, a link that loops or leads to one of those; a file where
    a directory goes). ``strerror`` says what is there, ``filename`` the path: an OSError, so a
    writer that may skip a failed write (a cache) skips this too; ``ruler`` says it, exit 2."""

    def __init__(self, problem: str, path: str | Path) -> None:
        super().__init__(problem)
        self.strerror, self.filename, self.path = problem, str(path), Path(path)

    def __str__(self) -> str:
        return str(self.strerror)


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
    Unreadable (Unwritable, opened to write); a file that cannot be opened is an OSError."""
    reading = flags & (os.O_WRONLY | os.O_RDWR) == 0

    def refused(problem: str, only: str = "regular files") -> Exception:
        if reading:
            return Unreadable(f"{problem}; ruler reads {only} only", path=path)
        return Unwritable(f"{problem}; ruler writes a regular file there: move it away", path)

    try:
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as e:
        if e.errno == errno.ENXIO:  # a FIFO opened for writing, with no reader
            raise refused("not a regular file (a FIFO)") from None
        if e.errno == errno.EISDIR:
            raise refused("not a regular file (a directory)") from None
        if e.errno == errno.ELOOP:
            raise refused("a symbolic link that loops (too many levels of symbolic links)") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise refused(f"not a regular file ({_kind(st.st_mode)})", "files")
    os.set_blocking(fd, True)  # a regular file: what a blocking write of it means (a full one)
    return fd


def what_is(path: str | Path) -> str | None:
    """What is at ``path`` as a person reads it ("a directory", "a symbolic link that loops", "a
    symbolic link to a FIFO"), following links as an open() would; None when nothing is (a link to
    nothing included: a writer replaces it)."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):  # a parent that is no directory: the caller's
        return None
    if not stat.S_ISLNK(st.st_mode):
        return _kind(st.st_mode)
    try:
        return f"a symbolic link to {_kind(os.stat(path).st_mode)}"
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "a symbolic link that loops"
        raise


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "a regular file"
    return next((name for test, name in _KINDS if test(mode)), "a special file")


def _in_a_directory(path: Path) -> None:
    """Unwritable naming the nearest of ``path``'s parents that is there but is no directory (a
    FIFO, a file, a link that loops in place of ``windows/``); a parent that is missing is the
    writer's to make, or its FileNotFoundError to say."""
    for parent in path.parents:
        what = what_is(parent)
        if what is None:
            continue
        if what not in ("a directory", "a symbolic link to a directory"):
            raise Unwritable(f"not a directory ({what}); ruler keeps its files in a directory "
                             "there: move it away", parent)
        return


def check_file(path: str | Path) -> None:
    """Before a file is written at ``path`` (made new, or replaced whole by a rename): nothing may
    be there but a regular file, or a link (replaced itself, never followed) to one or to
    nothing, and each parent that is there must be a directory; else Unwritable names the path
    and what is there. A rename would fail on a directory, and silently take the place of a FIFO
    or a device someone put there on purpose."""
    path = Path(path)
    _in_a_directory(path)
    what = what_is(path)
    if what not in (None, "a regular file", "a symbolic link to a regular file"):
        raise Unwritable(f"not a regular file ({what}); ruler writes a regular file there: move it "
                         "away", path)


def make_dir(path: str | Path, mode: int = 0o700) -> Path:
    """``path`` as a directory ruler writes into: made (``mode``) when missing, kept when it is
    one (or a link to one); anything else there is Unwritable, named."""
    path = Path(path)
    _in_a_directory(path)
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        what = what_is(path)
        if what not in ("a directory", "a symbolic link to a directory"):
            raise Unwritable(f"not a directory ({what}); ruler keeps its files in a directory "
                             "there: move it away", path) from None
    return path


def clear(path: str | Path) -> None:
    """Make room at ``path`` for a file ruler makes anew (a socket): whatever file or link a dead
    process or a person left there is removed (a link, never what it leads to); a directory, which
    may hold anything, is Unwritable, named."""
    path = Path(path)
    _in_a_directory(path)
    if what_is(path) == "a directory":  # a link to one is removed, as a link
        raise Unwritable("not a file (a directory); ruler makes a file there and will not remove "
                         "a directory: move it away", path)
    path.unlink(missing_ok=True)


def resolve(path: str | Path) -> Path:
    """``path`` with every link followed, as ``Path.resolve`` gives it; a link that loops is
    Unreadable, named, where ``Path.resolve`` raises a RuntimeError (or, from Python 3.13, an
    OSError)."""
    try:
        return Path(path).resolve()
    except (RuntimeError, OSError) as e:
        if isinstance(e, OSError) and e.errno != errno.ELOOP:
            raise
        raise Unreadable("a symbolic link that loops (too many levels of symbolic links); ruler "
                         "reads regular files only", path=path) from None


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
    (:func:`open_bounded`): :func:`read_pieces` joined. In pieces of 16 MiB, never more than
    limit + 1 in all: one read(limit + 1) would allocate the whole limit for a file of a few
    bytes."""
    return b"".join(read_pieces(path, start, 1 << 24, limit))


def read_pieces(path: str | Path, start: int = 0, piece: int = 1 << 20,
                limit: int = MAX_RUN_FILE_BYTES) -> Iterator[bytes]:
    """A regular file's bytes from ``start`` on, at most ``limit`` of them in all
    (:func:`open_bounded`; Unreadable past it), a piece at a time: a reader done with each before
    the next (a day-long journal folded) never holds its 20 MB at once."""
    with open_bounded(path, limit) as f:
        if start:
            f.seek(start)
        total = 0
        while chunk := f.read(min(piece, limit + 1 - total)):
            total += len(chunk)
            if total > limit:
                raise Unreadable(f"more than the {size_text(limit)} ruler reads", total, path)
            yield chunk


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
