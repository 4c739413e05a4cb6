"""Loading a campaign file: bytes -> text -> YAML with marks -> the frozen model, and the checks
that span keys, on the raw YAML. Loading never stops at the first problem: YAML duplicates, every
schema error and every check's error are collected into one SpecError, each at file:line:col, so a
user fixes a file in one pass. docs/campaign.md is the reference."""

import functools
import math
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from engine.campaign import defaults, frozen, sweep
from engine.campaign.prompts import (
    DataFileError,
    NotUtf8,
    decode_text,
    read_prompts,
    read_receipt,
)
from engine.campaign.redact import argv_warnings
from engine.campaign.sources import SOURCES
from engine.campaign.spec import Campaign
from engine.campaign.values import MAX_CONCURRENCY, MAX_SECONDS
from engine.campaign.windows import Window
from engine.campaign.workload import MAX_RATE, MAX_REP_REQUESTS, MIN_RATE, OLD_TPOT_KEY, PromptClass
from engine.campaign.yamlmarks import (
    Issue,
    MarkedDoc,
    Problem,
    describe,
    dotted,
    duplicate_issues,
    load_marked,
    place,
    schema_issue,
    string_number,
    suggest,
    yaml_problem,
)
from engine.files import Unreadable, read_bounded
from engine.words import CONTROL, is_control, load_label

MAX_CAMPAIGN_BYTES = 1 << 20  # a campaign is a few kilobytes; prompts belong in prompt files
RERUN_SUFFIX = re.compile(r"-rerun\d+\Z")  # a rebooted window's container: <name>-rerunN (runner.py)


class SpecError(Exception):
    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(map(str, problems)))


def load_campaign(path: str | Path) -> Campaign:
    path = Path(path)
    file = str(path)
    try:
        data = read_bounded(path, MAX_CAMPAIGN_BYTES)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise SpecError([Problem(file, 1, 1, f"cannot read campaign file ({reason})")]) from None
    except Unreadable as exc:
        problem = (f"campaign file is {exc}" if exc.size is None else
                   f"campaign file is larger than {MAX_CAMPAIGN_BYTES // 1024} KiB; a campaign is a few "
                   "(prompts belong in prompt files)")
        raise SpecError([Problem(file, 1, 1, problem)]) from None
    try:
        text = decode_text(data)
    except NotUtf8 as exc:
        message = f"not UTF-8 text (byte 0x{exc.byte:02x}); save the file as UTF-8"
        raise SpecError([Problem(file, exc.line, exc.col, message)]) from None
    try:
        doc = load_marked(text)
    except yaml.YAMLError as exc:
        raise SpecError([yaml_problem(file, exc)]) from None
    if doc.data is None:
        raise SpecError([Problem(file, 1, 1, "campaign file is empty")])
    if is_tune_file(doc.data):  # one line that says so, not every campaign key it lacks
        raise SpecError([Problem(file, 1, 1, "a tune file (space, objective), not a campaign: "
                                             "`ruler tune FILE` runs it, `ruler validate FILE` checks it")])

    # Issues of the file as written (duplicates, sweep entries) and of the data as expanded (the
    # schema's, the checks'), each placed where it was written.
    written = duplicate_issues(doc)
    expansion = sweep.expand(doc.data)
    written += expansion.issues
    data, sourced = expansion.data, expansion.doc(doc)
    campaign: Campaign | None = None
    try:
        campaign = Campaign.model_validate(data)
    except ValidationError as exc:
        written += [schema_issue({**err, "loc": expansion.source(tuple(err["loc"]))}, Campaign)
                    for err in exc.errors()]
    run = frozen.run_of(path)
    try:  # a run's own campaign: its classes' items and quality prompts are what the run froze
        kept = frozen.read(run) if run is not None else None
    except DataFileError as exc:
        raise SpecError([Problem(file, 1, 1, f"this run's frozen {exc}")]) from None
    issues: list[Issue] = []
    if isinstance(data, dict):
        issues += [i for i in _semantic_issues(data, sourced, path.parent, kept)
                   if not any(i[2] == f"window {n!r} is in no session" for n in expansion.unplaced)]
    if written or issues or campaign is None:
        raise SpecError(sorted({place(file, doc, issue) for issue in written}
                               | {place(file, sourced, issue) for issue in issues}))
    campaign._source_path = path.resolve()
    campaign._source_text = text
    campaign._frozen = kept
    return campaign


# A tune file's own keys (engine.tune.spec): a file with both and no server of its own is one.
TUNE_KEYS = ("space", "objective")


def is_tune_file(data: object) -> bool:
    return isinstance(data, dict) and all(k in data for k in TUNE_KEYS) and "server" not in data


def campaign_warnings(campaign: Campaign) -> list[Problem]:
    """What `ruler validate`, the run and the dry run warn of in a campaign that loads: an old key
    name, a knob YAML reads as a string (`1e-3`), a secret on a server's command line. Each at
    file:line:col."""
    doc = sweep.expand(load_marked(campaign.source_text).data).doc(load_marked(campaign.source_text))
    if not isinstance(doc.data, dict):
        return []
    file = str(campaign.source_path)
    out: list[Problem] = []
    slo = _dig(doc.data, "workload", "slo")
    if isinstance(slo, dict) and OLD_TPOT_KEY in slo:
        mark = doc.locate(("workload", "slo", OLD_TPOT_KEY), key=True)
        out.append(Problem(file, mark.line, mark.col, (
            f"warning: slo.{OLD_TPOT_KEY} is judged against each request's TPOT (the mean gap "
            "between its tokens after the first), not the itl_p* chunk gaps: write tpot_ms")))
    if campaign.runtime == "attach":
        for i, window in enumerate(campaign.windows):
            mark = doc.locate(("windows", i, "change"), key=True)
            out.append(Problem(file, mark.line, mark.col, (
                f"warning: window {window.name!r}: runtime attach cannot apply its change "
                f"({', '.join(window.axes())}): ruler does not start the server, so the window "
                "measures the same server again; its delta is a repeat's, not the change's effect "
                "(the report says so)")))
    return (out + _string_knob_warnings(doc, file, campaign.source_text)
            + _shared_cpu_warnings(campaign, doc) + argv_warnings(campaign))


def _shared_cpu_warnings(campaign: Campaign, doc: MarkedDoc) -> list[Problem]:
    """Places on one machine (one docker_host and node) whose CPU sets overlap: their sessions run
    at once, so each measures with the other's load on its CPUs. A warning, not an error: a machine
    with fewer CPUs than places may mean it."""
    if campaign.parallel == 1:
        return []
    out: list[Problem] = []
    places = [(i, p, _cpu_ranges(p.cpus)) for i, p in enumerate(campaign.places) if p.cpus]
    for j, (i, spot, ranges) in enumerate(places):
        for _, other, other_ranges in places[:j]:
            shared = _overlap(other_ranges, ranges)
            if not shared or (other.docker_host, other.node) != (spot.docker_host, spot.node):
                continue
            mark = doc.locate(("places", i, "cpus"))
            cpus = ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in shared)
            many = "s" if len(shared) > 1 or shared[0][0] != shared[0][1] else ""
            out.append(Problem(str(campaign.source_path), mark.line, mark.col, (
                f"warning: places {other.name} and {spot.name} share CPU{many} {cpus}: sessions on "
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


def _string_knob_warnings(doc: MarkedDoc, file: str, text: str) -> list[Problem]:
    """A knob takes any JSON value, so one YAML reads as a string (`1e-3`) is sent as one; written
    in quotes, the string is meant."""
    lines = text.split("\n")  # as the marks count lines (not str.splitlines's U+2028)
    out: list[Problem] = []
    for path, value in _knobs(doc.data):
        hint = string_number(value, "a number") if isinstance(value, str) else ""
        mark = doc.locate(path)
        if hint and lines[mark.line - 1][mark.col - 1:mark.col] not in ("'", '"'):
            out.append(Problem(file, mark.line, mark.col,
                               f"warning: {dotted(path)} is the string {describe(value)}{hint}"))
    return out


# --- semantic checks ---------------------------------------------------------------------
# These run on the raw YAML data, whatever the schema said, so one pass reports everything.
# Each check only looks at values of the right shape; wrong shapes are the schema's to report.


def _semantic_issues(raw: Mapping[Any, Any], doc: MarkedDoc, base_dir: Path,
                     kept: frozen.Frozen | None) -> list[Issue]:
    """``kept``: what the run froze, when the file is a run's own campaign: a file whose texts
    it holds is not looked for."""
    return (_check_windows(raw, doc) + _check_axes(raw) + _check_sweeps(raw) + _check_stacks(raw)
            + _check_sessions(raw)
            + _check_places(raw)
            + _check_classes(raw, base_dir, kept.items if kept else {}) + _check_load(raw)
            + _check_runtime(raw) + _check_quality(raw, base_dir, kept.quality if kept else None)
            + _check_knobs(raw) + _check_verdict(raw))


def _check_verdict(raw: Mapping[Any, Any]) -> list[Issue]:
    verdict = raw.get("verdict")
    if not isinstance(verdict, Mapping) or verdict.get("until_decided") is not True:
        return []
    if verdict.get("max_boots") is None and verdict.get("max_minutes") is None:
        return [(("verdict", "until_decided"), False,
                 "verdict.until_decided adds boots until each window is decided: it needs a budget, "
                 "verdict.max_boots and/or verdict.max_minutes")]
    return []


def _check_load(raw: Mapping[Any, Any]) -> list[Issue]:
    """A workload measures at a concurrency (closed loop), a rate (open loop), or both; reps to
    a precision need a first stage of two reps or more, and room above it."""
    workload = raw.get("workload")
    if not isinstance(workload, dict):
        return []
    issues: list[Issue] = []
    given = workload.get("classes")
    classes: Mapping[Any, Any] = given if isinstance(given, dict) else {}
    kinds = {name: next((k for k in ("trace", "conversations") if isinstance(c, dict) and k in c), "")
             for name, c in classes.items()}
    # A trace brings its own load (its times); every other class is sent at the workload's.
    if not workload.get("concurrency") and not workload.get("rate") and (
            not kinds or any(k != "trace" for k in kinds.values())):
        issues.append((("workload",), True, "the workload has no load: give concurrency (closed "
                                            "loop: C workers) or rate (open loop: requests per "
                                            "second), or both"))
    elif not workload.get("concurrency"):
        issues += [(("workload", "classes", name, "conversations"), False,
                    f"class {name!r} is multi-turn: it needs workload.concurrency (a worker owns a "
                    "conversation and sends its turns in order)")
                   for name, kind in kinds.items() if kind == "conversations"]
    reps, cap = workload.get("reps", defaults.REPS), workload.get("max_reps", defaults.MAX_REPS)
    if workload.get("precision") is not None and isinstance(reps, int):
        if reps < 2:
            issues.append((("workload", "reps"), False, f"workload.precision needs reps >= 2 (the "
                                                       f"first stage's variance), not {reps}"))
        if isinstance(cap, int) and 1 <= cap < reps:
            issues.append((("workload", "max_reps"), False, f"max_reps {cap} is below reps {reps}"))
    return (issues + _check_row_labels(workload, "concurrency") + _check_row_labels(workload, "rate")
            + _check_capacity(workload, classes) + _check_arrivals(workload))


def _check_arrivals(workload: Mapping[Any, Any]) -> list[Issue]:
    """A rate's rep is its arrival times, made before it starts: at most MAX_REP_REQUESTS of them
    (rate x rep_seconds), over at most MAX_SECONDS. A capacity search over rates sends at rates
    between its range's ends, so each end is bound as a rate is."""
    seconds, per_rep = workload.get("rep_seconds"), workload.get("requests_per_rep")
    if per_rep is not None and not isinstance(per_rep, int):
        return []
    span = seconds if isinstance(seconds, int | float) and seconds > 0 else 10
    rates = workload.get("rate")
    given: list[tuple[tuple[Any, ...], Any]] = [
        (("workload", "rate", i), rate) for i, rate in enumerate(rates if isinstance(rates, list) else [])]
    cap = workload.get("capacity")
    if isinstance(cap, dict) and cap.get("over", "rate") == "rate" and isinstance(cap.get("range"), list):
        given += [(("workload", "capacity", "range", i), end) for i, end in enumerate(cap["range"])]
    issues: list[Issue] = []
    for at, rate in given:
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate <= MAX_RATE:
            continue  # the schema's to report
        if rate < MIN_RATE:  # the rate list's schema says so; a capacity range's bound is this
            if at[1] != "rate":
                issues.append((at, False, f"{dotted(at)}: a rate of at least {MIN_RATE:g} req/s, "
                                          f"got {rate:g}"))
            continue
        n = per_rep or max(4, math.ceil(span * rate))
        if n > MAX_REP_REQUESTS:
            issues.append((at, False, f"{_named(at)}rate {rate:g} req/s for rep_seconds {span:g} is {n} "
                                      f"arrivals a rep; at most {MAX_REP_REQUESTS} (shorten rep_seconds "
                                      "or lower the rate)"))
        elif n / rate > MAX_SECONDS:
            issues.append((at, False, f"{_named(at)}rate {rate:g} req/s sends its {n} requests a rep over "
                                      f"{n / rate:.3g} s; at most {MAX_SECONDS} (a week): raise the rate "
                                      "or send fewer requests"))
    return issues


def _named(at: tuple[Any, ...]) -> str:
    """A capacity range's end says which key it is; a rate of the list reads as itself."""
    return "" if at[1] == "rate" else f"{dotted(at)}: "


def _check_capacity(workload: Mapping[Any, Any], classes: Mapping[Any, Any]) -> list[Issue]:
    """A capacity search asks something (percentiles or a goodput share, which needs the SLO it is
    a share within), from a range low to high (whole numbers for a concurrency), for classes the
    workload has."""
    cap = workload.get("capacity")
    if not isinstance(cap, dict):
        return []
    where: tuple[Any, ...] = ("workload", "capacity")
    issues: list[Issue] = []
    if not cap.get("holds") and cap.get("goodput") is None:
        issues.append((where, True, "workload.capacity asks nothing: give holds (say {ttft_p99_ms: "
                                    "500, tpot_p99_ms: 50}) or goodput (a share within workload.slo)"))
    if cap.get("goodput") is not None and not workload.get("slo"):
        issues.append(((*where, "goodput"), True, "workload.capacity.goodput is a share of requests "
                                                  "within workload.slo: give the slo"))
    span = cap.get("range")
    if isinstance(span, list) and len(span) == 2 and all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in span):
        if span[0] >= span[1]:
            issues.append(((*where, "range"), False, f"workload.capacity.range: the low end {span[0]} "
                                                     f"must be below the high end {span[1]}"))
        if cap.get("over") == "concurrency" and any(not float(v).is_integer() or v > MAX_CONCURRENCY
                                                    for v in span):
            issues.append(((*where, "range"), False, "workload.capacity.range: a concurrency range is "
                                                     f"two whole numbers up to {MAX_CONCURRENCY}"))
    elif span is not None:
        issues.append(((*where, "range"), False, "workload.capacity.range: give [low, high]"))
    for i, name in enumerate(cap.get("classes") or [] if isinstance(cap.get("classes"), list) else []):
        if isinstance(name, str) and name not in classes:
            issues.append(((*where, "classes", i), False, f"workload.capacity.classes: no class "
                                                          f"{name!r}" + suggest(name, list(classes))))
    return issues


def _check_row_labels(workload: Mapping[Any, Any], key: str) -> list[Issue]:
    """Two loads of one label would be measured as one row, each pass writing over the other's
    receipts: a rate's label keeps six significant digits (r4 for both 4 and 4.0000001)."""
    given = workload.get(key)
    loads = given if isinstance(given, list) else []
    issues: list[Issue] = []
    first: dict[str, int] = {}
    for i, value in enumerate(loads):
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            continue  # the schema's to report
        # A float concurrency is the schema's to report; labelled as given, it stays its own row.
        label = (load_label(value, None)  # type: ignore[arg-type]  # a float: the schema's error
                 if key == "concurrency" else load_label(0, value))
        if label not in first:
            first[label] = i
            continue
        other = loads[first[label]]
        why = (": give each load once" if value == other else
               " (a row names its rate to six significant digits): give rates that differ in them")
        issues.append((("workload", key, i), False, f"workload.{key}[{i}]: {describe(value)} and "
                       f"workload.{key}[{first[label]}] ({describe(other)}) are one row, {label}{why}"))
    return issues


def _window_names(raw: Mapping[Any, Any]) -> list[tuple[int, str]]:
    items = raw.get("windows")
    if not isinstance(items, list):
        return []
    return [(i, w["name"]) for i, w in enumerate(items) if isinstance(w, dict)
            and isinstance(w.get("name"), str)]


def _session_lists(raw: Mapping[Any, Any]) -> dict[Any, list[Any]]:
    sessions = raw.get("sessions")
    if not isinstance(sessions, dict):
        return {}
    return {name: items for name, items in sessions.items() if isinstance(items, list)}


def _check_windows(raw: Mapping[Any, Any], doc: MarkedDoc) -> list[Issue]:
    issues: list[Issue] = []
    first: dict[str, int] = {}
    listed = {n for items in _session_lists(raw).values() for n in items if isinstance(n, str)}
    for i, name in _window_names(raw):
        where = ("windows", i, "name")
        if is_control(name):
            issues.append((where, False, f"{name!r} is reserved and cannot name a window"))
        elif RERUN_SUFFIX.search(name):
            issues.append((where, False, f"window {name!r}: a name ending in -rerun<N> is reserved "
                                         "(a window booted again for a rerun gets that suffix on "
                                         "its container's name)"))
        elif name in first:
            line = doc.locate(("windows", first[name], "name")).line
            issues.append((where, False, f"duplicate window name {name!r} (first at line {line})"))
        else:
            first[name] = i
        if name != CONTROL and isinstance(raw.get("sessions"), dict) and name not in listed:
            issues.append((where, False, f"window {name!r} is in no session"))
    return issues


def _valid_windows(raw: Mapping[Any, Any]) -> Iterator[tuple[int, Window]]:
    """Each window the schema accepts, with its index; the schema reports the others (a check over
    a broken window's change would only mislead)."""
    for i, item in enumerate(raw["windows"] if isinstance(raw.get("windows"), list) else []):
        try:
            yield i, Window.model_validate(item)
        except ValidationError:
            continue


def _check_axes(raw: Mapping[Any, Any]) -> list[Issue]:
    issues: list[Issue] = []
    for i, window in _valid_windows(raw):
        axes = window.axes()
        if not axes:
            message = f"window {window.name!r} changes nothing; a window changes exactly one axis"
        elif len(axes) > 1 and not window.multi_axis:
            message = (f"window {window.name!r} changes {len(axes)} axes ({', '.join(axes)}); "
                       "set multi_axis: true to allow it")
        else:
            continue
        issues.append((("windows", i, "change"), True, message))
    return issues


def _check_stacks(raw: Mapping[Any, Any]) -> list[Issue]:
    """A window on another stack (``server:``) brings its whole launch for the campaign's runtime,
    and is lossy by nature."""
    runtime = raw.get("runtime", "auto")
    start = _dig(raw, "slurm", "start") or "process"
    if runtime == "slurm":
        needs = ["command"] if start == "process" else ["image"]
    elif runtime == "auto":  # whichever the campaign can start, the window must start too
        needs = [k for k, section in (("image", "docker"), ("command", "process"))
                 if _dig(raw, section, k)]
    else:
        needs = {"docker": ["image"], "process": ["command"]}.get(str(runtime), [])
    issues: list[Issue] = []
    for i, window in _valid_windows(raw):
        if window.server is None:
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
        missing = [k for k in needs if not getattr(window.server, k)]
        if missing:
            issues.append((("windows", i, "server"), True, (
                f"window {name!r} is on another stack: its server needs its own "
                f"{' and '.join(missing)} for runtime {runtime} (the campaign's "
                f"{' and '.join('docker.image' if k == 'image' else 'process.command' for k in missing)}"
                " start the control's stack)")))
    return issues


def _check_sweeps(raw: Mapping[Any, Any]) -> list[Issue]:
    """The windows of one sweep change the same one axis, each to a value of its own; a sweep's
    name names no window (a session listing it would mean either)."""
    names = {name for _, name in _window_names(raw)}
    first: dict[str, tuple[int, str, Any]] = {}  # sweep -> (window index, its axis, its value)
    values: dict[str, dict[str, int]] = {}
    issues: list[Issue] = []
    for i, window in _valid_windows(raw):
        if window.sweep is None or len(window.axes()) != 1:
            continue  # no sweep; or _check_axes says what is wrong with its change
        where = ("windows", i, "sweep")
        if window.server is not None:
            issues.append((where, False, f"window {window.name!r} is on another stack (server:); a "
                                         "sweep varies one value of one axis, a stack is no value"))
            continue
        axis = window.axes()[0]
        value = window.change.value(axis)
        if window.sweep in names:
            issues.append((where, False, f"sweep {window.sweep!r} has the name of a window; a session "
                                         "listing it would mean either"))
        if window.sweep not in first:
            first[window.sweep] = (i, axis, value)
        elif first[window.sweep][1] != axis:
            other = raw["windows"][first[window.sweep][0]].get("name")
            issues.append((where, False, f"window {window.name!r} changes {axis} but window {other!r} "
                                         f"of the same sweep {window.sweep!r} changes "
                                         f"{first[window.sweep][1]}: a sweep varies one axis"))
            continue
        seen = values.setdefault(window.sweep, {})
        said = repr(value)
        if said in seen:
            other = raw["windows"][seen[said]]["name"]
            issues.append((where, False, f"sweep {window.sweep!r}: windows {other!r} and "
                                         f"{window.name!r} set {axis} to the same value"))
        seen.setdefault(said, i)
    return issues


def _check_sessions(raw: Mapping[Any, Any]) -> list[Issue]:
    names = [name for _, name in _window_names(raw)]
    issues: list[Issue] = []
    for session, items in _session_lists(raw).items():
        seen: set[str] = set()
        for j, name in enumerate(items):
            where = ("sessions", session, j)
            if not isinstance(name, str):
                continue
            if is_control(name):
                message = (f"session {session!r} lists {name!r}; every session boots the control "
                           "already (control_position says where)")
            elif name not in names:
                message = f"session {session!r} names unknown window {name!r}"
                message += suggest(name, names)
            elif name in seen:
                message = f"window {name!r} is listed twice in session {session!r}"
            else:
                seen.add(name)
                continue
            issues.append((where, False, message))
    return issues


def _check_places(raw: Mapping[Any, Any]) -> list[Issue]:
    places = raw.get("places")
    if not isinstance(places, list):
        return []
    issues: list[Issue] = []
    seen: set[str] = set()
    runtime = raw.get("runtime", "auto")
    for i, spot in enumerate(places):
        if not isinstance(spot, dict):
            continue
        name = spot.get("name")
        if isinstance(name, str) and name in seen:
            issues.append((("places", i, "name"), False, f"place {name!r} is listed twice"))
        seen.add(str(name))
        if spot.get("docker_host") and runtime not in ("docker", "auto"):
            issues.append((("places", i, "docker_host"), False,
                           f"docker_host needs runtime docker (the campaign's is {runtime!r})"))
        gpus = spot.get("gpus")
        if runtime == "slurm" and gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int)):
            issues.append((("places", i, "gpus"), False,
                           "on runtime slurm a place's gpus is a count (its share of the node: "
                           "--gres=gpu:N); Slurm picks the devices"))
        if runtime == "process" and gpus is not None and not isinstance(gpus, list) and gpus != "all":
            issues.append((("places", i, "gpus"), False,
                           "on runtime process a place's gpus is all or a list of device ids (they become "
                           "the server's CUDA_VISIBLE_DEVICES)"))
        if spot.get("node") and runtime != "slurm":
            issues.append((("places", i, "node"), False,
                           f"node needs runtime slurm (the campaign's is {runtime!r})"))
    return issues


def _check_classes(raw: Mapping[Any, Any], base_dir: Path, kept: Mapping[str, Any]) -> list[Issue]:
    workload = raw.get("workload")
    classes = workload.get("classes") if isinstance(workload, dict) else None
    issues: list[Issue] = []
    for name, cls in classes.items() if isinstance(classes, dict) else []:
        if not isinstance(cls, dict):
            continue
        where = ("workload", "classes", name)
        given = [key for key in SOURCES if cls.get(key) is not None]
        if len(given) != 1:
            keys = ", ".join(repr(k) for k in SOURCES)
            state = f"has both {' and '.join(repr(k) for k in given)}" if given else f"has none of {keys}"
            issues.append((where, True, f"class {name!r} {state}; give exactly one"))
            continue
        source = SOURCES[given[0]]
        try:  # the shape is the schema's to report; only a spec that validates reads its file
            spec = getattr(PromptClass.model_validate({source.key: cls[source.key]}), source.key)
        except ValidationError:
            continue
        file = source.file(spec)
        if file is not None and name not in kept:
            issues += _check_file((*where, source.key, *source.file_at), file, base_dir, source.what,
                                  functools.partial(source.check, spec))
    return issues


def _check_file(where: tuple[Any, ...], file: object, base_dir: Path, what: str,
                read: Callable[[Path], object] | None = None) -> list[Issue]:
    """The file exists and, with `read` (a reader raising ValueError), reads; else one issue."""
    if not isinstance(file, str) or "${" in file:  # ${...} resolves only at run time
        return []
    try:
        resolved = (base_dir / file).resolve()
        # One that is there but no file (a FIFO, a device) is its reader's to name.
        found = resolved.exists() if read is not None else resolved.is_file()
    except (OSError, ValueError) as exc:  # a NUL byte, a name longer than the system allows
        reason = getattr(exc, "strerror", None) or str(exc)
        return [(where, False, f"{what} {describe(file)} cannot be a path ({reason})")]
    if not found:
        return [(where, False, f"{what} not found: {resolved}")]
    try:
        if read is not None:
            read(resolved)
    except ValueError as exc:  # DataFileError: it names the file and the line
        return [(where, False, f"{what} {exc}")]
    return []


def _check_quality(raw: Mapping[Any, Any], base_dir: Path,
                   kept: Mapping[str, Any] | None) -> list[Issue]:
    """``kept``: a run's own campaign's frozen quality prompts (None for any other campaign)."""
    quality = raw.get("quality")
    if not isinstance(quality, dict):
        return []
    issues: list[Issue] = []
    for section, inline in (("greedy", "prompts"), ("kl", "texts")):
        part = quality.get(section)
        if not isinstance(part, dict):
            continue
        where = ("quality", section)
        if part.get(inline) is not None and part.get("file") is not None:
            issues.append((where, True, f"quality.{section} has both {inline!r} and 'file'; give one"))
        if kept is None or section not in kept:
            # A run an older ruler made froze no quality prompts: its copy names a file beside it.
            what = "prompt file" if kept is None else "prompt file (the run froze none of them)"
            issues += _check_file((*where, "file"), part.get("file"), base_dir, what, read_prompts)
        oracle = part.get("oracle")
        if section == "kl" and isinstance(oracle, dict):
            issues += _check_file((*where, "oracle", "receipt"), oracle.get("receipt"), base_dir,
                                  "oracle receipt", read_receipt)
    return issues


def _check_knobs(raw: Mapping[Any, Any]) -> list[Issue]:
    """Knobs go into every request as JSON, which has no infinity or NaN."""
    return [(path, False, f"{dotted(path)}: must be a finite number, got {describe(value)} "
                          "(requests are JSON)")
            for path, value in _knobs(raw) if isinstance(value, float) and not math.isfinite(value)]


def _knobs(raw: Mapping[Any, Any]) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Every value in workload.knobs and in a window's change.knobs, at its path, however deep."""
    def walk(value: Any, path: tuple[Any, ...]) -> Iterator[tuple[tuple[Any, ...], Any]]:
        if isinstance(value, dict):
            for key, item in value.items():
                yield from walk(item, (*path, key))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                yield from walk(item, (*path, i))
        else:
            yield path, value

    yield from walk(_dig(raw, "workload", "knobs"), ("workload", "knobs"))
    for i, window in enumerate(raw["windows"] if isinstance(raw.get("windows"), list) else []):
        change = window.get("change") if isinstance(window, dict) else None
        if isinstance(change, dict):
            yield from walk(change.get("knobs"), ("windows", i, "change", "knobs"))


_RUNTIME_NEEDS = {
    "docker": [("docker", "image")],
    "process": [("process", "command")],
    "attach": [("attach", "url")],
    "auto": [("docker", "image"), ("process", "command")],
}


def _check_runtime(raw: Mapping[Any, Any]) -> list[Issue]:
    runtime = raw.get("runtime", "auto")
    needs = _RUNTIME_NEEDS.get(runtime) if isinstance(runtime, str) else None
    start = _dig(raw, "slurm", "start") or "process"
    if runtime == "slurm":  # the job starts the campaign's command, or a container of its image
        needs = [("process", "command")] if start == "process" else [("docker", "image")]
        if start == "pyxis" and not _dig(raw, "docker", "command"):
            # srun runs a program, not the image's entrypoint: the server's flags would be srun's.
            return [(("slurm", "start"), False, "slurm.start pyxis needs docker.command (srun runs "
                                                "a program in the container, not the image's "
                                                "entrypoint)")]
    if not needs or any(_dig(raw, *keys) for keys in needs):
        return []
    wanted = " or ".join(".".join(keys) for keys in needs)
    why = f" (slurm.start: {start})" if runtime == "slurm" else ""
    return [(("runtime",), False, f"runtime {runtime!r} needs {wanted}{why}")]


def _dig(raw: Mapping[Any, Any], section: str, key: str) -> Any:
    value = raw.get(section)
    return value.get(key) if isinstance(value, dict) else None

