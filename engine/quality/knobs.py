"""The ruler check: every request knob the campaign sends must act, or the window is "ruler suspect".

A knob acts when replies or token counts with and without it differ; a reasoning knob must also
keep ``<think>`` out of ``content`` and, where the server reports them, give reasoning token counts.
The campaign notes' first lesson: an ``enable_thinking`` the template ignored made a round's numbers
wrong.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from engine.quality.probe import Probe
from engine.servers.client import ChatReply, Unsupported
from engine.words import Verdict

KNOB_PROMPTS = 3  # greedy prompts the knob check sends again without each knob
THINK_TAGS = ("<think>", "</think>")
REASONING_KEY = re.compile(r"think|reason", re.I)


def is_reasoning_knob(name: str, value: Any) -> bool:
    if REASONING_KEY.search(name):
        return True
    return isinstance(value, dict) and any(REASONING_KEY.search(str(k)) for k in value)


def knob_check(probe: Probe, prompts: Sequence[str], knobs: dict[str, Any], max_tokens: int,
               seed: int, with_all: Sequence[ChatReply] = ()) -> dict[str, Any]:
    """Each knob against the same requests without it (the other knobs kept).

    ``with_all`` are replies already had with every knob (the greedy ones, same requests). One
    differing reply shows that a knob acts, so the prompts stop there; calling a knob inert takes
    identical replies on every prompt.
    """
    base: list[ChatReply] = list(with_all)  # with every knob, filled as far as a knob needs

    def replies(i: int) -> ChatReply:
        while len(base) <= i:
            base.append(probe.reply(prompts[len(base)], knobs, max_tokens, seed))
        return base[i]

    report: dict[str, Any] = {"prompts": list(prompts), "max_tokens": max_tokens, "knobs": {}}
    for name, value in knobs.items():
        rest = {k: v for k, v in knobs.items() if k != name}
        pairs: list[dict[str, Any]] = []
        for i, prompt in enumerate(prompts):
            a, b = replies(i), probe.reply(prompt, rest, max_tokens, seed)
            pairs.append({"prompt": prompt, "with": _reply(a), "without": _reply(b),
                          "differs": (a.content, a.reasoning, a.completion_tokens) !=
                                     (b.content, b.reasoning, b.completion_tokens)})
            if pairs[-1]["differs"]:
                break
        report["knobs"][name] = judge_knob(probe, name, value, knobs, rest, prompts[0],
                                           base[:len(pairs)], pairs)
    suspects = [n for n, k in report["knobs"].items() if k["verdict"] != Verdict.ACTS]
    report["verdict"] = Verdict.RULER_SUSPECT if suspects else Verdict.ACTS
    report["suspects"] = suspects
    return report


def judge_knob(probe: Probe, name: str, value: Any, knobs: dict[str, Any], rest: dict[str, Any],
               prompt: str, replies: Sequence[ChatReply],
               pairs: list[dict[str, Any]]) -> dict[str, Any]:
    reasons: list[str] = []
    differs = any(p["differs"] for p in pairs)
    if not differs:
        reasons.append(f"outputs and token counts identical with and without it on "
                       f"{len(pairs)}/{len(pairs)} prompts")
    rendered = _renders_same(probe, prompt, knobs, rest)
    if rendered:
        reasons.append("the chat template renders the same prompt with and without it")
    reasoning = is_reasoning_knob(name, value)
    counts = probe.adapter.reasoning_counts()
    leaks = [r for r in replies if any(tag in r.content for tag in THINK_TAGS)]
    if reasoning and leaks:
        reasons.append(f"reasoning left in content (<think> in {len(leaks)} replies)")
    missing = reasoning and counts and all(r.reasoning_tokens is None for r in replies)
    if missing:
        reasons.append("no reasoning token count in usage")
    acts = differs and not (reasoning and leaks) and not missing
    return {"value": value, "reasoning_knob": reasoning, "template_renders_same": rendered,
            "reasoning_counts": ("reported" if any(r.reasoning_tokens is not None for r in replies)
                                 else "missing" if counts else "not reported by this server"),
            "verdict": Verdict.ACTS if acts else Verdict.RULER_SUSPECT, "reasons": reasons,
            "pairs": pairs}


def _renders_same(probe: Probe, prompt: str, a: dict[str, Any], b: dict[str, Any]) -> bool | None:
    try:
        same = probe.render(prompt, a) == probe.render(prompt, b)
    except Unsupported:
        return None
    probe.requests += 2
    return same


def _reply(r: ChatReply) -> dict[str, Any]:
    return {"content": r.content, "reasoning": r.reasoning, "completion_tokens": r.completion_tokens,
            "reasoning_tokens": r.reasoning_tokens, "finish_reason": r.finish_reason}


def across_stacks(control: dict[str, Any] | None, mine: dict[str, Any],
                  stacks: tuple[str, str]) -> dict[str, Any]:
    """A window on another stack's knob check beside its control's (``stacks``: the window's server,
    the control's): each knob's verdict on both, and the knobs that act on one stack and not the
    other, named, since such a knob sends the two stacks different requests."""
    if control is None:
        return {"control": "not checked yet (the session's control has not run its knob check)",
                "one_sided": []}
    mine_k, theirs = mine.get("knobs", {}), control.get("knobs", {})
    per = {name: {stacks[0]: mine_k.get(name, {}).get("verdict"),
                  stacks[1]: theirs.get(name, {}).get("verdict")}
           for name in dict.fromkeys([*theirs, *mine_k])}
    acts = {name: [s for s in stacks if v[s] == Verdict.ACTS] for name, v in per.items()}
    one_sided = [name for name, on in acts.items() if len(on) == 1]
    return {"knobs": per, "one_sided": one_sided,
            "said": "; ".join(f"{n} acts on {acts[n][0]} only" for n in one_sided)}
