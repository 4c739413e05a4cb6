"""``ruler compare RUN_A RUN_B [...]``: the same rows of several runs side by side.

A row means the same thing in every run (one shape of one window: median rep tok/s, spread over
the reps, acceptance from the same definitions), whatever the server, so runs on SGLang and vLLM
compare row by row. The first run is the baseline. A row of another run is matched to a baseline
row by session, window, class and concurrency; failing that by window name (in any session),
then by the window's axis text, so a campaign whose sessions or window names were reorganised
still lines up. Each match says how it was made; rows nothing matched are listed as such. A
window without rows (rejected at boot, failed) takes part as one line carrying its status.

Two matched rows are alike when what shapes their figures is the same in both runs (``conditions``:
the class's prompts, max_tokens, sampling, knobs, requests per rep, cache policy, the server and
the window's arguments and environment). A delta between unlike rows is the effect of those
differences as much as of anything else: it is not given unless asked (``--allow-different``),
and the differences are printed beside the row either way. The image, the host and ruler's version
are not conditions: they are what a comparison across runs is usually for, and each run's line
names them.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from engine.method import acceptance
from engine.record.events import EventKind
from engine.record.figures import CSV_COLUMNS
from engine.record.judgement import Judgement
from engine.record.results import ITEMS, PROMPTS
from engine.report import CONTROL, Delta, ReportError, Row, RunView, delta, load_run, pct, tok
from engine.report.run import csv_row, read_json
from engine.report.text import judgement_of, verdict
from engine.sanitize import terminal
from engine.words import WindowStatus

EXACT, BY_NAME, BY_AXIS = "exact", "window name", "axis"


@dataclass
class Match:
    """One line of the comparison: a row per run (None where the run has none)."""

    rows: list[Row | None]
    how: list[str]  # per run: exact | window name | axis | "" (no row)

    @property
    def first(self) -> Row:
        return next(r for r in self.rows if r is not None)

    def label(self) -> str:
        r = self.first
        if not r.concurrency and not r.rate:
            return f"{r.session}-{r.window} (window)"
        return f"{r.session}-{r.window} {r.cls} {r.load}"


def comparable_rows(view: RunView) -> list[Row]:
    """The run's rows, plus a stand-in (no class, C0) for each window that has none: a window
    rejected at boot in one run and measured in another is a result to see side by side."""
    have = {(r.session, r.window) for r in view.rows}
    return list(view.rows) + [
        csv_row(dict.fromkeys(CSV_COLUMNS, "") | {"session": ws.session, "window": ws.window,
                                                 "axis": ws.axis, "status": ws.status,
                                                 "reason": ws.reason})
        for ws in view.windows()
        if (ws.session, ws.window) not in have
        and ws.status in (WindowStatus.REJECTED, WindowStatus.FAILED, WindowStatus.ABORTED)]


class Unused:
    """One run's rows by what a rule matches on, each key's rows in the run's order: the first
    row not yet used under a key is found without a scan of the run (a day-long run has thousands
    of rows, and each baseline row looks for one)."""

    def __init__(self, rows: list[Row]) -> None:
        self.rows, self.used = rows, set[int]()
        self.by: dict[str, dict[Any, deque[int]]] = {EXACT: {}, BY_NAME: {}, BY_AXIS: {}}
        for i, r in enumerate(rows):
            self.by[EXACT].setdefault(r.key, deque()).append(i)
            self.by[BY_NAME].setdefault((r.shape, r.window), deque()).append(i)
            if r.window != CONTROL:  # a control is matched by name only
                self.by[BY_AXIS].setdefault((r.shape, r.axis), deque()).append(i)

    def take(self, how: str, key: Any) -> int | None:
        """The first row under ``key`` not used yet, now used; None when there is none."""
        waiting = self.by[how].get(key)
        while waiting:
            i = waiting.popleft()  # a row used under another key is dropped here once
            if i not in self.used:
                self.used.add(i)
                return i
        return None


def _keys(base: Row) -> list[tuple[str, Any]]:
    """The rules a row of another run is matched to ``base`` by, in order, each with its key: the
    same session, window, class and load; else the same shape of a window of the same name; else
    (not for a control, whose every axis is "control") the same shape of a window of the same axis."""
    keys: list[tuple[str, Any]] = [(EXACT, base.key), (BY_NAME, (base.shape, base.window))]
    if base.window != CONTROL and base.axis:
        keys.append((BY_AXIS, (base.shape, base.axis)))
    return keys


def match_rows(views: Sequence[RunView]) -> list[Match]:
    """Baseline rows in their order, each with its match in every other run, then the leftovers."""
    rows = [comparable_rows(v) for v in views]
    others = [Unused(theirs) for theirs in rows[1:]]
    out: list[Match] = []
    for base in rows[0]:
        m = Match([base], [EXACT])
        for theirs in others:
            found = next(((i, how) for how, key in _keys(base)
                          if (i := theirs.take(how, key)) is not None), None)
            m.rows.append(theirs.rows[found[0]] if found else None)
            m.how.append(found[1] if found else "")
        out.append(m)
    for j, theirs in enumerate(others, start=1):
        for i, r in enumerate(theirs.rows):
            if i not in theirs.used:
                alone: list[Row | None] = [None] * len(views)
                alone[j] = r
                hows = [""] * len(views)
                hows[j] = "only here"
                out.append(Match(alone, hows))
    return out


def control_of(view: RunView, row: Row | None) -> Row | None:
    if row is None:
        return None
    return view.rows_of(row.session, CONTROL).get(row.shape)


def cross_noise(base_view: RunView, view: RunView, row: Row) -> Judgement:
    """Whose noise between boots a row of another run is judged by against the baseline's: the
    run whose boots moved more at that load (two runs are at least two boots apart)."""
    mine, theirs = judgement_of(view), judgement_of(base_view)
    a, b = (j.noise_of(row.cls, row.concurrency, row.rate) for j in (mine, theirs))
    if b is None or not b.usable:
        return mine
    return theirs if a is None or not a.usable or b.boot_mean > a.boot_mean else mine


UNRECORDED = "not recorded"


def _short(value: Any) -> str:
    """A condition's value as it reads beside a row (a hash shortened to what tells two apart)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _once(view: RunView, key: Any, make: Callable[[], Any]) -> Any:
    """``make()`` once per view and key: the same for every row of a window or a class."""
    if key not in view.derived:
        view.derived[key] = make()
    return view.derived[key]


def _prompts(view: RunView, cls: str) -> list[Any] | None:
    """What the class's requests were built from: the run's frozen prompts.json (a plain class's
    prompts) or items.json (any other class's items), else the campaign's own list (a run
    recorded before prompts were frozen)."""
    frozen = _once(view, PROMPTS, lambda: read_json(view.dir / PROMPTS)).get(cls)
    if isinstance(frozen, list):
        return [str(p) for p in frozen]
    items = _once(view, ITEMS, lambda: read_json(view.dir / ITEMS)).get(cls)
    if isinstance(items, list):
        return items
    spec = view.campaign.workload.classes.get(cls) if view.campaign else None
    return list(spec.prompts) if spec is not None and spec.prompts else None


def _requests(view: RunView, row: Row) -> Any:
    """Requests per rep at the row's load, as run_started recorded them, else as the frozen
    campaign sizes a pass (an older engine's run_started did not record them)."""
    w, c = view.state.workload, view.campaign
    loads, counts = (w.get("rate"), w.get("rate_requests")) if row.rate else (
        w.get("concurrency"), w.get("requests"))
    at = row.rate if row.rate else row.concurrency
    if isinstance(loads, list) and isinstance(counts, list) and at in loads:
        i = loads.index(at)
        return counts[i] if i < len(counts) else UNRECORDED
    if c is None:
        return UNRECORDED
    return c.workload.requests_at(row.rate) if row.rate else c.workload.requests_for(row.concurrency)


def _launch(view: RunView, row: Row) -> dict[str, Any] | None:
    """The window's server invocation (its last boot's), the port ruler picked left out."""
    started = [e for e in view.of(EventKind.WINDOW_STARTED, row.session, row.window)
               if isinstance(e.get("plan"), dict)]
    if not started:
        return None
    plan = started[-1]["plan"]
    port = str(plan.get("host_port"))
    argv = plan.get("argv") if isinstance(plan.get("argv"), list) else []
    return {"argv": ["<port>" if str(a) == port else a for a in argv], "env": plan.get("env")}


def _time_scale(view: RunView, cls: str) -> Any:
    spec = view.campaign.workload.classes.get(cls) if view.campaign else None
    return spec.trace.time_scale if spec is not None and spec.trace is not None else UNRECORDED


def conditions(view: RunView, row: Row) -> dict[str, Any]:
    """What shapes a row's figure besides what is measured, by name: two rows compare as an
    effect only when these are equal. Missing from the run's record: ``UNRECORDED``. A window
    with no row (rejected at boot, failed) sent no request: only its server's invocation."""
    c = view.campaign
    launch = _once(view, ("launch", row.session, row.window), lambda: _launch(view, row))
    boot = {
        "server": view.state.server or UNRECORDED,
        "server args": launch["argv"] if launch else UNRECORDED,
        "server env": launch["env"] if launch else UNRECORDED,
    }
    if not row.cls:
        return boot
    prompts = _once(view, ("prompts", row.cls), lambda: _prompts(view, row.cls))
    knobs = _once(view, ("knobs", row.window), lambda: view.knobs(row.window))
    trace = not row.concurrency and not row.rate
    return {
        f"prompts ({row.cls})": prompts if prompts is not None else UNRECORDED,
        "max_tokens": view.state.workload.get("max_tokens",
                                              c.workload.max_tokens if c else UNRECORDED),
        "sampling": _once(view, "sampling", lambda: c.workload.sampling.model_dump(mode="json"))
        if c else UNRECORDED,
        "knobs": knobs if knobs is not None else UNRECORDED,
        # A trace row sends its items, at their times: its class's items say how many.
        **({} if trace else {"requests per rep": _requests(view, row)}),
        # A rate row's arrivals: the gamma shape of its gaps (1 is Poisson, the only one before).
        **({"burstiness": c.workload.burstiness if c else UNRECORDED} if row.rate else {}),
        # A trace row's schedule: its items' times (in the items) times the class's scale.
        **({"time scale": _time_scale(view, row.cls)} if trace else {}),
        "cache": row.cache or (c.workload.cache if c else UNRECORDED),
        # Simulated acceptance (engine.method.acceptance) against measured: never a delta.
        "acceptance": acceptance.SIMULATED if acceptance.is_simulated(row.as_json())
        else acceptance.NATURAL,
        **boot,
    }


def _prompt_diff(a: list[Any], b: list[Any]) -> str:
    if len(a) != len(b):
        return f"{len(a)} vs {len(b)} prompts"
    n = sum(x != y for x, y in zip(a, b, strict=True))
    digest = [hashlib.sha256(json.dumps(p).encode()).hexdigest()[:8] for p in (a, b)]
    return f"{n} of {len(a)} differ (sha256 {digest[0]} vs {digest[1]})"


def _args_diff(a: list[Any], b: list[Any]) -> str:
    only_a = [x for x in a if x not in b]
    only_b = [x for x in b if x not in a]
    return f"{' '.join(map(str, only_a)) or '-'} vs {' '.join(map(str, only_b)) or '-'}"


def differences(a: dict[str, Any], b: dict[str, Any]) -> dict[str, str]:
    """Each condition that differs between two rows, with how: ``{"max_tokens": "8 vs 64"}``."""
    out: dict[str, str] = {}
    for name, va in a.items():
        vb = b.get(name, UNRECORDED)
        if va == vb and va != UNRECORDED:
            continue
        if va == vb:
            out[name] = f"{UNRECORDED} in either run"
        elif isinstance(va, list) and isinstance(vb, list) and name.startswith("prompts"):
            out[name] = _prompt_diff(va, vb)
        elif isinstance(va, list) and isinstance(vb, list):
            out[name] = _args_diff(va, vb)
        else:
            out[name] = f"{_short(va)} vs {_short(vb)}"
    return out


def unlike_text(diff: dict[str, str]) -> str:
    return "; ".join(f"{name} {how}" for name, how in diff.items())


def cell(row: Row | None) -> str:
    if row is None:
        return "-"
    if row.agg_tok_s is None:
        return row.status or "-"
    # The spread is (max - min) / mean of the reps, not a ± around the median: named as such.
    text = f"{tok(row.agg_tok_s)} (spread {pct(row.spread)})" if row.reps > 1 else tok(row.agg_tok_s)
    return text if row.usable else f"{text} {row.status}"


def run_line(tag: str, view: RunView) -> str:
    st, host = view.state, (view.env.get("host") or {})
    return (f"{tag} = {view.dir} (campaign {st.campaign or '?'}, server {st.server or '?'}, runtime "
            f"{st.runtime or '?'}, host {host.get('node', '?')}, ruler "
            f"{view.env.get('ruler_version', '?')}, status {st.status}, {len(view.rows)} rows)")


def tags(n: int) -> list[str]:
    return [chr(ord("A") + i) if i < 26 else f"R{i + 1}" for i in range(n)]


def comparison(views: Sequence[RunView], allow_different: bool = False, shared: bool = False,
               ) -> tuple[list[str], list[list[str]], list[dict[str, Any]]]:
    """Headers, text rows and the same as JSON records. A delta against A between unlike rows is
    left out unless ``allow_different``; their differences are given beside the row either way.
    ``shared``: only the rows every run has."""
    t = tags(len(views))
    headers = ["row"] + [f"{x} tok/s" for x in t] + [f"Δ {x} vs A" for x in t[1:]] + [
        f"{x} Δ vs own control" for x in t] + [f"{x} accept len/rate" for x in t] + [
        "matched by", "unlike A"]
    text: list[list[str]] = []
    records: list[dict[str, Any]] = []
    for m in match_rows(views):
        if shared and any(r is None for r in m.rows):
            continue
        base = m.rows[0]
        diffs: list[dict[str, str] | None] = [
            differences(conditions(views[0], base), conditions(v, r))
            if r is not None and base is not None else None
            for v, r in zip(views[1:], m.rows[1:], strict=True)]
        vs_first: list[Delta | None] = [
            delta(r, base, cross_noise(views[0], v, r)) if r is not None and base is not None
            else None for v, r in zip(views[1:], m.rows[1:], strict=True)]
        shown = [d if not diff or (allow_different and "acceptance" not in diff) else None
                 for d, diff in zip(vs_first, diffs, strict=True)]
        vs_ctl = [verdict(v, r) if r is not None
                  and r.window != CONTROL and (r.concurrency or r.rate) else None
                  for v, r in zip(views, m.rows, strict=True)]
        accept = [f"{r.accept_len:.2f}/{r.accept_rate:.3f}"
                  + (" simulated" if acceptance.is_simulated(r.as_json()) else "")
                  if r and r.accept_len is not None and r.accept_rate is not None else "-"
                  for r in m.rows]
        how = ", ".join(f"{x}: {h}" for x, h in zip(t[1:], m.how[1:], strict=True) if h) or "-"
        unlike = " | ".join(f"{x}: {unlike_text(diff)}" for x, diff in zip(t[1:], diffs, strict=True)
                            if diff) or "-"
        text.append([m.label()] + [cell(r) for r in m.rows]
                    + [d.text() if d else "unlike: no effect given" if diff else "-"
                       for d, diff in zip(shown, diffs, strict=True)]
                    + [d.text() if d else "-" for d in vs_ctl] + accept + [how, unlike.replace("|", "/")])
        records.append({"row": m.label(), "matched_by": m.how,
                        "runs": [r.as_json() if r else None for r in m.rows],
                        "differences": [None, *diffs],
                        "delta_vs_first": [None] + [d.as_json() if d else None for d in shown],
                        "delta_vs_own_control": [d.as_json() if d else None for d in vs_ctl]})
    return headers, text, records


def unlike_note(records: list[dict[str, Any]], allow_different: bool) -> str:
    """One line for the runs that differ in what shapes the figures, by what and how many rows."""
    tally: dict[str, int] = {}
    rows = 0
    for rec in records:
        names = {n for diff in rec["differences"] if diff for n in diff}
        rows += bool(names)
        for n in names:
            tally[n] = tally.get(n, 0) + 1
    if not rows:
        return ""
    what = ", ".join(f"{n} ({k} rows)" for n, k in tally.items())
    if allow_different:
        return (f"unlike runs: {rows} matched rows differ in what shapes the figures: {what}; "
                "their deltas are given (--allow-different): read them as the effect of those "
                "differences too (each row's are in \"unlike A\").")
    return (f"unlike runs: {rows} matched rows differ in what shapes the figures: {what}; no "
            "delta is given for them (each row's differences are in \"unlike A\"; "
            "--allow-different gives them anyway).")


def aligned(headers: list[str], rows: list[list[str]]) -> list[str]:
    """A markdown table padded into columns: readable in a terminal, pasteable into a post."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"
    return [line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(r) for r in rows]


def servers_note(views: Sequence[RunView]) -> str:
    servers = list(dict.fromkeys(v.state.server for v in views if v.state.server))
    if len(servers) < 2:
        return ""
    return (f"servers differ ({' vs '.join(servers)}): each row was measured by the same ruler "
            "(same requests, same tok/s, spread and acceptance definitions).")


def without_empty_columns(headers: list[str], text: list[list[str]]) -> tuple[list[str], list[list[str]]]:
    """The table less the columns with nothing to say ("-" in every row: no speculation, no
    window against a control): a terminal's width goes to what differs."""
    keep = [i for i, h in enumerate(headers) if i == 0 or any(row[i] != "-" for row in text)]
    return [headers[i] for i in keep], [[row[i] for i in keep] for row in text]


def without_exact_matches(headers: list[str], text: list[list[str]], records: list[dict[str, Any]],
                          ) -> tuple[list[str], list[list[str]], str]:
    """The table less its "matched by" column when every row of every run matched exactly, said
    once above the table instead: the same words on every row took a terminal's width for nothing."""
    if "matched by" not in headers or any(how not in (EXACT, "") for rec in records
                                          for how in rec["matched_by"][1:]):
        return headers, text, ""
    i = headers.index("matched by")
    return ([h for j, h in enumerate(headers) if j != i], [[c for j, c in enumerate(r) if j != i]
                                                           for r in text],
            "every row matched exactly: the same session, window, class and load in every run")


def without_common_differences(headers: list[str], text: list[list[str]],
                               ) -> tuple[list[str], list[list[str]], str]:
    """The table less its "unlike A" column when every row differs from A in the same way (two
    runs at other lengths or prompts differ so on every row), said once above the table instead:
    the longest cell of the table, repeated, pushed it far past a terminal's width."""
    if "unlike A" not in headers or not text:
        return headers, text, ""
    i = headers.index("unlike A")
    said = {row[i] for row in text}
    if len(said) != 1 or said == {"-"}:
        return headers, text, ""
    return ([h for j, h in enumerate(headers) if j != i], [[c for j, c in enumerate(r) if j != i]
                                                           for r in text],
            f"unlike A on every row: {said.pop()}")


def cmd_compare(run_dirs: list[str], as_json: bool = False, allow_different: bool = False,
                shared: bool = False) -> int:
    if len(run_dirs) < 2:
        print("ruler compare: give at least two run directories", file=sys.stderr)
        return 2
    try:
        views = [load_run(d) for d in run_dirs]
    except ReportError as e:  # it may quote the runs' files, which ruler may not have written
        print(terminal(e), file=sys.stderr)
        return 2
    headers, text, records = comparison(views, allow_different, shared)
    if as_json:
        print(json.dumps({"runs": [{"tag": x, "dir": str(v.dir), "campaign": v.state.campaign,
                                    "server": v.state.server, "runtime": v.state.runtime,
                                    "status": v.state.status}
                                   for x, v in zip(tags(len(views)), views, strict=True)],
                          "allow_different": allow_different,
                          "rows": records}, indent=2, default=str))
        return 0
    for x, v in zip(tags(len(views)), views, strict=True):
        print(terminal(run_line(x, v)))
    for note in (servers_note(views), unlike_note(records, allow_different)):
        if note:
            print(terminal(note))
    print("Δ: run / A - 1 per row from the two rows' reps, [95 % interval] counting the noise "
          "between boots (the noisier run's at that load, else the declared verdict.boot_noise); "
          "effect: p below the campaign's error rate for that one comparison; Δ vs own control: "
          "each run's own call (its campaign's family).")
    if shared:
        print("only the rows every run has (--shared)")
    headers, text, exact = without_exact_matches(*without_empty_columns(headers, text), records)
    headers, text, common = without_common_differences(headers, text)
    for line in (exact, common):
        if line:
            print(terminal(line))
    print()
    print("\n".join(map(terminal, aligned(headers, text))))
    return 0
