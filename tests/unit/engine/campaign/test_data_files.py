"""Data files of any shape (engine.files.read_bounded and the sources' readers): a FIFO
with no writer, a device, a sparse file past the limit, JSON nested deep, a number of thousands of
digits, a CSV field past csv's limit, binary and bad UTF-8. Every one reads, or is a DataFileError
at its file (and line, where the file has one) that `ruler validate` and `ruler run --dry-run`
print with exit 2: never a hang, a traceback or the whole file in memory."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.campaign.load import SpecError, load_campaign
from engine.campaign.prompts import MAX_DATA_BYTES, RECEIPT_KEYS, DataFileError, read_prompts
from engine.campaign.sources import SOURCES
from engine.campaign.sources.conversations import ConversationsSpec
from engine.campaign.sources.dataset import DatasetSpec
from engine.campaign.sources.trace import TraceSpec
from engine.commands.cli import main
from engine.commands.dryrun import cmd_dry_run
from engine.commands.launch import prepare
from engine.commands.validate import cmd_validate
from tests.campaigns import campaign

# Every source that reads a file, as a class's spec naming ``file``.
READERS: dict[str, Any] = {
    "dataset": lambda f: {"dataset": {"file": f}},
    "dataset-jsonl": lambda f: {"dataset": {"file": f, "format": "jsonl"}},
    "trace": lambda f: {"trace": {"file": f}},
    "conversations": lambda f: {"conversations": {"file": f}},
    "prompts": lambda f: {"file": f},
}


def read(kind: str, path: Path) -> object:
    """The items the source of ``kind`` reads from ``path``."""
    spec = READERS[kind](str(path))
    key = next(iter(spec))
    model = {"dataset": DatasetSpec, "trace": TraceSpec, "conversations": ConversationsSpec}.get(key)
    return SOURCES[key].items(model(**spec[key]) if model else spec[key], path)


def write_campaign(tmp_path: Path, cls: dict[str, Any]) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(campaign("c", {}, {"s": []}, classes={"data": cls}), sort_keys=False))
    return path


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    """A FIFO nobody writes to: reading it the plain way blocks forever."""
    path = tmp_path / "fifo.jsonl"
    os.mkfifo(path)
    yield path


@pytest.mark.timeout(60)  # a reader that blocks on the FIFO fails here, not the whole session
@pytest.mark.parametrize("kind", sorted(READERS))
def test_a_fifo_with_no_writer_is_refused_at_once(kind: str, fifo: Path) -> None:
    with pytest.raises(DataFileError, match=rf"{fifo}: not a regular file \(a FIFO\)"):
        read(kind, fifo)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", sorted(READERS))
def test_dev_zero_is_refused_without_reading_it(kind: str) -> None:
    with pytest.raises(DataFileError, match=r"/dev/zero: not a regular file \(a character device\)"):
        read(kind, Path("/dev/zero"))


@pytest.mark.parametrize("kind", sorted(READERS))
def test_a_sparse_file_past_the_limit_is_refused_by_its_size(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "huge.jsonl"
    with path.open("wb") as f:
        f.truncate(MAX_DATA_BYTES + 1)  # sparse: no disk, no memory, until someone reads it
    with pytest.raises(DataFileError, match=rf"{path}: 1 GiB \({MAX_DATA_BYTES + 1} bytes\), more "
                                             r"than the 1 GiB ruler reads"):
        read(kind, path)


@pytest.mark.timeout(60)
def test_the_dry_run_refuses_a_variable_fifo_with_exit_2(
        tmp_path: Path, fifo: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A ${...} path only the run resolves: the run's own read, not validate's, meets the FIFO."""
    path = write_campaign(tmp_path, {"dataset": {"file": "${V}"}})
    monkeypatch.setenv("V", str(fifo))
    assert cmd_dry_run(str(path), "process") == 2
    assert capsys.readouterr().err == (
        f"{path}: data file {fifo}: not a regular file (a FIFO); ruler reads files only\n")


@pytest.mark.timeout(60)
def test_validate_refuses_a_fifo_by_what_it_is_not_as_missing(
        tmp_path: Path, fifo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_campaign(tmp_path, {"trace": {"file": fifo.name}})
    assert cmd_validate(str(path)) == 2
    assert f"trace file {fifo}: not a regular file (a FIFO)" in capsys.readouterr().err


@pytest.mark.timeout(60)
def test_a_campaign_file_that_is_a_fifo_is_refused(fifo: Path) -> None:
    with pytest.raises(SpecError, match=r":1:1: campaign file is not a regular file \(a FIFO\)"):
        load_campaign(fifo)


# The quality checks' files, read by the quality phase mid-run: checked before a server boots.
QUALITY_FILES: dict[str, Any] = {
    "greedy": lambda f: {"enabled": True, "greedy": {"file": f}},
    "kl": lambda f: {"enabled": True, "kl": {"file": f}},
    "oracle": lambda f: {"enabled": True, "kl": {"oracle": {"receipt": f}}},
}


def write_quality(tmp_path: Path, quality: dict[str, Any]) -> Path:
    path = tmp_path / "q.yaml"
    path.write_text(yaml.safe_dump(campaign("q", {}, {"s": []}, quality=quality), sort_keys=False))
    return path


@pytest.mark.timeout(60)
@pytest.mark.parametrize("key", sorted(QUALITY_FILES))
def test_a_variable_quality_file_that_is_a_fifo_is_refused_before_anything_starts(
        tmp_path: Path, fifo: Path, key: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Validate cannot resolve ${V}; the dry run and the run read it before a directory or a boot."""
    path = write_quality(tmp_path, QUALITY_FILES[key]("${V}"))
    monkeypatch.setenv("V", str(fifo))
    assert cmd_dry_run(str(path), "process") == 2
    assert f"{fifo}: not a regular file (a FIFO); ruler reads files only" in capsys.readouterr().err
    assert main(["run", str(path), "--headless", "--results-dir", str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err
    assert f"{path}: " in err and f"{fifo}: not a regular file (a FIFO)" in err, err
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(("text", "line", "problem"), [
    ('{"session": "s1",\n "window": ', 2, r"not JSON \(Expecting value"),  # cut short
    ("[]", None, "not an oracle receipt ruler wrote: a list, not an object"),
    ('{"session": "s1"}', None, "not an oracle receipt ruler wrote: it has no window, top_k, .*kl_scores"),
    (json.dumps(dict.fromkeys(RECEIPT_KEYS, []) | {"kl_items": 3}), None, "kl_items must be a list"),
    (json.dumps(dict.fromkeys(RECEIPT_KEYS, []) | {"kl_items": [{"name": "a"}]}), None,
     r"kl_items\[0\] must be"),
])
def test_validate_reads_an_oracle_receipt_as_the_run_will(
        tmp_path: Path, text: str, line: int | None, problem: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """It was only checked to exist: a damaged one failed the quality phase mid-run."""
    receipt = tmp_path / "oracle.json"
    receipt.write_text(text)
    path = write_quality(tmp_path, QUALITY_FILES["oracle"](receipt.name))
    assert cmd_validate(str(path)) == 2
    err = capsys.readouterr().err
    where = f"oracle receipt {receipt}:{line}: " if line else f"oracle receipt {receipt}: "
    assert where in err and re.search(problem, err), err


def deep(n: int) -> str:
    return "[" * n + "]" * n


@pytest.mark.parametrize(("kind", "name", "text", "line", "problem"), [
    ("conversations", "c.json", "[\n" + deep(200_000) + "]", 2, "nested too deeply"),
    ("dataset", "d.json", "[\n\n" + deep(200_000) + "]", 3, "nested too deeply"),
    ("prompts", "p.json", deep(200_000), None, "nested too deeply"),
    ("conversations", "c.jsonl", "{}\n" + deep(200_000), 2, "nested too deeply"),
    ("trace", "t.csv", "time,input_length,output_length\n0,1,1\n1," + "9" * 131073 + ",1\n", 3,
     "field larger than field limit"),
    ("trace", "t.csv", "time,input_length,output_length\n0,1\x00,1\n", 2, "must be a whole number"),
    ("dataset", "d.jsonl", '{"prompt": "a"}\n{"prompt": "b", "output_tokens": ' + "7" * 5000 + "}\n", 2,
     "a number of more than 4300 digits"),
    ("conversations", "c.json", '[{"messages": [' + "1" * 5000 + "]}]", 1, "more than 4300 digits"),
    ("trace", "t.jsonl", '{"time": 0, "input_length": ' + "1" * 5000 + ', "output_length": 1}', 1,
     "more than 4300 digits"),
    ("dataset-jsonl", "d.jsonl", '{"prompt": "a"}\n{"messages": [{"role": "user", "content": " "}]}\n',
     2, r"messages\[0\]: content must be non-empty text"),
], ids=["deep-conversations", "deep-sharegpt", "deep-prompts", "deep-jsonl", "csv-field", "csv-nul",
        "digits-jsonl", "digits-conversations", "digits-trace", "empty-content"])
def test_a_file_python_cannot_parse_is_an_error_at_its_line(
        tmp_path: Path, kind: str, name: str, text: str, line: int | None, problem: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(DataFileError) as err:
        read(kind, path)
    where = f"{path}:{line}: " if line else f"{path}: "
    assert str(err.value).startswith(where), err.value
    assert re.search(problem, str(err.value)), err.value


# Property: any bytes, under any name a reader keys its format on, read or are a DataFileError that
# names the file. Exceptions of any other kind (RecursionError, csv.Error, ValueError from int(),
# KeyError, TypeError) fail the test with their traceback.
CONTENT = st.one_of(
    st.binary(max_size=400),
    st.text(max_size=400).map(str.encode),
    st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                 lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                     st.sampled_from(["prompt", "messages", "role", "content", "conversations", "from",
                                      "value", "time", "timestamp", "input_length", "output_length",
                                      "hash_ids", "output_tokens", "category"]), inner, max_size=5),
                 max_leaves=20).map(lambda v: json.dumps(v).encode()),
    st.integers(1, 50_000).map(lambda n: ("[" * n + "]" * n).encode()),
    st.integers(4000, 6000).map(lambda n: b'{"prompt": "a", "output_tokens": ' + b"9" * n + b"}"),
    st.integers(0, 3).map(lambda k: b"time,input_length,output_length\n0,1," + b"x" * (65536 << k) + b"\n"),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=CONTENT, kind=st.sampled_from(sorted(READERS)),
       suffix=st.sampled_from([".json", ".jsonl", ".csv", ".txt", ".yaml"]),
       lines=st.integers(0, 3))
def test_any_bytes_read_or_are_an_error_naming_the_file(
        tmp_path: Path, content: bytes, kind: str, suffix: str, lines: int) -> None:
    path = tmp_path / f"data{suffix}"
    path.write_bytes(b"\n" * lines + content)
    try:
        read(kind, path)
    except DataFileError as exc:
        assert str(exc).startswith(f"{path}"), exc


@pytest.mark.timeout(60)
@pytest.mark.parametrize("special", ["fifo", "/dev/zero", "/dev/null", "directory", "sparse"])
def test_a_special_file_in_any_reader_of_validate_is_exit_2(
        tmp_path: Path, fifo: Path, special: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The property's other half: what is not a file of bounded size never blocks or fills memory."""
    if special == "sparse":
        target = tmp_path / "sparse.json"
        with target.open("wb") as f:
            f.truncate(50 << 30)
    else:
        target = {"fifo": fifo, "directory": tmp_path}.get(special, Path(special))
    for kind in sorted(READERS):
        path = write_campaign(tmp_path, READERS[kind](str(target)))
        assert cmd_validate(str(path)) == 2, kind
        err = capsys.readouterr().err
        assert str(target) in err and "Traceback" not in err, err


def test_read_prompts_reads_a_plain_file_as_before(tmp_path: Path) -> None:
    path = tmp_path / "p.txt"
    path.write_text("one\n\ntwo\n")
    assert read_prompts(path) == ["one", "two"]


@pytest.mark.parametrize(("name", "text", "problem"), [
    ("prompts.json", '{"data": ["a", ', "not JSON"),
    ("prompts.json", '["a"]', "not what ruler froze"),
    ("items.json", '{"data": [{"messages": ', "not JSON"),
    ("items.json", '{"data": 3}', "not what ruler froze"),
    ("engine.json", '{"run_id": ', "not JSON"),
])
def test_a_frozen_file_damaged_before_a_resume_is_exit_2_naming_it(
        tmp_path: Path, name: str, text: str, problem: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The engine read them with json.loads: a run directory's frozen items or engine.json cut
    short (a full disk, an editor) ended `ruler run --resume` in a traceback."""
    (tmp_path / "d.jsonl").write_text('{"prompt": "a"}\n')
    path = write_campaign(tmp_path, {"dataset": {"file": "d.jsonl"}})
    run_dir = prepare(str(path), str(tmp_path / "results"), "process")
    (run_dir / name).write_text(text)
    assert main(["engine", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert f"{run_dir / name}: " in err and problem in err and "Traceback" not in err, err
