"""Sweeps: one window entry with a list of values becomes one window per value.

A window entry whose ``sweep`` is a mapping is a generator::

    - name: block
      axis: draft block
      sweep: {args: {--spec-draft-n-max: [5, 6, 8]}}

It stands for the windows ``block-5``, ``block-6`` and ``block-8``, each changing that one key to
its value, each carrying ``sweep: block`` (its membership: what the trade table groups by). The
swept key may be a flag (``args``), an environment variable (``env``), an artifact
(``artifacts``), a request knob (``knobs``), or the ``image`` or ``model`` itself; its values are
a list (each window named by its value) or a mapping ``{label: value}`` (named by the label).

A session that lists the sweep's name gets its windows in the order of the values; a sweep no
session names gets a session of its own, named after it. The expansion happens on the raw YAML,
before the schema sees it, so the engine only ever meets plain windows; :class:`Expansion` maps
every path of the expanded data back to where it was written, so a problem in a generated window
is reported at the sweep's line and column.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.campaign.secrets import holds_secret
from engine.campaign.yamlmarks import Issue, KeyPath, Mark, MarkedDoc, describe

# What a sweep may vary, in the order a window's change lists them. A section of keys (one key
# swept), or a key of its own (the image, the model).
KEYED = ("args", "env", "artifacts", "knobs")
WHOLE = ("image", "model")
SWEEPABLE = KEYED + WHOLE
SESSION_NAME = re.compile(r"[a-z0-9][a-z0-9_]*\Z")  # spec.SESSION_PATTERN, without importing spec
WINDOW_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*\Z")  # spec.NAME_PATTERN
MAX_NAME = 64


def label(value: Any) -> str:
    """The part of a window's name a value gives: ``5``, ``0p1``, ``q8_0``, ``on`` (a bare flag),
    ``off`` (a flag left out), ``none`` (removed), a path's file name without its extension."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list | tuple):
        return "_".join(label(v) for v in value)
    if isinstance(value, dict):
        return "-".join(f"{label(k)}-{label(v)}" for k, v in value.items())
    text = str(value)
    if "/" in text.rstrip("/"):
        text = text.rstrip("/").rsplit("/", 1)[-1]
        text = re.sub(r"\.(gguf|safetensors|bin|pt|json|yaml)\Z", "", text, flags=re.I)
    text = re.sub(r"(?<=[0-9])\.(?=[0-9])", "p", text.lower())  # 0.1 -> 0p1: a name has no dot
    text = re.sub(r"[^a-z0-9_-]+", "-", text)
    return re.sub(r"-{2,}", "-", text).strip("-_")


def shown(value: Any) -> str:
    """A value as an axis label says it: ``5``, ``q8_0``, ``on``, ``removed``."""
    if value is None or value is False:
        return "removed" if value is None else "off"
    if value is True:
        return "on"
    if isinstance(value, list | tuple):
        return " ".join(shown(v) for v in value)
    return str(value)


@dataclass(frozen=True)
class Generated:
    """One window a sweep entry stands for: where the entry is, and which of its values."""

    entry: int  # the entry's index in the file's windows list
    section: str  # args | env | artifacts | knobs | image | model
    key: str | None  # the swept key within the section (None for image and model)
    at: Hashable  # the value's index in the list, or its label in the mapping


@dataclass
class Expansion:
    """The campaign's raw data with every sweep entry replaced by its windows (and every session
    naming a sweep by its windows' names), and where each expanded path was written."""

    data: Any
    issues: list[Issue] = field(default_factory=list)  # problems in sweep entries, at file paths
    windows: dict[int, int | Generated] = field(default_factory=dict)  # expanded index -> origin
    sessions: dict[tuple[Hashable, int], KeyPath] = field(default_factory=dict)  # (session, j) -> path
    unplaced: set[str] = field(default_factory=set)  # windows of a sweep whose session is refused

    def source(self, path: KeyPath) -> KeyPath:
        """Where a path of the expanded data was written in the file."""
        if len(path) >= 2 and path[0] == "windows" and isinstance(path[1], int):
            origin = self.windows.get(path[1])
            if origin is None:
                return path
            if isinstance(origin, int):
                return ("windows", origin, *path[2:])
            return _generated_source(origin, path[2:])
        if len(path) >= 3 and path[0] == "sessions" and isinstance(path[2], int):
            found = self.sessions.get((path[1], path[2]))
            return path if found is None else (*found, *path[3:])
        if path[:1] == ("sessions",) and len(path) >= 2 and (path[1], -1) in self.sessions:
            return self.sessions[(path[1], -1)]  # a session a sweep added: at the sweep's name
        return path

    def doc(self, doc: MarkedDoc) -> MarkedDoc:
        """``doc`` with the expanded data, locating each path where it was written."""
        return _SourcedDoc(self, doc)


def _generated_source(origin: Generated, rest: KeyPath) -> KeyPath:
    entry: KeyPath = ("windows", origin.entry)
    if rest[:1] == ("change",):
        swept = (origin.section,) if origin.key is None else (origin.section, origin.key)
        if rest[1:1 + len(swept)] == swept:
            return (*entry, "sweep", *swept, origin.at, *rest[1 + len(swept):])
        return (*entry, "sweep")
    if rest[:1] in (("name",), ("sweep",)):
        return (*entry, "name")
    return (*entry, *rest)


class _SourcedDoc(MarkedDoc):
    def __init__(self, expansion: Expansion, doc: MarkedDoc) -> None:
        super().__init__(expansion.data, doc.keys, doc.values, doc.duplicates)
        self._expansion = expansion

    def locate(self, path: KeyPath, *, key: bool = False) -> Mark:
        return super().locate(self._expansion.source(path), key=key)

    def source(self, path: KeyPath) -> KeyPath:
        return self._expansion.source(path)


def expand(raw: Any) -> Expansion:
    """Every sweep entry of ``raw`` (a campaign's YAML data) expanded; ``raw`` is left as it is."""
    if not isinstance(raw, dict) or not isinstance(raw.get("windows"), list):
        return Expansion(raw)
    out = Expansion({**raw})
    windows: list[Any] = []
    made: dict[str, tuple[int, list[str]]] = {}  # sweep name -> (entry, its windows' names)
    broken: set[str] = set()  # sweeps whose entry has a problem: sessions naming them say nothing
    for i, entry in enumerate(raw["windows"]):
        if not (isinstance(entry, dict) and isinstance(entry.get("sweep"), dict)):
            out.windows[len(windows)] = i
            windows.append(entry)
            continue
        generated, issues = _generate(i, entry)
        out.issues += issues
        if issues or not generated:
            if isinstance(entry.get("name"), str):
                broken.add(entry["name"])
            continue
        made[entry["name"]] = (i, [w["name"] for w, _ in generated])
        for window, origin in generated:
            out.windows[len(windows)] = origin
            windows.append(window)
    out.data["windows"] = windows
    if made or broken:
        _expand_sessions(raw, out, made, broken)
    return out


def _generate(i: int, entry: Mapping[Any, Any]) -> tuple[list[tuple[dict[Any, Any], Generated]], list[Issue]]:
    """The windows one sweep entry stands for, or the problems that keep it from standing for any."""
    where: KeyPath = ("windows", i, "sweep")
    name, sweep = entry.get("name"), entry["sweep"]
    if not isinstance(name, str) or not WINDOW_NAME.match(name) or len(name) > MAX_NAME:
        return [], []  # the name's problem is the schema's: it is checked on a plain window below
    issues: list[Issue] = []
    if "change" in entry:
        issues.append((("windows", i, "change"), True, f"sweep {name!r}: a sweep's windows change "
                       "the swept key alone; give a change of its own window"))
    sections = [k for k in sweep if k in SWEEPABLE]
    unknown = [k for k in sweep if k not in SWEEPABLE]
    if unknown:
        return [], issues + [((*where, unknown[0]), True, f"sweep {name!r}: {describe(unknown[0])} "
                              f"cannot be swept; a sweep varies one of {', '.join(SWEEPABLE)}")]
    if len(sections) != 1:
        return [], issues + [(where, True, f"sweep {name!r} sweeps {len(sections)} keys; a sweep "
                              "varies exactly one (a flag, an env var, an artifact, a knob, the "
                              "image or the model)")]
    section = sections[0]
    values: Any = sweep[section]
    key: str | None = None
    if section in KEYED:
        if not isinstance(values, dict) or len(values) != 1:
            count = len(values) if isinstance(values, dict) else 0
            return [], issues + [((*where, section), True, f"sweep {name!r}: sweep.{section} names "
                                  f"exactly one key with its values, got {count}")]
        key, values = next(iter(values.items()))
        if not isinstance(key, str):
            return [], issues + [((*where, section), True, f"sweep {name!r}: the swept key must be "
                                  f"a string, got {describe(key)}")]
    at: KeyPath = (*where, section) + ((key,) if key is not None else ())
    # A secret's value never names a window: its name is in directories, the journal and every
    # receipt, past any redaction (and lower-cased, past one that matches its case). A secret by
    # its name, or by its shape under any name (a URL's password, a token).
    given = values.values() if isinstance(values, dict) else values if isinstance(values, list) else []
    secret = key is not None and any(holds_secret(key, v) for v in [None, *given])
    if isinstance(values, list):
        pairs = [(j, str(j + 1) if secret else label(v), v) for j, v in enumerate(values)]
        how = "; give {label: value} to name the windows yourself"
    elif isinstance(values, dict):
        pairs = [(k, str(k), v) for k, v in values.items()]
        how = ""
    else:
        return [], issues + [(at, False, f"sweep {name!r}: expected a list of values (or "
                              f"{{label: value}}), got {describe(values)}")]
    if not pairs:
        return [], issues + [(at, False, f"sweep {name!r}: no value to sweep")]
    generated: list[tuple[dict[Any, Any], Generated]] = []
    seen: dict[str, Hashable] = {}
    for j, tag, value in pairs:
        window = f"{name}-{tag}"
        if not tag or not WINDOW_NAME.match(window) or len(window) > MAX_NAME:
            issues.append(((*at, j), False, f"sweep {name!r}: value {describe(value)} gives no "
                           f"window name ({window!r} must match [a-z0-9][a-z0-9_-]*, at most "
                           f"{MAX_NAME} characters){how}"))
            continue
        if window in seen:
            issues.append(((*at, j), False, f"sweep {name!r}: two values name the window "
                           f"{window!r}{how}"))
            continue
        seen[window] = j
        change: dict[str, Any] = {section: {key: value}} if key is not None else {section: value}
        axis = entry.get("axis")
        value_said = f"value {tag}" if secret else shown(value)
        said = f"{key} {value_said}" if key is not None else f"{section} {value_said}"
        made = {k: v for k, v in entry.items() if k not in ("name", "sweep", "axis", "change")}
        made = {"name": window, "axis": f"{axis}: {value_said}" if isinstance(axis, str) and axis
                else said if axis in (None, "") else axis, **made, "sweep": name, "change": change}
        generated.append((made, Generated(i, section, key, j)))
    return generated, issues


def _expand_sessions(raw: Mapping[Any, Any], out: Expansion, made: dict[str, tuple[int, list[str]]],
                     broken: set[str]) -> None:
    given = raw.get("sessions")
    sessions: dict[Any, Any] = dict(given) if isinstance(given, dict) else {}
    named: set[str] = set()
    for session, items in sessions.items():
        if not isinstance(items, list):
            continue
        expanded: list[Any] = []
        for j, item in enumerate(items):
            if isinstance(item, str) and item in broken:
                named.add(item)
                continue
            if isinstance(item, str) and item in made:
                named.add(item)
                names = made[item][1]
            else:
                names = [item]
                named.update(s for s, (_, ws) in made.items() if item in ws)
            for window in names:
                out.sessions[(session, len(expanded))] = ("sessions", session, j)
                expanded.append(window)
        sessions[session] = expanded
    for sweep, (entry, names) in made.items():
        if sweep in named:
            continue
        session = sweep.replace("-", "_")
        where: KeyPath = ("windows", entry, "name")
        if session in sessions or not SESSION_NAME.match(session):
            out.issues.append((where, False, f"sweep {sweep!r} is in no session, and the session it "
                               f"would get, {session!r}, " + ("is taken" if session in sessions else
                                                               "is no session name")
                               + ": list it in a session"))
            out.unplaced.update(names)
            continue
        sessions[session] = list(names)
        out.sessions[(session, -1)] = where
        for j in range(len(names)):
            out.sessions[(session, j)] = where
    if sessions or isinstance(given, dict):
        out.data["sessions"] = sessions
