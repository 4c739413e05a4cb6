"""The oracle of test_compare: what ``ruler compare`` was before its rows were matched by index
(issue 47), as it was written: the matching that scans the other run for each baseline row, the
conditions that took "not recorded in either run" for a difference (a window with no row's
prompts of no class; an older journal's requests per rep the frozen campaign says), each run's
judgement made again whenever another run's was asked for between. :func:`installed` puts them in
place of today's in ``engine.report.compare``: its ``comparison`` is then the one before."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from engine.method import acceptance
from engine.record.judgement import Judgement
from engine.record.results import ITEMS, PROMPTS
from engine.report import compare, text
from engine.report.compare import (
    BY_AXIS,
    BY_NAME,
    EXACT,
    UNRECORDED,
    Match,
    _launch,
    _time_scale,
    comparable_rows,
)
from engine.report.run import Row, RunView, read_json
from engine.words import CONTROL


def _rules(base: Row) -> list[tuple[str, Callable[[Row], bool]]]:
    same_shape: Callable[[Row], bool] = lambda r: r.shape == base.shape  # noqa: E731
    rules = [(EXACT, lambda r: r.key == base.key),
             (BY_NAME, lambda r: same_shape(r) and r.window == base.window)]
    if base.window != CONTROL and base.axis:  # every control's axis is "control": name only
        rules.append((BY_AXIS, lambda r: same_shape(r) and r.window != CONTROL
                      and r.axis == base.axis))
    return rules


def match_rows(views: Sequence[RunView]) -> list[Match]:
    rows = [comparable_rows(v) for v in views]
    used: list[set[int]] = [set() for _ in views]
    out: list[Match] = []
    for base in rows[0]:
        m = Match([base], [EXACT])
        for j, theirs in enumerate(rows[1:], start=1):
            found: tuple[int, str] | None = None
            for how, rule in _rules(base):
                found = next(((i, how) for i, r in enumerate(theirs)
                              if i not in used[j] and rule(r)), None)
                if found:
                    break
            if found:
                used[j].add(found[0])
            m.rows.append(theirs[found[0]] if found else None)
            m.how.append(found[1] if found else "")
        out.append(m)
    for j, theirs in enumerate(rows[1:], start=1):
        out += [Match([r if k == j else None for k in range(len(views))],
                      ["only here" if k == j else "" for k in range(len(views))])
                for i, r in enumerate(theirs) if i not in used[j]]
    return out


def _prompts(view: RunView, cls: str) -> list[Any] | None:
    frozen = read_json(view.dir / PROMPTS).get(cls)
    if isinstance(frozen, list):
        return [str(p) for p in frozen]
    items = read_json(view.dir / ITEMS).get(cls)
    if isinstance(items, list):
        return items
    spec = view.campaign.workload.classes.get(cls) if view.campaign else None
    return list(spec.prompts) if spec is not None and spec.prompts else None


def _requests(view: RunView, row: Row) -> Any:
    """As run_started recorded them, else not recorded: the frozen campaign was not asked."""
    return compare._requests(dataclasses.replace(view, campaign=None), row)


def conditions(view: RunView, row: Row) -> dict[str, Any]:
    c = view.campaign
    prompts = _prompts(view, row.cls)
    launch = _launch(view, row)
    return {
        f"prompts ({row.cls})": prompts if prompts is not None else UNRECORDED,
        "max_tokens": view.state.workload.get("max_tokens",
                                              c.workload.max_tokens if c else UNRECORDED),
        "sampling": c.workload.sampling.model_dump(mode="json") if c else UNRECORDED,
        "knobs": knobs if (knobs := view.knobs(row.window)) is not None else UNRECORDED,
        "requests per rep": _requests(view, row),
        **({"burstiness": c.workload.burstiness if c else UNRECORDED} if row.rate else {}),
        **({"time scale": _time_scale(view, row.cls)} if not row.concurrency and not row.rate else {}),
        "cache": row.cache or (c.workload.cache if c else UNRECORDED),
        "server": view.state.server or UNRECORDED,
        "server args": launch["argv"] if launch else UNRECORDED,
        "server env": launch["env"] if launch else UNRECORDED,
        "acceptance": acceptance.SIMULATED if acceptance.is_simulated(row.as_json())
        else acceptance.NATURAL,
    }


_KEPT = text.judgement_of  # today's, which keeps each run's with the run


def judgement_of(view: RunView) -> Judgement:
    """Made again at each ask: the one before kept only the last run's, and a comparison asks
    each of its runs' in turn."""
    view.derived.pop(_KEPT, None)
    return _KEPT(view)


@contextlib.contextmanager
def installed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``engine.report.compare`` as it was, for the block."""
    with monkeypatch.context() as m:
        m.setattr(compare, "match_rows", match_rows)
        m.setattr(compare, "conditions", conditions)
        m.setattr(compare, "judgement_of", judgement_of)
        m.setattr(text, "judgement_of", judgement_of)  # verdict()'s, in engine.report.text
        yield
