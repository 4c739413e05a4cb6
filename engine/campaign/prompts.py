"""Prompt files: the text of a class's, the greedy prompts' or the KL texts' file, one prompt per
line (.txt), a list (.yaml, .json) or a JSON string per line (.jsonl); and UTF-8 decoding that says
where a byte is not text, which the campaign file shares."""

import json
from pathlib import Path
from typing import Any

import yaml

from engine.campaign.yamlmarks import MarkedDoc, describe, load_marked, yaml_problem


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


def read_text(path: Path, error: type[DataFileError], nothing: str) -> str:
    """A data file's text; one that cannot be read, is not UTF-8 or is empty raises ``error``
    (``nothing``: what an empty file gives none of)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise error(path, f"cannot read ({exc.strerror or exc})") from None
    try:
        text = decode_text(data)
    except NotUtf8 as exc:
        raise error(path, f"not UTF-8 text (byte 0x{exc.byte:02x} at column {exc.col})",
                    exc.line) from None
    if not text.strip():
        raise error(path, f"{nothing}: the file is empty")
    return text


def json_line(path: Path, n: int, line: str, error: type[DataFileError]) -> Any:
    """Line ``n`` of a JSONL file, decoded; ``error`` at that line if it is not JSON."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise error(path, f"not JSON ({exc.msg}, column {exc.colno})", n) from None
    except RecursionError:
        raise error(path, "not JSON ruler reads (nested too deeply)", n) from None


def json_lines(path: Path, text: str, error: type[DataFileError]) -> list[tuple[int, Any]]:
    """Every value of a JSONL file's text, each with its line (blank lines skipped)."""
    return [(n, json_line(path, n, line, error)) for n, line in enumerate(text.split("\n"), 1)
            if line.strip()]


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
            data = json.loads(text)
        else:
            doc = load_marked(text)  # the campaign's limits: no alias bomb in a prompt file either
            data = doc.data
    except json.JSONDecodeError as exc:
        raise PromptFileError(path, f"not JSON ({exc.msg}, column {exc.colno})", exc.lineno) from None
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
