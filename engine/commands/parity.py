"""``ruler parity CAMPAIGN SERVER=URL SERVER=URL [...]``: whether running servers turn the
campaign's prompts into the same token ids (engine.quality.parity), before any number of theirs is
compared. Exit 0 when every prompt of every class is token-identical on every stack, 1 when one
differs or could not be compared, 2 on bad input (a STACK, the campaign, a prompt file)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from urllib.parse import urlsplit

from engine.campaign.load import SpecError, load_campaign
from engine.campaign.prompts import DataFileError
from engine.campaign.variables import UnresolvedVariable
from engine.errors import EXIT_BAD_INPUT, EXIT_ENGINE, EXIT_OK, BadInput
from engine.quality.parity import ClassParity, Parity, Stack, campaign_prompts, parity, rendering_knobs
from engine.sanitize import terminal
from engine.servers import get_adapter, known_adapters
from engine.servers.bounded import server_client
from engine.testbed import cached_variables

TIMEOUT_S = 60.0  # one rendering or tokenizing request; a loaded server may be slow to answer


@dataclass(frozen=True)
class StackSpec:
    server: str
    url: str  # the server's base URL, without /v1
    name: str = ""


def parse_stacks(specs: Sequence[str]) -> list[StackSpec]:
    """``SERVER=URL`` each; BadInput naming the spec and what is wrong. Two stacks of one server
    are told apart by their address."""
    if len(specs) < 2:
        raise BadInput(f"ruler parity: give two or more stacks as SERVER=URL (got {len(specs)})")
    out = [_stack(spec) for spec in specs]
    servers = [s.server for s in out]
    named = [StackSpec(s.server, s.url, s.server if servers.count(s.server) == 1
                       else f"{s.server}@{urlsplit(s.url).netloc}") for s in out]
    names = [s.name for s in named]
    if len(set(names)) < len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise BadInput(f"ruler parity: stack {twice} is given twice")
    return named


def _stack(spec: str) -> StackSpec:
    server, sep, url = spec.partition("=")
    where = f"ruler parity: stack {terminal(repr(spec))}"
    if not sep or not server or not url:
        raise BadInput(f"{where}: expected SERVER=URL, e.g. llamacpp=http://127.0.0.1:8080")
    if server not in known_adapters():
        raise BadInput(f"{where}: unknown server {terminal(repr(server))}; known: "
                       f"{', '.join(known_adapters())}")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise BadInput(f"{where}: {terminal(repr(url))} is not an http:// or https:// base URL")
    # The adapters add their own paths (/tokenize, /v1/...) to the server's root.
    return StackSpec(server, url.rstrip("/").removesuffix("/v1"))


def cmd_parity(campaign_path: str, stack_specs: Sequence[str], as_json: bool = False,
               max_prompts: int | None = None) -> int:
    specs = parse_stacks(stack_specs)
    if max_prompts is not None and max_prompts < 1:
        raise BadInput(f"ruler parity: --max-prompts must be at least 1 (got {max_prompts})")
    try:
        campaign = load_campaign(campaign_path)
        classes = campaign_prompts(campaign, cached_variables())
    except SpecError as e:
        for problem in e.problems:
            print(problem, file=sys.stderr)
        return EXIT_BAD_INPUT
    except DataFileError as e:
        raise BadInput(f"{campaign_path}: {e.what} {e}") from e
    except UnresolvedVariable as e:
        raise BadInput(f"{campaign_path}: unresolved variable {e} in a prompt file's path") from e
    if max_prompts is not None:
        classes = {cls: prompts[:max_prompts] for cls, prompts in classes.items()}
    knobs = rendering_knobs(campaign)
    with ExitStack() as clients:
        stacks = [Stack(s.name, get_adapter(s.server), clients.enter_context(
            server_client(s.url, TIMEOUT_S))) for s in specs]
        result = parity(classes, knobs, stacks)
    if as_json:
        print(json.dumps({"campaign": campaign.name, "file": campaign_path, "knobs": knobs,
                          "urls": {s.name: s.url for s in specs}, **result.as_json()}, indent=2))
    else:
        print(parity_text(campaign.name, campaign_path, knobs, specs, result), end="")
    return EXIT_OK if result.identical else EXIT_ENGINE


def parity_text(name: str, path: str, knobs: dict[str, object], specs: Sequence[StackSpec],
                result: Parity) -> str:
    """The table (class, stack, prompts, verdict), then each differing prompt in detail."""
    urls = {s.name: s.url for s in specs}
    others = ", ".join(f"{n} ({urls[n]})" for n in result.stacks[1:])
    out = [f"parity of {name} ({path}): reference {result.reference} ({urls[result.reference]}) "
           f"against {others}",
           f"knobs: {json.dumps(knobs) if knobs else 'none'}"]
    out += [f"stack {stack} was asked nothing more after: {why}" for stack, why in result.stack_errors]
    rows = [("class", "stack", "prompts", "verdict")]
    rows += [(c.cls, c.stack, str(len(c.prompts)), c.verdict) for c in result.classes]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    out.append("")
    out += ["  ".join(cell.ljust(w) for cell, w in zip(r[:3], widths, strict=True)) + "  " + r[3]
            for r in rows]
    for c in result.classes:
        out += _differences(result.reference, c) + _failures(c)
    if result.identical:
        verdict = "every prompt token-identical"
    elif result.differs:
        verdict = "NOT token-identical: numbers across these stacks are not the same measurement"
    else:
        verdict = "parity not shown: some prompts could not be compared"
    out += ["", verdict]
    return "".join(terminal(line) + "\n" for line in out)


def _differences(ref: str, c: ClassParity) -> list[str]:
    """Each differing prompt: the first differing position, both sides' ids and renderings."""
    out: list[str] = []
    other = c.stack
    w = max(len(ref), len(other))
    for p in c.differing:
        d = p.divergence
        assert d is not None
        out += ["", f"{c.cls} #{p.index} {p.preview!r} on {other}: first differing token at "
                    f"position {d.position} ({ref} {d.reference_tokens} tokens, {other} {d.tokens})",
                f"  ids from position {d.start} (the first differing one in >< ):",
                f"    {ref.ljust(w)}  {_ids(d.reference_ids, d.position - d.start)}",
                f"    {other.ljust(w)}  {_ids(d.ids, d.position - d.start)}"]
        if d.char is None:
            out.append(f"  renderings: the same text ({d.reference_text}); the tokenizers differ")
        else:
            out += [f"  renderings around character {d.char}:",
                    f"    {ref.ljust(w)}  {d.reference_text}",
                    f"    {other.ljust(w)}  {d.text}"]
    return out


def _ids(ids: Sequence[int], at: int) -> str:
    """Ids as a person compares two rows of them: the one at ``at`` marked."""
    return " ".join(f">{t}<" if i == at else str(t) for i, t in enumerate(ids)) or "(none)"


def _failures(c: ClassParity) -> list[str]:
    """The prompts not compared: one line when they share one reason (a stack that was down)."""
    errors = [p.error for p in c.failed]
    if not errors:
        return []
    if len(set(errors)) == 1 and len(errors) > 1:
        if len(errors) == len(c.prompts):
            return []  # the table's verdict says it
        return ["", f"{c.cls} on {c.stack}: {len(errors)} prompts not compared: {errors[0]}"]
    return ["", *(f"{c.cls} #{p.index} {p.preview!r} on {c.stack}: not compared: {p.error}"
                  for p in c.failed)]
