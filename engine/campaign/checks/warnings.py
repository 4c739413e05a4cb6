"""What `ruler validate`, the run and the dry run warn of in a campaign that loads: an old key
name, a change runtime attach cannot make, a knob YAML reads as a string (`1e-3`), places sharing
CPUs, a secret on a server's command line; and what `ruler validate` notes: each value the file
writes that ruler will redact. Each at file:line:col, from the campaign and its marks."""

import re
from collections.abc import Iterator, Mapping
from typing import Any

from engine.campaign.checks.knobs import knob_values
from engine.campaign.redact import Redactor
from engine.campaign.secrets import MIN_SECRET_LEN, command_words, credentials, entry, is_secret
from engine.campaign.spec import Campaign
from engine.campaign.workload import OLD_TPOT_KEY
from engine.campaign.yamlmarks import Issue, KeyPath, Problem, describe, dotted, place, string_number
from engine.words import CONTROL

REFERENCE = re.compile(r"\$\{([^{}]*)\}")  # a ${...} variable in a value


def campaign_warnings(campaign: Campaign) -> list[Problem]:
    file, marks = str(campaign.source_path), campaign.marks
    if marks.data is None:  # a campaign not loaded from a file
        return []
    issues = (_old_keys(campaign) + _attach(campaign) + _string_knobs(campaign) + _shared_cpus(campaign)
              + argv_warnings(campaign))
    return [place(file, marks, (path, on_key, f"warning: {message}")) for path, on_key, message in issues]


def _old_keys(campaign: Campaign) -> list[Issue]:
    at = ("workload", "slo", OLD_TPOT_KEY)
    if not campaign.marks.has_key(at):
        return []
    return [(at, True, f"slo.{OLD_TPOT_KEY} is judged against each request's TPOT (the mean gap "
                       "between its tokens after the first), not the itl_p* chunk gaps: write tpot_ms")]


def _attach(campaign: Campaign) -> list[Issue]:
    if campaign.runtime != "attach":
        return []
    return [(("windows", i, "change"), True, (
        f"window {window.name!r}: runtime attach cannot apply its change "
        f"({', '.join(window.axes())}): ruler does not start the server, so the window "
        "measures the same server again; its delta is a repeat's, not the change's effect "
        "(the report says so)")) for i, window in enumerate(campaign.windows)]


def _string_knobs(campaign: Campaign) -> list[Issue]:
    """A knob takes any JSON value, so one YAML reads as a string (`1e-3`) is sent as one; written
    in quotes, the string is meant."""
    lines = campaign.source_text.split("\n")  # as the marks count lines (not str.splitlines's U+2028)
    out: list[Issue] = []
    for path, value in knob_values(campaign):
        hint = string_number(value, "a number") if isinstance(value, str) else ""
        mark = campaign.marks.locate(path)
        if hint and lines[mark.line - 1][mark.col - 1:mark.col] not in ("'", '"'):
            out.append((path, False, f"{dotted(path)} is the string {describe(value)}{hint}"))
    return out


def _shared_cpus(campaign: Campaign) -> list[Issue]:
    """Places on one machine (one docker_host and node) whose CPU sets overlap: their sessions run
    at once, so each measures with the other's load on its CPUs. A warning, not an error: a machine
    with fewer CPUs than places may mean it."""
    if campaign.parallel == 1:
        return []
    out: list[Issue] = []
    places = [(i, p, _cpu_ranges(p.cpus)) for i, p in enumerate(campaign.places) if p.cpus]
    for j, (i, spot, ranges) in enumerate(places):
        for _, other, other_ranges in places[:j]:
            shared = _overlap(other_ranges, ranges)
            if not shared or (other.docker_host, other.node) != (spot.docker_host, spot.node):
                continue
            cpus = ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in shared)
            many = "s" if len(shared) > 1 or shared[0][0] != shared[0][1] else ""
            out.append((("places", i, "cpus"), False, (
                f"places {other.name} and {spot.name} share CPU{many} {cpus}: sessions on "
                "both run at once, each on the other's CPUs (set parallel: 1 to run one at a time)")))
    return out


def _cpu_ranges(cpus: str) -> list[tuple[int, int]]:
    """A CPU list (0-3,8) as its ranges, inclusive; a reversed range (3-1) holds no CPU."""
    ranges = []
    for part in cpus.split(","):
        lo, _, hi = part.partition("-")
        ranges.append((int(lo), int(hi or lo)))
    return [(lo, hi) for lo, hi in ranges if lo <= hi]


def _overlap(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The CPUs in both lists, as sorted ranges with adjacent ones joined."""
    both = sorted((max(x[0], y[0]), min(x[1], y[1])) for x in a for y in b)
    merged: list[tuple[int, int]] = []
    for lo, hi in (r for r in both if r[0] <= r[1]):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def argv_warnings(campaign: Campaign) -> list[Issue]:
    """A secret variable expanded into a server argument: ruler keeps its value out of every
    record, but the host shows a command line to all its users (``ps``; ``docker inspect`` to
    Docker users). Warned, not refused: some servers take a credential only as a flag."""
    out: list[Issue] = []
    for path, flag, value in _argv_strings(campaign):
        for name in dict.fromkeys(n for n in REFERENCE.findall(value) if is_secret(n)):
            out.append((path, False, (
                f"{flag}: ${{{name}}} puts a secret on the server's command line, which "
                "`ps` and `docker inspect` show to other users; ruler redacts it from its "
                f"records, but prefer the environment (pass_env: [{name}]) if the server reads "
                "it there")))
    return out


def _argv_strings(campaign: Campaign) -> Iterator[tuple[KeyPath, str, str]]:
    """(where, flag or "command", value) for every string the file writes on a server's argv."""
    def args(path: KeyPath, mapping: Mapping[str, Any]) -> Iterator[tuple[KeyPath, str, str]]:
        for flag, value in mapping.items():
            items = value if isinstance(value, tuple) else [value]
            for i, item in enumerate(items):
                if isinstance(item, str):
                    yield (*path, flag, *((i,) if isinstance(value, tuple) else ())), flag, item

    def command(path: KeyPath, items: tuple[str, ...] | None) -> Iterator[tuple[KeyPath, str, str]]:
        for i, item in enumerate(items or ()):
            yield (*path, i), "command", item

    yield from args((CONTROL, "args"), campaign.control.args)  # the control's section of the file
    yield from command(("docker", "command"), campaign.docker.command)
    yield from command(("process", "command"), campaign.process.command)
    for i, window in enumerate(campaign.windows):
        change: KeyPath = ("windows", i, "change")
        if campaign.marks.source(change)[-1:] == ("sweep",):
            continue  # a sweep's window: its change is written once, as the sweep's values
        yield from args((*change, "args"), window.change.args)
        yield from command((*change, "command"), window.change.command)


def secret_notes(campaign: Campaign) -> list[Problem]:
    """Each value the file gives a server that ruler redacts wherever it writes: a literal under a
    secret's name, and, under any name, a part that is a credential by its shape (a URL's
    password, a token), said as the records will hold it. A ``${...}`` is known only at run time."""
    marks = campaign.marks
    if marks.data is None:
        return []
    out: list[Problem] = []
    seen: set[tuple[KeyPath, str, str]] = set()
    for path, on_key, name, value in _given_strings(marks.data):
        if (marks.source(path), name, value) in seen:
            continue  # a sweep's value, written once
        seen.add((marks.source(path), name, value))
        literal = REFERENCE.sub("", value)
        if is_secret(name) and len(literal) >= MIN_SECRET_LEN:
            note = f"{name}: a secret by its name: ruler writes <redacted:{name}> for its value"
        elif found := credentials(value):
            shown = Redactor([(name, c.text) for c in found])(value)
            said = f" ({shown})" if "\n" not in shown and len(shown) <= 120 else ""
            what = ", ".join(dict.fromkeys(c.what for c in found))
            note = (f"{name}: its value holds {what}, a secret under any name: ruler redacts it "
                    f"wherever it writes{said}")
        else:
            continue
        out.append(place(str(campaign.source_path), marks, (path, on_key, f"note: {note}")))
    return sorted(out, key=lambda p: (p.line, p.col))


def _entries(path: KeyPath, name: Any, value: Any) -> Iterator[tuple[KeyPath, bool, str, str]]:
    """What one entry gives (engine.campaign.secrets.entry), a value in its name at its key."""
    if isinstance(value, dict):  # a knob's nested mapping (a header)
        for key, item in value.items():
            yield from _entries((*path, key), key, item)
        return
    many = isinstance(value, list)
    for j, item in enumerate(value if many else [value]):
        at = (*path, *((j,) if many else ()))
        in_key = entry(str(name), None)
        yield from ((path, True, n, text) for n, text in in_key)
        yield from ((at, False, n, text) for n, text in entry(str(name), item) if (n, text) not in in_key)


def _config(path: KeyPath, section: Any) -> Iterator[tuple[KeyPath, bool, str, str]]:
    if not isinstance(section, dict):
        return
    for key in ("env", "args", "artifacts", "knobs"):
        given = section.get(key)
        for name, value in given.items() if isinstance(given, dict) else ():
            yield from _entries((*path, key, name), name, value)
    if isinstance(section.get("model"), str):
        yield (*path, "model"), False, "model", section["model"]
    words = section.get("command")
    if isinstance(words, list) and all(isinstance(w, str) for w in words):
        for i, name, word in command_words(words):
            yield (*path, "command", i), False, name, word


def _given_strings(data: Any) -> Iterator[tuple[KeyPath, bool, str, str]]:
    """(where, whether at its key, name, value) of each value the campaign's data gives a server
    or sends it (engine.campaign.redact's walk, over the file): the control's, each window's
    change and each stack window's server: env, args, model, artifacts (a value in a flag's own
    name at its key: ``--hf-token=K: true``), command words and what is inside them; the
    requests' knobs; the attached server's url."""
    if not isinstance(data, dict):
        return
    yield from _config((CONTROL,), data.get(CONTROL))
    for section in ("process", "docker", "workload"):
        yield from _config((section,), data.get(section))
    attach = data.get("attach")
    if isinstance(attach, dict) and isinstance(attach.get("url"), str):
        yield ("attach", "url"), False, "attach.url", attach["url"]
    windows = data.get("windows")
    for i, window in enumerate(windows if isinstance(windows, list) else []):
        if isinstance(window, dict):
            yield from _config(("windows", i, "change"), window.get("change"))
            yield from _config(("windows", i, "server"), window.get("server"))
