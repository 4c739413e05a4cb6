"""The workload's loads: it measures at a concurrency, a rate or both (a trace at its own); each
load one row; a rate's rep is arrivals made before it starts, so bounded; reps to a precision
start from two; a capacity search asks something, over a range, for classes the workload has."""

import math
from typing import Any

from engine.campaign.checks.draft import Draft
from engine.campaign.values import MAX_CONCURRENCY, MAX_SECONDS
from engine.campaign.workload import MAX_REP_REQUESTS, MIN_RATE
from engine.campaign.yamlmarks import Issue, KeyPath, describe, dotted, suggest
from engine.words import load_label

WORKLOAD: KeyPath = ("workload",)


def loads(d: Draft) -> list[Issue]:
    if not d.stands(WORKLOAD):
        return []
    return (_load(d) + _reps(d) + _row_labels(d, "concurrency") + _row_labels(d, "rate") + _capacity(d)
            + _arrivals(d))


def _load(d: Draft) -> list[Issue]:
    """A trace brings its own load (its times); every other class is sent at the workload's."""
    wl = d.campaign.workload
    kinds = {name: next((k for k in ("trace", "conversations")
                         if d.present((*WORKLOAD, "classes", name, k), getattr(spec, k))), "")
             for name, spec in wl.classes.items()}
    concurrency = d.given((*WORKLOAD, "concurrency"), wl.concurrency)
    if not concurrency and not d.given((*WORKLOAD, "rate"), wl.rate) and (
            not kinds or any(k != "trace" for k in kinds.values())):
        return [(WORKLOAD, True, "the workload has no load: give concurrency (closed loop: C workers) "
                                 "or rate (open loop: requests per second), or both")]
    if not concurrency:
        return [((*WORKLOAD, "classes", name, "conversations"), False,
                 f"class {name!r} is multi-turn: it needs workload.concurrency (a worker owns a "
                 "conversation and sends its turns in order)")
                for name, kind in kinds.items() if kind == "conversations"]
    return []


def _reps(d: Draft) -> list[Issue]:
    """Reps to a precision need a first stage of two reps or more, and room above it."""
    wl = d.campaign.workload
    if wl.precision is None or not d.stands((*WORKLOAD, "reps")):
        return []
    issues: list[Issue] = []
    if wl.reps < 2:
        issues.append(((*WORKLOAD, "reps"), False, f"workload.precision needs reps >= 2 (the first "
                                                   f"stage's variance), not {wl.reps}"))
    if d.stands((*WORKLOAD, "max_reps")) and wl.max_reps < wl.reps:
        issues.append(((*WORKLOAD, "max_reps"), False, f"max_reps {wl.max_reps} is below reps {wl.reps}"))
    return issues


def _row_labels(d: Draft, key: str) -> list[Issue]:
    """Two loads of one label would be measured as one row, each pass writing over the other's
    receipts: a rate's label keeps six significant digits (r4 for both 4 and 4.0000001)."""
    loads: tuple[Any, ...] = getattr(d.campaign.workload, key)
    issues: list[Issue] = []
    first: dict[str, int] = {}
    for i, value in enumerate(loads):
        label = load_label(value, None) if key == "concurrency" else load_label(0, value)
        if label not in first:
            first[label] = i
            continue
        at, other = (*WORKLOAD, key, i), (*WORKLOAD, key, first[label])
        why = (": give each load once" if value == loads[first[label]] else
               " (a row names its rate to six significant digits): give rates that differ in them")
        # Each as written: 4 and 4.0 are one load, said as the file says them.
        issues.append((at, False, f"{dotted(d.data_path(at))}: {describe(d.written(at))} and "
                                  f"{dotted(d.data_path(other))} ({describe(d.written(other))}) are "
                                  f"one row, {label}{why}"))
    return issues


def _capacity(d: Draft) -> list[Issue]:
    """A capacity search asks something (percentiles or a goodput share, which needs the SLO it is
    a share within), from a range low to high (whole numbers for a concurrency), for classes the
    workload has."""
    wl = d.campaign.workload
    cap, where = wl.capacity, (*WORKLOAD, "capacity")
    if cap is None or not d.stands(where):
        return []
    issues: list[Issue] = []
    goodput = d.present((*where, "goodput"), cap.goodput)
    if not d.given((*where, "holds"), cap.holds) and not goodput:
        issues.append((where, True, "workload.capacity asks nothing: give holds (say {ttft_p99_ms: "
                                    "500, tpot_p99_ms: 50}) or goodput (a share within workload.slo)"))
    if goodput and not d.given((*WORKLOAD, "slo"), wl.slo.model_fields_set):
        issues.append(((*where, "goodput"), True, "workload.capacity.goodput is a share of requests "
                                                  "within workload.slo: give the slo"))
    low, high = (d.written((*where, "range", n)) for n in (0, 1))
    if cap.range[0] >= cap.range[1]:
        issues.append(((*where, "range"), False, f"workload.capacity.range: the low end {low} "
                                                 f"must be below the high end {high}"))
    if cap.over == "concurrency" and any(not float(v).is_integer() or v > MAX_CONCURRENCY
                                         for v in cap.range):
        issues.append(((*where, "range"), False, "workload.capacity.range: a concurrency range is "
                                                 f"two whole numbers up to {MAX_CONCURRENCY}"))
    if not d.dropped((*WORKLOAD, "classes")):  # a class the schema dropped may be the one named
        issues += [((*where, "classes", i), False, f"workload.capacity.classes: no class {name!r}"
                    + suggest(name, list(wl.classes)))
                   for i, name in enumerate(cap.classes) if name not in wl.classes]
    return issues


def _arrivals(d: Draft) -> list[Issue]:
    """A rate's rep is its arrival times, made before it starts: at most MAX_REP_REQUESTS of them
    (rate x rep_seconds), over at most MAX_SECONDS. A capacity search over rates sends at rates
    between its range's ends, so each end is bound as a rate is."""
    wl = d.campaign.workload
    if not (d.stands((*WORKLOAD, "rep_seconds")) and d.stands((*WORKLOAD, "requests_per_rep"))):
        return []
    span = wl.rep_seconds or 10
    given: list[tuple[KeyPath, float]] = [((*WORKLOAD, "rate", i), rate) for i, rate in enumerate(wl.rate)]
    cap = wl.capacity
    if cap is not None and cap.over == "rate" and d.stands((*WORKLOAD, "capacity", "over")):
        given += [((*WORKLOAD, "capacity", "range", i), end) for i, end in enumerate(cap.range)]
    issues: list[Issue] = []
    for at, rate in given:
        named = "" if at[1] == "rate" else f"{dotted(at)}: "  # a rate of the list reads as itself
        if rate < MIN_RATE:  # the rate list's schema says so; a capacity range's bound is this
            issues.append((at, False, f"{dotted(at)}: a rate of at least {MIN_RATE:g} req/s, got {rate:g}"))
            continue
        n = wl.requests_per_rep or max(4, math.ceil(span * rate))
        if n > MAX_REP_REQUESTS:
            issues.append((at, False, f"{named}rate {rate:g} req/s for rep_seconds {span:g} is {n} "
                                      f"arrivals a rep; at most {MAX_REP_REQUESTS} (shorten rep_seconds "
                                      "or lower the rate)"))
        elif n / rate > MAX_SECONDS:
            issues.append((at, False, f"{named}rate {rate:g} req/s sends its {n} requests a rep over "
                                      f"{n / rate:.3g} s; at most {MAX_SECONDS} (a week): raise the rate "
                                      "or send fewer requests"))
    return issues
