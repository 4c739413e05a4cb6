"""Starting a run: validate, resolve the runtime and the testbed, claim the run directory."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine import results
from engine.progress import printer
from engine.runner import EngineError, Phase, Runner, resolve_runtime
from engine.spec import Campaign, SpecError, load_campaign


def testbed_variables(campaign: Campaign, with_image: bool) -> dict[str, str]:
    """Prepare the local testbed only when the campaign references it."""
    if "${testbed." not in campaign.source_text:
        return {}
    from engine import testbed

    try:
        return testbed.ensure(with_image=with_image).variables()
    except testbed.TestbedError as e:
        raise EngineError(f"testbed: {e}") from e


def default_phases() -> list[Phase]:
    from engine.measure import Measurement

    return [Measurement()]


def cmd_run(args: argparse.Namespace) -> int:
    try:
        campaign = load_campaign(args.file)
    except SpecError as e:
        for p in e.problems:
            print(p, file=sys.stderr)
        return 2
    except OSError as e:
        print(f"{args.file}: {e.strerror or e}", file=sys.stderr)
        return 2
    try:
        runtime = resolve_runtime(campaign, args.runtime)
        variables = testbed_variables(campaign, with_image=runtime == "docker")
        run_dir = results.new_run_dir(Path(args.results_dir), campaign.name)
        runner = Runner(campaign, run_dir, runtime, variables, printer(), default_phases())
        results.write_atomic(run_dir / results.CAMPAIGN, runner.redact(campaign.source_text))
        results.write_json(run_dir / results.ENV, results.env_facts(
            runtime, runner.images() if runtime == "docker" else [], {"testbed": variables}))
        print(f"run directory: {run_dir}", flush=True)
        status = runner.run()
    except EngineError as e:
        print(f"ruler run: {e}", file=sys.stderr)
        return 1
    print(f"run directory: {run_dir}")
    return 0 if status in ("finished", "aborted") else 1
