"""What a command prints of a name it was given (a file, a run directory) or a message quoting a
file: shown on the terminal, never acted on; a CR or an escape in it forges no line and retitles
no pane, and the message keeps its own lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.commands.cli import main
from engine.errors import BadInput
from engine.sanitize import terminal, terminal_lines

NAME = "/nonexistent/x\rforged\x1b]0;TITLE\x07\x1b[2J"


@pytest.mark.parametrize("command", [["validate", NAME], ["facts", "--server", "llamacpp", NAME],
                                     ["run", "--dry-run", NAME], ["status", NAME], ["report", NAME],
                                     ["compare", NAME, "/nonexistent"]])
def test_a_name_with_escapes_is_printed_as_text(command: list[str],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(command) == 2
    out = capsys.readouterr()
    assert terminal(NAME) in out.err
    assert "\r" not in out.out + out.err and "\x1b" not in out.out + out.err


def test_a_message_keeps_its_lines_and_shows_its_carriage_returns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert terminal_lines("one\rforged\ntwo\x1b[2J") == "one\\x0dforged\ntwo\\x1b[2J"

    def bad(run_dir: Path, as_json: bool) -> None:
        raise BadInput("campaign.yaml:3: one\rforged\nsecond line")

    (tmp_path / "journal.jsonl").touch()
    monkeypatch.setattr("engine.commands.status.print_status", bad)
    assert main(["status", str(tmp_path)]) == 2
    assert capsys.readouterr().err == "campaign.yaml:3: one\\x0dforged\nsecond line\n"
