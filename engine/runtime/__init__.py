"""Runtimes, looked up by name (the ``runtime:`` field of a campaign, or ``ruler run --runtime``).

A runtime is one way to run a window's server (:class:`~engine.runtime.base.Runtime`): a process on
this machine, a Docker container (here or a place's daemon), an already running server at a URL,
or a Slurm batch job. Adding one is adding its module and a factory below.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from engine.runtime.base import Runtime


@dataclass(frozen=True)
class _RuntimeOptions:
    """The options get_runtime was given; each runtime takes what it needs of them."""

    secrets: Mapping[str, str] = field(default_factory=dict)
    partition: str | None = None
    docker_host: str | None = None
    url: str | None = None
    connect_timeout: float | None = None  # seconds to reach a place's host (ssh)
    cancelled: threading.Event | None = None  # the run's abort: a wait on a host is cut short


# Each runtime's module is imported when it is asked for: the Docker SDK only when a run uses it.
def _process(options: _RuntimeOptions) -> Runtime:
    from engine.runtime.process import ProcessRuntime

    return ProcessRuntime()


def _docker(options: _RuntimeOptions) -> Runtime:
    from engine.runtime.docker import DockerRuntime
    from engine.runtime.sshdial import DEFAULT_CONNECT_S

    return DockerRuntime(options.docker_host, options.connect_timeout or DEFAULT_CONNECT_S,
                         options.cancelled)


def _attach(options: _RuntimeOptions) -> Runtime:
    from engine.runtime.attach import AttachRuntime

    if options.url is None:
        raise ValueError("runtime attach needs the server's url (attach.url)")
    return AttachRuntime(options.url)


def _slurm(options: _RuntimeOptions) -> Runtime:
    from engine.runtime.slurm.server import SlurmRuntime

    return SlurmRuntime(options.secrets, options.partition)


_RUNTIMES: dict[str, Callable[[_RuntimeOptions], Runtime]] = {
    "attach": _attach,
    "docker": _docker,
    "process": _process,
    "slurm": _slurm,
}


def known_runtimes() -> list[str]:
    return sorted(_RUNTIMES)


def get_runtime(name: str, *, secrets: Mapping[str, str] | None = None, partition: str | None = None,
                docker_host: str | None = None, url: str | None = None,
                connect_timeout: float | None = None,
                cancelled: threading.Event | None = None) -> Runtime:
    """A new runtime of ``name``; ValueError naming the known ones otherwise.

    ``secrets`` (a redacted value -> the variable that holds it, which a Slurm job script names)
    and ``partition`` are slurm's; ``docker_host`` (a place's daemon; None: the local one) is
    docker's, with ``connect_timeout`` (seconds to reach that host over ssh) and ``cancelled``
    (the run's abort, which cuts a wait on the host short); ``url`` is attach's. A runtime ignores
    what it does not need."""
    try:
        factory = _RUNTIMES[name]
    except KeyError:
        raise ValueError(f"unknown runtime {name!r}; known: {', '.join(known_runtimes())}") from None
    return factory(_RuntimeOptions(dict(secrets or {}), partition, docker_host, url, connect_timeout,
                                   cancelled))


__all__ = ["Runtime", "get_runtime", "known_runtimes"]
