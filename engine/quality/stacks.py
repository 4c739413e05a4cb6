"""Parity on the row: a window on another stack (``server:`` in the campaign) is compared with its
control only where both stacks were sent the same tokens.

``StackParity()(run, ctx)`` runs before the measurement on the control and on every window on
another stack: the booted server renders and tokenizes every prompt of every class itself
(engine.quality.parity: its chat template, its tokenizer, through its own endpoints, with the
control's request knobs) and keeps them in ``renderings.json`` in its window's directory. Once a
session has both its control's renderings and a stack window's (whichever boots second compares,
so ``control_position: last`` is served too), the ids are compared prompt by prompt:
``parity.json`` beside the window's receipts and a ``parity`` event, per class "token-identical"
or "differs on N of M prompts". The fold keeps it on the window (``WindowState.parity``);
engine.record.judgement withholds the delta of a class that is not token-identical unless the
campaign sets ``verdict.allow_different``.

The record says what else both stacks were sent: the same sampling (the workload's, on every
window), and each stack's fields that fix an output length (``workload.exact_output``), or that
one of them has none, so its rows may decode fewer tokens than the other's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine import files
from engine.campaign.sources.item import Message
from engine.campaign.spec import Campaign
from engine.context import RunContext, WindowContext
from engine.quality.parity import Parity, Rendered, Stack, against, render_all, rendering_knobs
from engine.record import results
from engine.record.events import EventKind
from engine.servers import get_adapter
from engine.servers.bounded import server_client
from engine.words import CONTROL

RENDERINGS = "renderings.json"
PARITY = "parity.json"


class StackParity:
    """Callable phase; does nothing in a campaign with no window on another stack. It keeps the
    renderings of the run's boots in memory too: the record withholds the ids of a prompt that
    holds a secret, which the comparison needs (a resumed run compares those by digest)."""

    def __init__(self) -> None:
        self._renderings: dict[tuple[str, str, str], Rendered] = {}

    def __call__(self, run: RunContext, ctx: WindowContext) -> None:
        c = run.campaign
        stacks = [w for w in c.stack_windows() if w in c.sessions[ctx.session]]
        if not stacks or (ctx.window != CONTROL and ctx.window not in stacks):
            return
        classes = {cls: [list(item["messages"]) for item in items] for cls, items in run.items.items()}
        with server_client(ctx.server.base_url, c.timeouts.request) as client:
            mine = render_all(classes, rendering_knobs(c), Stack(ctx.adapter.name, ctx.adapter, client))
        self._renderings[(str(run.run_dir), ctx.session, ctx.window)] = mine
        results.write_json(ctx.dir / RENDERINGS, {"session": ctx.session, "window": ctx.window,
                                                  "server": ctx.adapter.name,
                                                  **mine.as_json(holds_secret(ctx.dir))})
        pending = [ctx.window] if ctx.window != CONTROL else [
            w for w in stacks if not _shown(run, ctx.session, w)]
        control = mine if ctx.window == CONTROL else self._kept(run, ctx.session, CONTROL)
        if control is None:
            return  # control_position last: the control compares when it boots
        for window in pending:
            theirs = mine if window == ctx.window else self._kept(run, ctx.session, window)
            if theirs is not None:
                record(run, ctx.session, window, classes, control, theirs)


    def _kept(self, run: RunContext, session: str, window: str) -> Rendered | None:
        """A boot's renderings: this run's own, else its record (a resumed run)."""
        found = self._renderings.get((str(run.run_dir), session, window))
        if found is not None:
            return found
        path = run.run_dir / "windows" / f"{session}-{window}" / RENDERINGS
        if not path.exists():
            return None
        return Rendered.of(json.loads(files.read_text(path)))


def holds_secret(where: Path) -> Callable[[str], bool]:
    """Whether a text holds a secret of the run that writes under ``where``: its filter changes it."""
    scrub = results.scrub_for(where)
    return (lambda text: scrub(text) != text) if scrub is not None else (lambda _: False)


def _withhold_ids(receipt: dict[str, Any], secret: Callable[[str], bool],
                  control: Rendered, theirs: Rendered) -> None:
    """parity.json keeps no ids around a divergence of a prompt that holds a secret."""
    for cp in receipt["classes"]:
        mine, other = control.classes.get(cp["class"], []), theirs.classes.get(cp["class"], [])
        for p in cp["per_prompt"]:
            d, i = p.get("divergence"), p["index"]
            texts = [r.text for r in (mine[i:i + 1] + other[i:i + 1]) if not isinstance(r, str)]
            if d is not None and any(secret(t) for t in texts):
                d["reference_ids"], d["ids"] = [], []
                d["ids_withheld"] = "the prompt holds a secret, which its ids would spell"


def record(run: RunContext, session: str, window: str, classes: dict[str, list[list[Message]]],
           control: Rendered, theirs: Rendered) -> Parity:
    """Compare a stack window's renderings with its control's; write parity.json, emit the event."""
    c = run.campaign
    ours, stack = c.server, c.server_for(window)
    name = stack if stack != ours else f"{stack} ({window})"
    result = against(ours, control, [(name, theirs)], classes)
    wdir = results.window_dir(run.run_dir, session, window)
    receipt = result.as_json()
    _withhold_ids(receipt, holds_secret(wdir), control, theirs)
    results.write_json(wdir / PARITY, {"session": session, "window": window, "reference": ours,
                                       "stack": stack, "knobs": rendering_knobs(c),
                                       "requests": same_requests(c, window), **receipt})
    run.emit(EventKind.PARITY, session=session, window=window, reference=ours, stack=stack,
             classes={cp.cls: {"verdict": cp.verdict, "identical": cp.identical,
                               "prompts": len(cp.prompts), "differing": len(cp.differing),
                               "failed": len(cp.failed)} for cp in result.classes},
             file=str((wdir / PARITY).relative_to(run.run_dir)))
    return result


def same_requests(c: Campaign, window: str) -> dict[str, Any]:
    """What both stacks are sent beside the prompts: one sampling, and each one's fields for an
    exact output length (none: its requests stop at its own end of sequence)."""
    wl = c.workload
    fields = {name: get_adapter(name).exact_length_fields(wl.max_tokens) if wl.exact_output else {}
              for name in (c.server, c.server_for(window))}
    lengths = ("exactly max_tokens on both" if all(fields.values()) else
               "a limit only on " + ", ".join(n for n, f in fields.items() if not f)
               + (" (workload.exact_output is off)" if not wl.exact_output
                  else " (it has no field that ignores the end of sequence)"))
    return {"sampling": wl.sampling.model_dump(), "max_tokens": wl.max_tokens,
            "exact_length_fields": fields, "output_length": lengths}


def _shown(run: RunContext, session: str, window: str) -> bool:
    ws = run.state.windows.get(f"{session}-{window}")
    return ws is not None and bool(ws.parity)
