"""``ruler prune [RUN_DIR ...] [--older-than DURATION] [--dry-run]``: remove the containers that
runs kept (``docker.keep``) once their runs are over.

A container is ruler's by its labels (``ruler.campaign``, ``ruler.run``: the run's id). Its run is
found by that id: among the RUN_DIRs given, else among the run directories under
``--results-dir``; and of those, the one directory its labels name by an identity no copy of the
directory shares (``ruler.dir.id``: engine/record/results.py's dir_identity). A container is
removed only when ruler can prove its run is over: that directory is found and no engine holds
its lock (engine/record/liveness.py; a lock file deleted under its engine proves nothing while the
pid in engine.pid runs). Every other container is left, and listed with why: a live
run's (the exited ones of its earlier windows included); one whose directory is not found (it may
be live elsewhere) or is found only as a copy (the run it was copied from may be live); one whose
lock this process cannot open or take (not known to be over); one made before ruler labelled its
containers with their directory (which directory it belongs to cannot be proven).
"""

from __future__ import annotations

import datetime as dt
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import EXIT_ENGINE, EXIT_OK, BadInput
from engine.record import results
from engine.record.liveness import lock_state
from engine.runtime.base import LABEL_CAMPAIGN, LABEL_DIR, LABEL_DIR_ID, LABEL_RUN

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def duration(text: str) -> float:
    """Seconds of ``90s``, ``30m``, ``12h``, ``7d``, ``2w`` (or a sum: ``1h30m``)."""
    if not text.strip():  # an empty value is a mistake, never "no limit"
        raise BadInput(f"--older-than {text!r}: empty; expected a duration such as 90s, 30m, "
                       "12h, 7d or 2w (leave the option out for no age limit)")
    parts = re.findall(r"(\d+(?:\.\d+)?)([smhdw])", text.strip())
    if not parts or "".join(n + u for n, u in parts) != text.strip():
        raise BadInput(f"--older-than {text!r}: expected a duration such as 90s, 30m, 12h, 7d or 2w")
    return sum(float(n) * UNITS[u] for n, u in parts)


def run_dirs_under(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("*/") if (p / results.ENGINE_JSON).exists()
                  or (p / results.JOURNAL).exists()) if root.is_dir() else []


@dataclass
class Verdict:
    container: Any
    run: str
    remove: bool
    why: str  # why removed or left


def _age(container: Any, now: dt.datetime) -> float:
    """Seconds since the container last did anything: it ended, else it was created."""
    state = container.attrs.get("State") or {}
    stamp = state.get("FinishedAt") or ""
    if not stamp or stamp.startswith("0001-"):
        stamp = container.attrs.get("Created") or ""
    try:
        when = dt.datetime.fromisoformat(re.sub(r"(\.\d{6})\d*", r"\1", stamp).replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return (now - when).total_seconds()


def _left(c: Any, rid: str, why: str) -> Verdict:
    return Verdict(c, rid, False, why)


def _owner(c: Any, rid: str, candidates: list[Path]) -> Path | Verdict:
    """The directory among ``candidates`` (those with the container's run id) that the container
    belongs to, or the verdict that leaves it: no directory of its own is proven."""
    labels = c.labels or {}
    home, where = labels.get(LABEL_DIR_ID), labels.get(LABEL_DIR, "?")
    if not home:
        return _left(c, rid, "it does not name its run directory (made by an earlier ruler), so "
                     "that its run is over cannot be proven: remove it yourself once it is")
    mine = [p for p in candidates if results.dir_identity(p) == home]
    if mine:
        return mine[0]
    return _left(c, rid, f"it belongs to the run directory {where}, and "
                 f"{', '.join(map(str, candidates))} is a copy of it or that directory seen from "
                 "another machine (the run may be live there): give that directory")


def judge(containers: list[Any], runs: dict[str, list[Path]], named: bool, older_than: float | None,
          now: dt.datetime) -> list[Verdict]:
    out = []
    for c in containers:
        rid = (c.labels or {}).get(LABEL_RUN, "")
        candidates = runs.get(rid, [])
        if not candidates:
            if named:
                continue  # not of the runs named: not this command's business
            out.append(_left(c, rid, "its run directory is not found here (give it)"))
            continue
        run_dir = _owner(c, rid, candidates)
        if isinstance(run_dir, Verdict):
            out.append(run_dir)
            continue
        live, why = lock_state(run_dir)
        if live is None:
            out.append(_left(c, rid, f"whether its run is live is unknown: {why}"))
        elif live:
            out.append(_left(c, rid, f"its run is live ({run_dir})"))
        elif older_than is not None and _age(c, now) < older_than:
            out.append(_left(c, rid, f"younger than --older-than ({_age(c, now):.0f} s)"))
        else:
            out.append(Verdict(c, rid, True, f"its run is over ({run_dir})"))
    return out


def cmd_prune(run_dirs: list[str], older_than: str | None, dry_run: bool, results_dir: str) -> int:
    limit = duration(older_than) if older_than is not None else None
    # A run id names every copy of its directory: each is kept, and a container's labels tell
    # which one is its own (judge).
    runs: dict[str, list[Path]] = {}
    for d in run_dirs:
        path = Path(d)
        rid = results.run_id(path) if path.is_dir() else None
        if rid is None:
            raise BadInput(f"{path} is not a ruler run directory (no {results.ENGINE_JSON} or "
                           f"{results.JOURNAL} naming its run)")
        runs.setdefault(rid, []).append(path)
    if not run_dirs:
        for path in run_dirs_under(Path(results_dir)):
            rid = results.run_id(path)
            if rid:
                runs.setdefault(rid, []).append(path)

    import docker.errors  # the Docker SDK only for this command

    from engine.runtime import docker as rd

    try:
        containers = rd.labelled(LABEL_CAMPAIGN)
    except docker.errors.DockerException as e:
        print(f"ruler prune: the Docker engine does not answer ({e})", file=sys.stderr)
        return EXIT_ENGINE
    verdicts = judge(containers, runs, bool(run_dirs), limit, dt.datetime.now(dt.UTC))
    removed = 0
    for v in verdicts:
        name = f"{v.container.name} ({v.container.status}, run {v.run or '?'})"
        if not v.remove:
            print(f"left     {name}: {v.why}")
            continue
        if not dry_run:
            try:
                v.container.remove(force=True)
            except docker.errors.NotFound:
                continue  # gone meanwhile: nothing to say
            except docker.errors.DockerException as e:
                print(f"failed   {name}: {e}", file=sys.stderr)
                continue
        removed += 1
        print(f"{'would remove' if dry_run else 'removed '} {name}: {v.why}")
    left = sum(not v.remove for v in verdicts)
    print(f"{'would remove' if dry_run else 'removed'} {removed} container(s), left {left}")
    return EXIT_OK
