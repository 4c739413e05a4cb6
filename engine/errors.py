"""The engine's error types and the exit codes they map to (one place; README's "Exit codes")."""

from __future__ import annotations

EXIT_OK = 0  # the campaign finished (rejected windows are results)
EXIT_ENGINE = 1  # ruler itself failed
EXIT_BAD_INPUT = 2  # the input is wrong: the message names the problem and where


class EngineError(RuntimeError):
    """Ruler itself failed (not the server under test): exit code 1."""


class BadInput(Exception):
    """The operator's input is wrong (campaign, run directory, arguments): exit code 2."""


class WindowFailed(RuntimeError):
    """The server died or stopped answering mid-window: the window fails, the campaign goes on."""
