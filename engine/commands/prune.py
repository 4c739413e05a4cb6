"""``ruler prune [RUN_DIR ...] [--older-than DURATION] [--dry-run]``: remove the containers that
runs kept (``docker.keep``) once their runs are over.

A container is ruler's by its labels (``ruler.campaign``, ``ruler.run``: the run's id). Its run is
found by that id: among the RUN_DIRs given, else among the run directories under
``--results-dir``. A container is removed only when its run directory is found and no engine
holds that run's lock (engine/record/liveness.py): a live run's containers, the exited ones of
its earlier windows included, are never touched, nor are those of a run that cannot be found (it
may be live elsewhere): each is listed with why it is left.
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
from engine.record.liveness import engine_alive

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def duration(text: str) -> float:
    """Seconds of ``90s``, ``30m``, ``12h``, ``7d``, ``2w`` (or a sum: ``1h30m``)."""
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


def judge(containers: list[Any], runs: dict[str, Path], named: bool, older_than: float | None,
          now: dt.datetime) -> list[Verdict]:
    out = []
    for c in containers:
        rid = (c.labels or {}).get("ruler.run", "")
        run_dir = runs.get(rid)
        if run_dir is None:
            if named:
                continue  # not of the runs named: not this command's business
            out.append(Verdict(c, rid, False, "its run directory is not found here (give it)"))
        elif engine_alive(run_dir):
            out.append(Verdict(c, rid, False, f"its run is live ({run_dir})"))
        elif older_than is not None and _age(c, now) < older_than:
            out.append(Verdict(c, rid, False, f"younger than --older-than ({_age(c, now):.0f} s)"))
        else:
            out.append(Verdict(c, rid, True, f"its run is over ({run_dir})"))
    return out


def cmd_prune(run_dirs: list[str], older_than: str | None, dry_run: bool, results_dir: str) -> int:
    limit = duration(older_than) if older_than else None
    runs: dict[str, Path] = {}
    for d in run_dirs:
        path = Path(d)
        rid = results.run_id(path) if path.is_dir() else None
        if rid is None:
            raise BadInput(f"{path} is not a ruler run directory (no {results.ENGINE_JSON} or "
                           f"{results.JOURNAL} naming its run)")
        runs[rid] = path
    if not run_dirs:
        for path in run_dirs_under(Path(results_dir)):
            rid = results.run_id(path)
            if rid:
                runs.setdefault(rid, path)

    import docker.errors  # the Docker SDK only for this command

    from engine.runtime import docker as rd

    try:
        dc = rd.client()
        containers = dc.containers.list(all=True, filters={"label": rd.LABEL_CAMPAIGN})
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
