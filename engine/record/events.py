"""The run's vocabulary: the words every consumer of the journal (fold, progress lines, report,
console) shares, defined once."""

from __future__ import annotations

CONTROL = "control"  # the window every session boots first; every other window is a delta to it
