"""The exit codes of what needs no server: every code in --help and the README, a results
directory that is a file, read-only or full (bad input before anything starts), status into a
closed pipe, compare on a malformed throughput.csv. The codes of a real run are
tests/integration/test_exits.py's."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
from pathlib import Path

from engine.errors import (
    EXIT_BAD_INPUT,
    EXIT_CODES,
    EXIT_OK,
)
from tests.cli import closed_pipe_run, no_traceback, ruler, tmpfs
from tests.paths import FIXTURES, REPO

FINISHED = FIXTURES / "journals" / "finished"

# A campaign that starts nothing: the results-directory checks come before any server.
INERT = """\
name: exits
server: llamacpp
runtime: process
process:
  command: ["/bin/false"]
control:
  model: /nonexistent/model.gguf
  args:
    -m: ${model}
windows:
  - name: w
    axis: context 4096
    change: {args: {-c: 4096}}
sessions:
  s1: [w]
workload:
  classes:
    prose: {prompts: ["Hi."]}
  concurrency: [1]
  reps: 1
quality: {enabled: false}
"""


def test_help_and_readme_list_every_exit_code() -> None:
    out = ruler("--help")
    assert out.returncode == 0
    for code, said in EXIT_CODES.items():
        assert f"  {code}  {said}" in out.stdout
    readme = (REPO / "README.md").read_text()
    line = next(x for x in readme.splitlines() if "Exit codes:" in x)
    para = readme[readme.index(line):].split("\n\n")[0]
    assert re.findall(r"\b(\d) (?:the|ruler|bad|stopped)", para) == [str(c) for c in EXIT_CODES]


def test_results_dir_that_is_a_file_is_bad_input(tmp_path: Path) -> None:
    spec = tmp_path / "c.yaml"
    spec.write_text(INERT)
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory\n")
    out = ruler("run", str(spec), "--headless", "--results-dir", str(a_file))
    no_traceback(out)
    assert out.returncode == EXIT_BAD_INPUT
    assert out.stderr.strip() == f"--results-dir {a_file}: not a directory (it is a file)"

    under = a_file / "results"
    out = ruler("run", str(spec), "--headless", "--results-dir", str(under))
    no_traceback(out)
    assert out.returncode == EXIT_BAD_INPUT
    assert out.stderr.strip() == f"--results-dir {under}: {a_file} is a file, not a directory"
    assert a_file.read_text() == "not a directory\n"


def test_results_dir_read_only_or_full_is_bad_input(tmp_path: Path) -> None:
    spec = tmp_path / "c.yaml"
    spec.write_text(INERT)
    with tmpfs(tmp_path / "ro", "ro,size=64k") as ro:
        out = ruler("run", str(spec), "--headless", "--results-dir", str(ro))
        no_traceback(out)
        assert out.returncode == EXIT_BAD_INPUT
        assert out.stderr.strip() == f"--results-dir {ro}: cannot write there (Read-only file system)"
    with tmpfs(tmp_path / "full", "size=16k") as full:
        with contextlib.suppress(OSError):
            (full / "filler").write_bytes(b"\0" * 65536)  # fills it: ENOSPC on the rest
        out = ruler("run", str(spec), "--headless", "--results-dir", str(full))
        no_traceback(out)
        assert out.returncode == EXIT_BAD_INPUT
        assert out.stderr.strip() == (f"--results-dir {full}: cannot write there "
                                      "(No space left on device)")
        assert sorted(p.name for p in full.iterdir()) == ["filler"]  # no half-made run directory


def test_status_into_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    run = shutil.copytree(FINISHED, tmp_path / "run")  # status leaves an engine.lock behind
    for args in (["status", str(run)], ["status", str(run), "--json"]):
        out = closed_pipe_run(*args)
        assert out.stderr == ""
        assert out.returncode == EXIT_OK


def test_compare_on_a_malformed_throughput_csv_is_bad_input(tmp_path: Path) -> None:
    good, bad = tmp_path / "good", tmp_path / "bad"
    shutil.copytree(FINISHED, good)
    shutil.copytree(FINISHED, bad)
    header = ("session,window,axis,class,concurrency,reps,agg_tok_s,per_user_tok_s,ttft_ms,"
              "decode_tok_s,accept_len,accept_rate,accept_source,spread,status,attempts,reason,"
              "source,ruler_check\n")
    row = "s1,control,control,prose,1,1,10.0,10.0,50,10.0,,,,0.01,ok,1,,,\n"
    (good / "throughput.csv").write_text(header + row)
    path = bad / "throughput.csv"
    cases = {
        # A column gone (a hand-edited or foreign file): the KeyError of old.
        header.replace("concurrency,", "") + row.replace(",1,1,", ",1,", 1):
            f"{path}:2: no 'concurrency' column",
        header + row + "s1,ctx,ctx,prose,four,1,10.0,10.0,50,10.0,,,,0.01,ok,1,,,\n":
            f"{path}:3: cannot read this row (invalid literal for int() with base 10: 'four')",
        header + "s1,control,control,prose,1,1,10.0,10.0,50,10.0,,,,0.01,ok,1,,reps/x.jsonl,\n":
            f"{path}:2: a receipt it names cannot be read (No such file or directory: "
            f"{bad / 'reps' / 'x.jsonl'})",
    }
    for text, said in cases.items():
        path.write_text(text)
        out = ruler("compare", str(good), str(bad))
        no_traceback(out)
        assert out.returncode == EXIT_BAD_INPUT
        assert out.stderr.strip() == said
    out = ruler("compare", str(good), str(good))
    assert out.returncode == EXIT_OK, out.stderr


def test_a_journal_replaced_by_a_looping_symlink_is_bad_input_naming_it(tmp_path: Path) -> None:
    """Issue 49's repeat: a run's journal made a symbolic link to itself gave export and compare a
    traceback (OSError, too many levels of symbolic links); each says which file, exit 2."""
    run, other = tmp_path / "run", tmp_path / "other"
    shutil.copytree(FIXTURES / "runs" / "demo-smollm2", run)
    shutil.copytree(FIXTURES / "runs" / "demo-smollm2", other)
    journal = run / "journal.jsonl"
    journal.unlink()
    (run / "state.snapshot.json").unlink(missing_ok=True)
    journal.symlink_to("journal.jsonl")
    for args in (("export", str(run), "--format", "json"), ("compare", str(other), str(run))):
        out = ruler(*args)
        no_traceback(out)
        assert out.returncode == EXIT_BAD_INPUT, out.stderr
        assert f"{journal}: a symbolic link that loops" in out.stderr, out.stderr


def test_a_capacity_event_with_no_answer_ruler_knows_is_a_row_that_says_so(tmp_path: Path) -> None:
    """Issue 49's repeat: a hand-edited capacity event (a search answer no ruler writes, a probe's
    load not a number) made `ruler report` a traceback; the report is written, its row says why."""
    run = tmp_path / "run"
    shutil.copytree(FINISHED, run)
    (run / "state.snapshot.json").unlink(missing_ok=True)
    journal = run / "journal.jsonl"
    last = json.loads(journal.read_text().splitlines()[-1])
    event = {"seq": last["seq"] + 1, "ts": last["ts"], "kind": "capacity", "session": "s1",
             "window": "control", "class": "prose", "over": "concurrency", "criteria": "x",
             "found": "bogus", "lo": 1, "hi": 4, "mixed": [],
             "probes": [{"load": "x", "probe": "held", "held": 1, "reps": 1}]}
    with journal.open("a") as f:
        f.write(json.dumps(event) + "\n")
    out = ruler("report", str(run))
    no_traceback(out)
    assert out.returncode == 0, out.stderr
    text = (run / "report.md").read_text()
    assert "unreadable: the journal's capacity event holds no search answer" in text
    assert "a probe this ruler cannot read" in text
