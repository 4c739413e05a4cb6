"""The harness of the component tests that run a `ruler` command end to end on a hostile file:
the command's entry function in a forked child of the test process (engine already imported, so a
child costs a fraction of a second) under an address-space limit, and the shapes of file that
block or flood a careless reader. The parent waits with a generous timeout; a child still running
then is a hang: killed and reported, no timing asserted beyond."""

from __future__ import annotations

import os
import resource
import select
import signal
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from engine.commands.cli import main

HANG_S = 120  # a child still running after this is a hang (each takes well under a second)
HEADROOM = 2 << 30  # the address space a child may add to what it inherited: twice the data bound


def fifo(path: Path) -> Path:
    os.mkfifo(path)  # nobody writes to it: a plain open() blocks forever
    return path


def sparse(size: int) -> Callable[[Path], Path]:
    def make(path: Path) -> Path:
        with path.open("wb") as f:
            f.truncate(size)  # no disk and no memory until someone reads it
        return path
    return make


def link_to_zero(path: Path) -> Path:
    path.symlink_to("/dev/zero")
    return path


def cli_in_child(argv: list[str], env: dict[str, str], out: Path,
                 hang_s: float = HANG_S) -> tuple[int | None, str]:
    """``main(argv)`` in a forked child under an address-space limit, its stdout and stderr in
    ``out``: (its exit code, or None if it ran past ``hang_s`` and was killed; what it wrote)."""
    with open("/proc/self/status") as f:
        inherited = int(next(x for x in f if x.startswith("VmSize:")).split()[1]) * 1024
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 70
        try:
            fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            sys.stdout = os.fdopen(1, "w", buffering=1)
            sys.stderr = os.fdopen(2, "w", buffering=1)
            resource.setrlimit(resource.RLIMIT_AS, (inherited + HEADROOM, inherited + HEADROOM))
            os.environ.update(env)
            code = main(argv)
        except BaseException:  # noqa: BLE001 - the child says what escaped, for the parent to fail on
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    # Readable the moment the child ends (a poll every 0.1 s cost each child 0.1 s).
    ended = os.pidfd_open(pid)
    try:
        if select.select([ended], [], [], hang_s)[0]:
            return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), out.read_text(errors="replace")
    finally:
        os.close(ended)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None, out.read_text(errors="replace")
