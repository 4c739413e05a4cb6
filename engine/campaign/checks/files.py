"""A file a campaign names: it is there and, where its reader is given, reads."""

from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.campaign.yamlmarks import Issue, describe


def check_file(where: tuple[Any, ...], file: object, base_dir: Path, what: str,
               read: Callable[[Path], object] | None = None) -> list[Issue]:
    """The file exists and, with `read` (a reader raising ValueError), reads; else one issue."""
    if not isinstance(file, str) or "${" in file:  # ${...} resolves only at run time
        return []
    try:
        resolved = (base_dir / file).resolve()
        # One that is there but no file (a FIFO, a device) is its reader's to name.
        found = resolved.exists() if read is not None else resolved.is_file()
    except (OSError, ValueError) as exc:  # a NUL byte, a name longer than the system allows
        reason = getattr(exc, "strerror", None) or str(exc)
        return [(where, False, f"{what} {describe(file)} cannot be a path ({reason})")]
    if not found:
        return [(where, False, f"{what} not found: {resolved}")]
    try:
        if read is not None:
            read(resolved)
    except ValueError as exc:  # DataFileError: it names the file and the line
        return [(where, False, f"{what} {exc}")]
    return []
