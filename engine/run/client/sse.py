"""A stream body's server-sent events: the data payloads, each with the arrival time of the read
that completed it (not the time the parser reached it)."""

from __future__ import annotations

import re
from bisect import bisect_left
from itertools import accumulate

_CR = re.compile(rb"\r\n?")


def sse_events(buf: bytes) -> tuple[list[bytes], bytes]:
    """Complete SSE events' data payloads in ``buf`` and the unfinished rest.

    Events end at a blank line; a payload of several ``data:`` lines is joined with newlines.
    Lines end in CRLF, LF or CR (the SSE spec); the rest comes back with its line ends already
    LF, so the events are the same wherever the network cut the stream.
    """
    if b"\r" in buf:
        held = b"\r" if buf.endswith(b"\r") else b""  # may be the first half of a CRLF
        buf = _CR.sub(b"\n", buf[:len(buf) - len(held)]) + held
    *events, rest = buf.split(b"\n\n")
    return [p for p in map(_payload, events) if p is not None], rest


def _payload(event: bytes) -> bytes | None:
    """The data of one SSE event (LF line ends), or None for an event without data."""
    if b"\n" not in event:  # the common event: one line
        return event[5:].lstrip(b" ") if event.startswith(b"data:") else None
    data = [line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
    return (data[0] if len(data) == 1 else b"\n".join(data)) if data else None


class SseEvents:
    """A body's events as its bytes come, batch by batch, each stamped with its read's time."""

    def __init__(self) -> None:
        self.rest = b""  # an unfinished event

    def feed(self, bodies: list[bytes], times: list[float]) -> tuple[list[bytes], list[float]]:
        """The payloads of the events completed by ``bodies`` (each the body bytes of one read,
        which arrived at the same place in ``times``), each with the arrival time of the read its
        last byte came in."""
        before = self.rest
        body = bodies[0] if len(bodies) == 1 else b"".join(bodies)
        blob = before + body if before else body
        if b"\r" in blob:  # CR line ends: normalised read by read, as a CRLF may straddle two
            return self._feed_cr(bodies, times)
        *events, self.rest = blob.split(b"\n\n")
        if not events:
            return [], []
        # The usual stream: every event one "data:" line. Counted in C: no newline but the
        # separators', and a "data:" at every event's start; then no Python per event but a slice.
        n = len(events)
        if (blob.count(b"\n") == 2 * n + self.rest.count(b"\n")
                and blob.startswith(b"data:") + blob.count(b"\n\ndata:")
                - (self.rest.startswith(b"data:")) == n):
            payloads = [e[5:].lstrip(b" ") for e in events]
            if times[0] == times[-1]:  # one read, or reads that arrived at once
                return payloads, [times[0]] * n
            offs = list(accumulate(len(e) + 2 for e in events))
        else:
            offs, payloads, off = [], [], 0
            for event in events:
                off += len(event) + 2
                if (p := _payload(event)) is not None:
                    payloads.append(p)
                    offs.append(off)
            if times[0] == times[-1]:
                return payloads, [times[0]] * len(payloads)
        # Each event's time: the read its last byte (at offs - 1 in blob) came in.
        ends = list(accumulate(map(len, bodies), initial=len(before)))  # read k: ends[k]..ends[k+1]
        return payloads, [times[bisect_left(ends, off, 1) - 1] for off in offs]

    def _feed_cr(self, bodies: list[bytes], times: list[float]) -> tuple[list[bytes], list[float]]:
        payloads: list[bytes] = []
        stamps: list[float] = []
        for body, t in zip(bodies, times, strict=True):
            got, self.rest = sse_events(self.rest + body)
            payloads += got
            stamps += [t] * len(got)
        return payloads, stamps
