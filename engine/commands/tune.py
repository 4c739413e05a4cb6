"""``ruler tune TUNE.yaml`` and ``ruler tune --resume TUNE_DIR``: the tuner (engine.tune), handed
what starts a round's run (engine.commands.launch)."""

from __future__ import annotations

import argparse
from pathlib import Path

from engine import files
from engine.campaign.load import SpecError
from engine.commands import launch
from engine.commands.invocation import ruler_command
from engine.errors import BadInput
from engine.record import results
from engine.tune import journal
from engine.tune.loop import Launcher, run_tune
from engine.tune.spec import Tune, load_tune

FROZEN = "tune.yaml"  # the tune file as it was when the tune started


def cmd_tune(args: argparse.Namespace) -> int:
    if args.resume:
        # Absolute from here on: what the tune prints and records holds from any directory.
        tune_dir = Path(args.resume).resolve()
        if not (tune_dir / FROZEN).is_file():
            raise BadInput(f"{tune_dir} is not a ruler tune directory (no {FROZEN})")
        first = next((e for e in journal.read(tune_dir) if e["kind"] == "tune_started"), None)
        if first is None:
            raise BadInput(f"{tune_dir / journal.TUNE_JOURNAL}: no tune_started: nothing to resume")
        tune = _load(first["tune"])
        if tune.text != files.read_text(tune_dir / FROZEN):
            raise BadInput(f"{first['tune']} changed since the tune started; its frozen copy is "
                           f"{tune_dir / FROZEN}: restore it to resume")
        baseline, runtime = first["baseline"], first["runtime"]
    else:
        if not args.file:
            raise BadInput("ruler tune: give a tune FILE or --resume TUNE_DIR")
        tune = _load(args.file)
        baseline = str(Path(args.baseline).resolve()) if args.baseline else None
        if baseline and not (Path(baseline) / results.JOURNAL).is_file():
            raise BadInput(f"--baseline {args.baseline}: not a ruler run directory")
        runtime = args.runtime
        root = Path(args.results_dir).resolve()
        results.writable_dir(root, "--results-dir")
        tune_dir = results.new_run_dir(root, f"tune-{tune.name}")
        results.write_atomic(tune_dir / FROZEN, tune.text)
        journal.append(tune_dir, "tune_started", tune=str(tune.path), baseline=baseline, runtime=runtime)
    print(f"tune directory: {tune_dir}", flush=True)
    return run_tune(tune, tune_dir, baseline, runtime, Launcher(
        prepare=launch.prepare, refuse_damaged=launch.refuse_damaged, run_engine=launch.run_engine,
        ruler=ruler_command()))


def _load(path: str) -> Tune:
    try:
        return load_tune(path)
    except SpecError as e:
        raise BadInput("\n".join(str(p) for p in e.problems)) from e
