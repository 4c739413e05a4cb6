"""The windows: each name once and none reserved, each in a session, one axis changed; a sweep's
windows each change its one axis to a value of their own; a window on another stack brings its
whole launch."""

import re
from typing import Any

from engine.campaign.checks.draft import Draft
from engine.campaign.yamlmarks import Issue
from engine.words import CONTROL, is_control

RERUN_SUFFIX = re.compile(r"-rerun\d+\Z")  # a rebooted window's container: <name>-rerunN (runner.py)


def names(d: Draft) -> list[Issue]:
    c = d.campaign
    issues: list[Issue] = []
    first: dict[str, int] = {}
    listed = {name for items in c.sessions.values() for name in items}
    # A session entry the schema dropped listed windows too: which is not known.
    known = d.stands(("sessions",)) and not d.dropped(("sessions",))
    for i, window in enumerate(c.windows):
        name, where = window.name, ("windows", i, "name")
        if is_control(name):
            issues.append((where, False, f"{name!r} is reserved and cannot name a window"))
        elif RERUN_SUFFIX.search(name):
            issues.append((where, False, f"window {name!r}: a name ending in -rerun<N> is reserved "
                                         "(a window booted again for a rerun gets that suffix on "
                                         "its container's name)"))
        elif name in first:
            line = d.locate(("windows", first[name], "name")).line
            issues.append((where, False, f"duplicate window name {name!r} (first at line {line})"))
        else:
            first[name] = i
        if name != CONTROL and known and name not in listed:
            issues.append((where, False, f"window {name!r} is in no session"))
    return issues


def axes(d: Draft) -> list[Issue]:
    """Exactly one axis a window, unless it says multi_axis; a window the schema refused part of
    is the schema's (a check over a broken change would only mislead)."""
    issues: list[Issue] = []
    for i, window in enumerate(d.campaign.windows):
        axes = window.axes()
        if not d.whole(("windows", i)):
            continue
        if not axes:
            message = f"window {window.name!r} changes nothing; a window changes exactly one axis"
        elif len(axes) > 1 and not window.multi_axis:
            message = (f"window {window.name!r} changes {len(axes)} axes ({', '.join(axes)}); "
                       "set multi_axis: true to allow it")
        else:
            continue
        issues.append((("windows", i, "change"), True, message))
    return issues


def stacks(d: Draft) -> list[Issue]:
    """A window on another stack (``server:``) brings its whole launch for the campaign's runtime,
    and is lossy by nature."""
    c = d.campaign
    runtime = c.runtime if d.stands(("runtime",)) else None
    if runtime == "slurm":
        needs = None if not d.stands(("slurm", "start")) else (
            ["command"] if c.slurm.start == "process" else ["image"])
    elif runtime == "auto":  # whichever the campaign can start, the window must start too
        needs = [k for k, section in (("image", "docker"), ("command", "process"))
                 if d.given((section, k), d.value((section, k)))]
    else:
        needs = {"docker": ["image"], "process": ["command"]}.get(str(runtime), [])
    issues: list[Issue] = []
    for i, window in enumerate(c.windows):
        if window.server is None or not d.whole(("windows", i)):
            continue
        name = window.name
        if not window.lossy:
            issues.append((("windows", i, "lossy"), False, (
                f"window {name!r} is on another stack (server: {window.server.adapter}): another "
                "engine's numerics make it lossy by nature; leave lossy out or set it true")))
        if runtime == "attach":
            issues.append((("windows", i, "server"), True, (
                f"window {name!r}: runtime attach starts no server, so it cannot boot another stack")))
            continue
        missing = [k for k in needs or [] if not getattr(window.server, k)]
        if missing:
            issues.append((("windows", i, "server"), True, (
                f"window {name!r} is on another stack: its server needs its own "
                f"{' and '.join(missing)} for runtime {runtime} (the campaign's "
                f"{' and '.join('docker.image' if k == 'image' else 'process.command' for k in missing)}"
                " start the control's stack)")))
    return issues


def sweeps(d: Draft) -> list[Issue]:
    """The windows of one sweep change the same one axis, each to a value of its own; a sweep's
    name names no window (a session listing it would mean either)."""
    windows = d.campaign.windows
    names = {w.name for w in windows}
    first: dict[str, tuple[int, str]] = {}  # sweep -> (window index, its axis)
    values: dict[str, dict[str, int]] = {}
    issues: list[Issue] = []
    for i, window in enumerate(windows):
        if window.sweep is None or len(window.axes()) != 1 or not d.whole(("windows", i)):
            continue  # no sweep; or axes() says what is wrong with its change
        where = ("windows", i, "sweep")
        if window.server is not None:
            issues.append((where, False, f"window {window.name!r} is on another stack (server:); a "
                                         "sweep varies one value of one axis, a stack is no value"))
            continue
        axis = window.axes()[0]
        value: Any = window.change.value(axis)
        if window.sweep in names:
            issues.append((where, False, f"sweep {window.sweep!r} has the name of a window; a session "
                                         "listing it would mean either"))
        if window.sweep not in first:
            first[window.sweep] = (i, axis)
        elif first[window.sweep][1] != axis:
            other = windows[first[window.sweep][0]].name
            issues.append((where, False, f"window {window.name!r} changes {axis} but window {other!r} "
                                         f"of the same sweep {window.sweep!r} changes "
                                         f"{first[window.sweep][1]}: a sweep varies one axis"))
            continue
        seen = values.setdefault(window.sweep, {})
        said = repr(value)
        if said in seen:
            other = windows[seen[said]].name
            issues.append((where, False, f"sweep {window.sweep!r}: windows {other!r} and "
                                         f"{window.name!r} set {axis} to the same value"))
        seen.setdefault(said, i)
    return issues
