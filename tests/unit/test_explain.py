"""What a campaign author reads: ``ruler --help``."""

from __future__ import annotations

from engine.commands.cli import build_parser


def test_help_lists_no_hidden_command() -> None:
    """`engine` (the detached engine's entry point) was listed as "engine    ==SUPPRESS==": argparse
    lists every subcommand given a help text, SUPPRESS included."""
    text = build_parser().format_help()
    assert "SUPPRESS" not in text
    assert "engine" not in [line.split()[0] for line in text.splitlines() if line.startswith("    ")]
    for command in ("validate", "run", "attach"):
        assert f"\n    {command} " in text, command
