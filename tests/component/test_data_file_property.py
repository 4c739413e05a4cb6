"""The data-file half of issue 39's property: a data file of any shape (a FIFO, a device, a huge
sparse file, JSON nested deep, a field wider than csv reads, binary garbage, bad UTF-8, a number of
thousands of digits), named by any source's key or any quality check's, literally or through a
${...} only the run resolves, given to `ruler validate`, `validate --explain` or `run --dry-run`
through the CLI's entry function: exit 0 for a file that reads, else exit 2 naming the file (and
its line, where the problem has one); never a traceback, never a hang, never memory past a bound.

Each command runs in a forked child under an address-space limit (tests.component.children):
never a hang, no timing asserted beyond.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.campaign.prompts import MAX_DATA_BYTES
from engine.commands.cli import main
from tests.campaigns import campaign
from tests.component.children import cli_in_child, fifo, link_to_zero, sparse


@dataclass(frozen=True)
class Shape:
    """One kind of file: how to make it at a path, and whether no reader can read it (exit 2); a
    shape some reader takes (brackets nested deep are one line of a .txt prompt file) may exit 0."""

    name: str
    make: Callable[[Path], Path]  # makes the file (or picks a device) and returns its path
    bad: bool


def _write(data: bytes) -> Callable[[Path], Path]:
    def make(path: Path) -> Path:
        path.write_bytes(data)
        return path
    return make


def _directory(path: Path) -> Path:
    path.mkdir()
    return path


def shapes() -> st.SearchStrategy[Shape]:
    deep = st.integers(2_000, 300_000).map(
        lambda n: Shape(f"deep{n}", _write(b"[" + b"[" * n + b"]" * n + b"]"), False))
    deep_object = st.integers(2_000, 300_000).map(
        lambda n: Shape(f"deepobj{n}", _write(b'{"a": ' * n + b"1" + b"}" * n), False))
    wide_csv = st.integers(131_073, 1 << 21).map(
        lambda n: Shape(f"widecsv{n}", _write(b"time,input_length,output_length\n0,1," + b"9" * n
                                              + b"\n"), False))
    wide_json = st.integers(1 << 17, 1 << 22).map(
        lambda n: Shape(f"widejson{n}", _write(b'{"prompt": "' + b"x" * n + b'"}\n'), False))
    digits = st.integers(4_301, 50_000).map(
        lambda n: Shape(f"digits{n}", _write(b'{"prompt": "a", "output_tokens": ' + b"7" * n + b"}\n"),
                        False))
    garbage = st.binary(min_size=1, max_size=2000).map(
        lambda b: Shape("garbage", _write(b"\x80" + b), True))  # 0x80 never starts UTF-8
    bad_utf8 = st.tuples(st.text(max_size=200), st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80"])).map(
        lambda t: Shape("badutf8", _write(t[0].encode() + t[1] + b"\n"), True))
    special = st.sampled_from([
        Shape("fifo", fifo, True),
        Shape("devzero", lambda _: Path("/dev/zero"), True),
        Shape("devnull", lambda _: Path("/dev/null"), True),
        Shape("devurandom", lambda _: Path("/dev/urandom"), True),
        Shape("linkzero", link_to_zero, True),
        Shape("directory", _directory, True),
        Shape("sparse50g", sparse(50 << 30), True),
        Shape("justover", sparse(MAX_DATA_BYTES + 1), True),
        Shape("empty", _write(b""), True),
        Shape("blank", _write(b" \n\n\t\n"), True),
    ])
    return st.one_of(special, deep, deep_object, wide_csv, wide_json, digits, garbage, bad_utf8)


# Where a campaign names a data file: each source's key, and each quality check's file.
WHERE: dict[str, Callable[[str], dict[str, Any]]] = {
    "dataset": lambda f: {"classes": {"d": {"dataset": {"file": f}}}},
    "dataset-jsonl": lambda f: {"classes": {"d": {"dataset": {"file": f, "format": "jsonl"}}}},
    "trace": lambda f: {"classes": {"d": {"trace": {"file": f}}}},
    "conversations": lambda f: {"classes": {"d": {"conversations": {"file": f}}}},
    "prompts": lambda f: {"classes": {"d": {"file": f}}},
    "greedy": lambda f: {"quality": {"enabled": True, "greedy": {"file": f}}},
    "kl": lambda f: {"quality": {"enabled": True, "kl": {"file": f}}},
    "oracle": lambda f: {"quality": {"enabled": True, "kl": {"oracle": {"receipt": f}}}},
}
COMMANDS = [["validate"], ["validate", "--explain"], ["run", "--dry-run", "--runtime", "process"]]


@pytest.fixture(scope="module", autouse=True)
def warm() -> None:
    """Each command once in this process on a good campaign: what it builds on first use (the
    schema's validators, the parser) is then inherited by every child rather than built by each."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.yaml"
        path.write_text(yaml.safe_dump(campaign("warm", {}, {"s": []}), sort_keys=False))
        with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), \
                contextlib.redirect_stderr(null):
            for command in COMMANDS:
                assert main([*command[:1], str(path), *command[1:]]) == 0


@pytest.mark.slow
@pytest.mark.timeout(900)
@settings(max_examples=60, deadline=None)
@given(shape=shapes(), where=st.sampled_from(sorted(WHERE)), command=st.sampled_from(COMMANDS),
       suffix=st.sampled_from([".json", ".jsonl", ".csv", ".txt", ".yaml"]), variable=st.booleans())
def test_any_data_file_is_read_or_refused_by_name_with_exit_2(
        shape: Shape, where: str, command: list[str], suffix: str, variable: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        target = shape.make(d / f"data{suffix}")
        # A ${...} path only the run resolves: validate skips it, the dry run reads it.
        named = "${RULER_DATA}" if variable else str(target)
        spec = campaign("prop", {}, {"s": []})
        named_in = WHERE[where](named)
        if "classes" in named_in:
            spec["workload"]["classes"] = named_in["classes"]
        else:
            spec["quality"] = named_in["quality"]
        path = d / "c.yaml"
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        code, said = cli_in_child([*command[:1], str(path), *command[1:]],
                                  {"RULER_DATA": str(target)}, d / "out.txt")
        # The file as named, or where its links lead (validate names the path it resolved).
        names = "|".join(re.escape(str(p)) for p in {target, target.resolve()})
    assert code is not None, f"{shape.name} in {where} hung `ruler {' '.join(command)}`"
    assert "Traceback" not in said, said[-3000:]
    skipped = variable and command[0] == "validate" and command[1:] != ["--explain"]
    if shape.bad and not skipped:
        assert code == 2, (shape.name, where, command, said[-3000:])
    assert code in (0, 2), (shape.name, where, command, said[-3000:])
    if code == 2:  # the file by name, and its line where the problem has one
        assert re.search(rf"(?:{names})(:\d+)?: \S", said), said[-3000:]
