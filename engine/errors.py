"""The engine's error types and the exit codes they map to (one place; README's "Exit codes")."""

from __future__ import annotations

EXIT_OK = 0  # the campaign finished and measured something (rejected windows are results)
EXIT_ENGINE = 1  # ruler itself failed, or could not go on (its results could no longer be written)
EXIT_BAD_INPUT = 2  # the input is wrong: the message names the problem and where
EXIT_STOPPED = 3  # the operator stopped the run (ctl abort, SIGINT, SIGTERM); --resume continues it
EXIT_NOTHING_MEASURED = 4  # finished without a measured row: all windows rejected or failed, or all requests

EXIT_CODES = {
    EXIT_OK: "the campaign finished and measured at least one row (rejected windows are results)",
    EXIT_ENGINE: "ruler itself failed, or its results could no longer be written",
    EXIT_BAD_INPUT: "bad input: a campaign, argument or directory; the message says which",
    EXIT_STOPPED: "stopped by the operator (ctl abort, Ctrl-C, SIGTERM); ruler run --resume goes on",
    EXIT_NOTHING_MEASURED: "the campaign finished but measured nothing: every window was rejected or "
                           "failed, or every request failed",
}


class EngineError(RuntimeError):
    """Ruler itself failed (not the server under test): exit code 1."""


class BadInput(Exception):
    """The operator's input is wrong (campaign, run directory, arguments): exit code 2."""


class WindowFailed(RuntimeError):
    """The server died or stopped answering mid-window: the window fails, the campaign goes on."""
