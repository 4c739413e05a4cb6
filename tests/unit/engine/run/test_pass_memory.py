"""A pass keeps no earlier pass's garbage: the cyclic GC is frozen during a pass (its full
collections scanned the whole heap while chunks arrived), so what is garbage is collected first,
not frozen for good (a hostile server's huge buffers were kept pass after pass: +230 MB each)."""

from __future__ import annotations

import gc
import weakref

from engine.run import loadgen
from engine.run.loadgen import PassResult


class _Cycle:
    def __init__(self) -> None:
        self.me = self
        self.payload = bytearray(1 << 20)


def test_garbage_from_before_a_pass_is_collected_not_frozen() -> None:
    enabled = gc.isenabled()
    gc.disable()  # no automatic collection may take the garbage before the pass does
    try:
        ref = weakref.ref(_Cycle())  # unreachable at once, but for its own cycle
        assert ref() is not None
        alive: list[bool] = []

        async def a_pass() -> PassResult:
            alive.append(ref() is not None)
            return PassResult([], 0.0, 0.0, 0.0, 0.0)

        loadgen.run_on_loop(a_pass())
        assert alive == [False]
    finally:
        if enabled:
            gc.enable()
