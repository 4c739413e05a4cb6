"""Prompt files: the text of a class's, the greedy prompts' or the KL texts' file, one prompt per
line (.txt), a list (.yaml, .json) or a JSON string per line (.jsonl); and UTF-8 decoding that says
where a byte is not text, which the campaign file shares."""

import bisect
import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from engine.campaign.yamlmarks import MarkedDoc, describe, load_marked, yaml_problem
from engine.files import Unreadable, open_bounded, read_bounded, size_text


class NotUtf8(ValueError):
    def __init__(self, line: int, col: int, byte: int) -> None:
        super().__init__(f"not UTF-8 text (byte 0x{byte:02x} at line {line}, column {col})")
        self.line, self.col, self.byte = line, col, byte


def decode_text(data: bytes) -> str:
    """UTF-8 bytes as text with universal newlines, as `Path.read_text` gives; NotUtf8 says where not."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        head = data[:exc.start]
        line_start = head.rfind(b"\n") + 1
        col = len(head[line_start:].decode("utf-8", errors="replace")) + 1
        raise NotUtf8(head.count(b"\n") + 1, col, data[exc.start]) from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


class DataFileError(ValueError):
    """A data file (prompts, a dataset, a trace) ruler cannot send requests from; reads as
    `path[:line]: problem`."""

    what = "data file"  # what a message names the file as

    def __init__(self, path: Path, problem: str, line: int | None = None) -> None:
        super().__init__(f"{path}{f':{line}' if line else ''}: {problem}")
        self.path, self.problem, self.line = path, problem, line


class PromptFileError(DataFileError):
    """A prompt file ruler cannot send prompts from."""

    what = "prompt file"


class OracleReceiptError(DataFileError):
    """A stored oracle receipt (quality.kl.oracle.receipt) the KL check cannot read."""

    what = "oracle receipt"


# A data file (prompts, a dataset, a trace, conversations) is read whole and parsed in memory, at
# several times its size: past this it is a mistake (a sparse or device file) or needs splitting.
# ShareGPT's whole dataset is 642 MB.
MAX_DATA_BYTES = 1 << 30
def text_lines(path: Path, error: type[DataFileError], nothing: str) -> Iterator[tuple[int, str]]:
    """A data file's lines one at a time, each with its number, as :func:`read_text`'s text splits
    them (universal newlines) and with its errors, a byte that is not UTF-8 at its line: a reader
    that keeps less than the file (a trace's check) never holds it whole."""
    text_seen = False
    try:
        with open_bounded(path, MAX_DATA_BYTES) as f:
            n = total = 0
            for raw in f:  # a line at a time, however long: the size bound holds it
                total += len(raw)
                if total > MAX_DATA_BYTES:
                    raise Unreadable(f"more than the {size_text(MAX_DATA_BYTES)} ruler reads", total)
                body = raw.removesuffix(b"\n").removesuffix(b"\r")
                for piece in body.split(b"\r"):  # a lone CR ends a line, as in read_text
                    n += 1
                    try:
                        line = piece.decode("utf-8")
                    except UnicodeDecodeError as exc:
                        col = len(piece[:exc.start].decode("utf-8", errors="replace")) + 1
                        raise error(path, f"not UTF-8 text (byte 0x{piece[exc.start]:02x} at column "
                                          f"{col})", n) from None
                    text_seen = text_seen or bool(line.strip())
                    yield n, line
    except OSError as exc:
        raise error(path, f"cannot read ({exc.strerror or exc})") from None
    except Unreadable as exc:
        raise error(path, str(exc)) from None
    if not text_seen:
        raise error(path, f"{nothing}: the file is empty")


def read_text(path: Path, error: type[DataFileError], nothing: str) -> str:
    """A data file's text; one that cannot be read, is not a regular file, is larger than
    :data:`MAX_DATA_BYTES`, is not UTF-8 or is empty raises ``error`` (``nothing``: what an empty
    file gives none of)."""
    try:
        data = read_bounded(path, MAX_DATA_BYTES)
    except OSError as exc:
        raise error(path, f"cannot read ({exc.strerror or exc})") from None
    except Unreadable as exc:
        raise error(path, str(exc)) from None
    try:
        text = decode_text(data)
    except NotUtf8 as exc:
        raise error(path, f"not UTF-8 text (byte 0x{exc.byte:02x} at column {exc.col})",
                    exc.line) from None
    if not text.strip():
        raise error(path, f"{nothing}: the file is empty")
    return text


@contextmanager
def json_errors(path: Path, error: type[DataFileError], at: int | None,
                first: int = 1) -> Iterator[None]:
    """Turn what decoding JSON raises into ``error`` at a line of ``path``: ``at`` for what has no
    line of its own, ``first`` the file's line of the decoded text's first line."""
    try:
        yield
    except json.JSONDecodeError as exc:
        raise error(path, f"not JSON ({exc.msg}, column {exc.colno})", first - 1 + exc.lineno) from None
    except RecursionError:
        raise error(path, "not JSON ruler reads (nested too deeply)", at) from None
    except ValueError:  # Python converts integers of at most sys.get_int_max_str_digits() digits
        raise error(path, f"not JSON ruler reads (a number of more than {sys.get_int_max_str_digits()} "
                          "digits)", at) from None


def json_line(path: Path, n: int, line: str, error: type[DataFileError]) -> Any:
    """Line ``n`` of a JSONL file, decoded; ``error`` at that line if it is not JSON."""
    with json_errors(path, error, n, n):
        return json.loads(line)


def json_lines(path: Path, text: str, error: type[DataFileError]) -> list[tuple[int, Any]]:
    """Every value of a JSONL file's text, each with its line (blank lines skipped)."""
    return list(iter_json_lines(path, text, error))


def iter_json_lines(path: Path, text: str, error: type[DataFileError]) -> Iterator[tuple[int, Any]]:
    """:func:`json_lines` one at a time: a reader that keeps less than the decoded values (a
    trace's requests) never holds them all."""
    start, n = 0, 0
    while start <= len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        n += 1
        line = text[start:end]
        if line.strip():
            yield n, json_line(path, n, line, error)
        start = end + 1


def json_elements(path: Path, text: str, expected: str) -> list[tuple[int, Any]]:
    """The elements of the JSON list ``text``, each with its first line: decoded one at a time, so
    an element's line is known (``json.loads`` of the whole list would tell none). Not a list is a
    DataFileError saying ``expected``; an empty list gives none."""
    decoder = json.JSONDecoder()
    starts = [0, *(m.end() for m in re.finditer("\n", text))]

    def line_of(pos: int) -> int:
        return bisect.bisect_right(starts, pos)

    def skip(pos: int) -> int:
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        return pos

    pos = skip(0)
    if not text.startswith("[", pos):
        raise DataFileError(path, expected, line_of(pos))
    out: list[tuple[int, Any]] = []
    pos = skip(pos + 1)
    while not text.startswith("]", pos):
        with json_errors(path, DataFileError, line_of(pos)):
            value, end = decoder.raw_decode(text, pos)
        out.append((line_of(pos), value))
        pos = skip(end)
        if text.startswith(",", pos):
            pos = skip(pos + 1)
        elif not text.startswith("]", pos):
            raise DataFileError(path, "not JSON (expected ',' or ']' after an element)", line_of(pos))
    if text[skip(pos + 1):].strip():
        raise DataFileError(path, "not JSON (text after the list)", line_of(skip(pos + 1)))
    return out


def read_prompts(path: Path) -> list[str]:
    """.txt (or anything else): non-empty lines; .yaml/.yml/.json: a list of strings;
    .jsonl: one JSON string or {"prompt": ...} per non-empty line.

    A file that gives no prompt, an empty prompt or anything but UTF-8 text is a PromptFileError:
    sending nothing would measure nothing and still print rows.
    """
    text = read_text(path, PromptFileError, "no prompts")
    suffix = path.suffix.lower()
    lines = list(enumerate(text.split("\n"), 1))
    found: list[tuple[int | None, str]]  # a prompt's line, where the format tells it
    if suffix == ".jsonl":
        found = [(n, _jsonl_prompt(path, n, line)) for n, line in lines if line.strip()]
    elif suffix in (".yaml", ".yml", ".json"):
        found = _listed_prompts(path, text, suffix == ".json")
    else:
        found = [(n, line) for n, line in lines if line.strip()]
    if not found:
        raise PromptFileError(path, "no prompts")
    for n, prompt in found:
        if not prompt.strip():
            raise PromptFileError(path, "an empty prompt", n)
    return [prompt for _, prompt in found]


def _listed_prompts(path: Path, text: str, is_json: bool) -> list[tuple[int | None, str]]:
    """A JSON or YAML list of strings, with the line of each where the parser keeps it."""
    doc: MarkedDoc | None = None
    try:
        if is_json:
            with json_errors(path, PromptFileError, None):
                data = json.loads(text)
        else:
            doc = load_marked(text)  # the campaign's limits: no alias bomb in a prompt file either
            data = doc.data
    except yaml.YAMLError as exc:
        problem = yaml_problem(str(path), exc)
        raise PromptFileError(path, problem.message, problem.line) from None
    except RecursionError:
        raise PromptFileError(path, "not a list of strings (nested too deeply)") from None
    if not isinstance(data, list):
        raise PromptFileError(path, f"expected a list of strings, got {describe(data)}")
    found: list[tuple[int | None, str]] = []
    for i, item in enumerate(data):
        line = doc.locate((i,)).line if doc else None
        if not isinstance(item, str):
            raise PromptFileError(path, f"item {i + 1} is {describe(item)}, not a string", line)
        found.append((line, item))
    return found


def _jsonl_prompt(path: Path, n: int, line: str) -> str:
    item = json_line(path, n, line, PromptFileError)
    if isinstance(item, dict):
        item = item.get("prompt")
    if not isinstance(item, str):
        raise PromptFileError(path, "expected a JSON string or {\"prompt\": ...}", n)
    return item


# What the KL check reads of a stored oracle receipt (engine.quality.reference.Reference's fields
# that have no default), and the lists among them.
RECEIPT_KEYS = ("session", "window", "top_k", "greedy", "items", "scores", "repeat", "kl_items",
                "kl_scores")
_RECEIPT_LISTS = ("greedy", "items", "scores", "repeat", "kl_items", "kl_scores")
_ITEM_LISTS = ("prompt_ids", "cont_ids", "positions")


def read_receipt(path: Path) -> dict[str, Any]:
    """A stored oracle receipt (a reference.json ruler wrote), read through the same checked opener
    as every data file and checked for what the KL check takes from it, before a server boots: an
    OracleReceiptError naming the file (and line) otherwise."""
    text = read_text(path, OracleReceiptError, "no receipt")
    with json_errors(path, OracleReceiptError, None):
        data = json.loads(text)
    if not isinstance(data, dict):
        raise OracleReceiptError(path, f"not an oracle receipt ruler wrote: {describe(data)}, not an object")
    missing = [k for k in RECEIPT_KEYS if k not in data]
    if missing:
        raise OracleReceiptError(path, f"not an oracle receipt ruler wrote: it has no {', '.join(missing)}")
    for key in _RECEIPT_LISTS:
        if not isinstance(data[key], list):
            raise OracleReceiptError(path, f"{key} must be a list, got {describe(data[key])}")
    for k, item in enumerate(data["kl_items"]):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not all(
                isinstance(item.get(f), list) for f in _ITEM_LISTS):
            raise OracleReceiptError(path, f"kl_items[{k}] must be {{\"name\": text, "
                                           + ", ".join(f'"{f}": [...]' for f in _ITEM_LISTS) + "}")
    if len(data["kl_scores"]) != len(data["kl_items"]):
        raise OracleReceiptError(path, f"{len(data['kl_scores'])} kl_scores for {len(data['kl_items'])} "
                                       "kl_items: one per item")
    return data
