"""The ``ruler`` command line. Exit codes: 0 done, 1 engine error, 2 bad input."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from engine import __version__


def _cmd_testbed(args: argparse.Namespace) -> int:
    from engine import testbed

    try:
        tb = testbed.ensure(with_image=not args.no_image)
    except testbed.TestbedError as e:
        print(f"ruler testbed: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(tb.as_json(), indent=2))
        return 0
    print(f"llama-server   {tb.llama_server} ({tb.binary_source}, version {tb.version})")
    print(f"llama-quantize {tb.llama_quantize}")
    for quant, path in tb.models.items():
        print(f"model {quant:5}    {path}")
    print(f"image          {tb.image or '-'} {tb.image_id or ''} {tb.image_note}".rstrip())
    print(f"built: {', '.join(tb.built) or 'nothing'}")
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from engine.spec import cmd_validate

    return cmd_validate(args.file)


def _cmd_run(args: argparse.Namespace) -> int:
    from engine.launch import cmd_run

    return cmd_run(args)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ruler",
        description="Campaign-control console for LLM-serving benchmarks.",
    )
    p.add_argument("--version", action="version", version=f"ruler {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    t = sub.add_parser("testbed", help="prepare the local llama.cpp + SmolLM2 testbed (cached)")
    t.add_argument("--json", action="store_true", help="print what it produced as JSON")
    t.add_argument("--no-image", action="store_true", help="skip the Docker image")
    t.set_defaults(func=_cmd_testbed)

    v = sub.add_parser("validate", help="check a campaign file; problems as file:line:col")
    v.add_argument("file")
    v.set_defaults(func=_cmd_validate)

    r = sub.add_parser("run", help="run a campaign")
    r.add_argument("file")
    r.add_argument("--headless", action="store_true", help="plain progress lines, no console")
    r.add_argument("--results-dir", default="results", help="where run directories go")
    r.add_argument("--runtime", choices=["docker", "process", "attach"],
                   help="override the campaign's runtime")
    r.set_defaults(func=_cmd_run)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
