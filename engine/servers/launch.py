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

    def metrics_requirement(self, argv: list[str]) -> str | None:
        """A warning when the command line cannot give per-rep acceptance from the metrics delta."""
        if self.metrics_flag and self.metrics_flag not in argv:
            return f"{self.metrics_flag} missing: acceptance falls back to per-request counts"
        return None
