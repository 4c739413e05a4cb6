"""The launch part of a server adapter: the command line ruler adds to the operator's.

The operator's ``control.args`` and a window's knobs say what to serve; a :class:`LaunchArgs`
adds what ruler itself needs from the process: to listen where ruler probes it
(:meth:`~LaunchArgs.listen_args`, on :attr:`~LaunchArgs.default_container_port` inside a
container), to print the boot facts the log part reads (:meth:`~LaunchArgs.log_args`), and a
warning when the command line leaves the metrics without acceptance counters
(:meth:`~LaunchArgs.metrics_requirement`).

A new server must implement :meth:`~LaunchArgs.listen_args` and set
``default_container_port``; ``metrics_flag`` when its ``/metrics`` needs a flag.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence


class LaunchArgs(ABC):
    """The arguments ruler adds to a server's command line, and what it checks there."""

    default_container_port: int  # where the server's image listens unless told otherwise
    metrics_flag: str = ""  # the server flag without which metrics_path has no spec counters

    @abstractmethod
    def listen_args(self, host: str, port: int | str) -> list[str]:
        """Command-line arguments that make the server listen on ``host:port``."""

    def log_args(self) -> list[str]:
        """Extra arguments needed for the boot log to contain the facts parse_line reads.

        Empty unless the server hides them at its default verbosity.
        """
        return []

    def simulated_acceptance(self, argv: Sequence[str], env: Mapping[str, str]) -> str:
        """The setting that makes the server simulate speculative acceptance (accept draft tokens
        at a set rate instead of checking them), as the window's launch has it; "" when it
        measures its own. Every acceptance figure of such a window is set, not measured."""
        return ""

    def metrics_requirement(self, argv: list[str]) -> str | None:
        """A warning when the command line cannot give per-rep acceptance from the metrics delta."""
        if self.metrics_flag and self.metrics_flag not in argv:
            return f"{self.metrics_flag} missing: acceptance falls back to per-request counts"
        return None


def flag_value(argv: Sequence[str], *flags: str) -> tuple[str, str] | None:
    """The first of ``flags`` on a command line and its value (``--flag value`` or
    ``--flag=value``), or None."""
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if name in flags:
            if eq:
                return name, value
            if i + 1 < len(argv):
                return name, argv[i + 1]
    return None
