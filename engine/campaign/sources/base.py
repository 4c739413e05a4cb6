"""What every class source is: the key that selects it in a class, the file it reads, and the
items it gives (engine.campaign.sources.item). One module per source; the registry is the
package's ``SOURCES``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Annotated, Any, ClassVar, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, Strict

from engine.campaign.prompts import DataFileError, read_text
from engine.campaign.sources.item import Item, Message
from engine.campaign.yamlmarks import describe


class Source(ABC):
    key: ClassVar[str]  # the class's key that selects this source (exactly one per class)
    what: ClassVar[str]  # its file, as an error names it
    # Plain prompts, frozen into the run's prompts.json as strings; any other source's items go
    # to items.json whole.
    plain: ClassVar[bool] = False

    def file(self, spec: Any) -> str | None:
        """The data file ``spec`` names (relative to the campaign file, ${...} unresolved), if any."""
        return None

    # Where that file sits under the class's key (the campaign file's line an error points at).
    file_at: ClassVar[tuple[str, ...]] = ("file",)

    @abstractmethod
    def items(self, spec: Any, path: Path | None) -> list[Item]:
        """The class's items; ``path`` is :meth:`file` resolved. A bad record raises an error
        (a ValueError) that names ``path:line``."""

    def check(self, spec: Any, path: Path | None) -> None:
        """What ``ruler validate`` asks of the class's file: that it gives items, else the error
        :meth:`items` would raise. A source whose items cost more than reading its file (a
        trace's synthesised prompts) checks the file alone."""
        self.items(spec, path)

    def describe(self, spec: Any, path: Path | None) -> list[str]:
        """What the class becomes, in lines for ``ruler validate --explain``: none by default."""
        return []


class Frozen(BaseModel):
    """A source's spec: frozen, and a key it does not know is an error (a typo, not a default)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


MAX_TOKENS = 1 << 20  # an output or prompt length past this is a typo, not data
Text = Annotated[str, Strict(), Field(min_length=1)]
Count = Annotated[int, Strict(), Field(ge=1, le=MAX_TOKENS)]
Seed = Annotated[int, Strict(), Field(ge=-(1 << 63), lt=1 << 63)]


class Record(NamedTuple):
    """One record of a data file, as its reader found it."""

    line: int  # where it starts in the file (1-based)
    messages: list[Message]
    output_tokens: int | None  # the data's answer length, if it has one
    category: str | None  # the record's value of the class's category field


def output_length(path: Path, line: int, value: object, name: str) -> int:
    """A record's output length: a whole number of tokens, at least 1."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TOKENS:
        raise DataFileError(path, f"{name} must be a whole number of tokens from 1 to {MAX_TOKENS}, "
                                  f"got {describe(value)}", line)
    return value


def category_of(path: Path, line: int, record: dict[str, Any], field: str) -> str | None:
    value = record.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise DataFileError(path, f"{field} must be a string, got {describe(value)}", line)
    return str(value)


def reading(path: Path) -> str:
    """A data file's text; a file that cannot be read, is not UTF-8 or is empty is a DataFileError."""
    return read_text(path, DataFileError, "no records")
