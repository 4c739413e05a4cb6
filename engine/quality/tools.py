"""The tool-call probe: N questions with a tool schema; a success is a parseable call ("10/10").

A chat template without a tools variable renders the same prompt with and without the schema, so
the model is never shown it: no reply can then say anything about the server's tool path, and the
probe says that instead of a verdict on the calls (SmolLM2's ChatML template on vLLM's hermes
parser, run live).
"""

from __future__ import annotations

from typing import Any

import httpx

from engine.quality.probe import Probe
from engine.servers.client import Unsupported, tool_arguments
from engine.servers.data import BadServerData
from engine.words import Verdict

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "the city name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}]
TOOL_CITIES = ["Paris", "Tokyo", "Lima", "Nairobi", "Oslo", "Cairo", "Sydney", "Toronto",
               "Mumbai", "Berlin"]
TEMPLATE_BLIND = "the chat template renders no tools: the model is never shown the schema"


def question(i: int) -> str:
    return f"What is the weather like in {TOOL_CITIES[i % len(TOOL_CITIES)]} right now?"


def template_shows_tools(probe: Probe, knobs: dict[str, Any]) -> bool | None:
    """Whether the rendered prompt changes when the schema is sent; None: the server cannot render."""
    try:
        with_tools = probe.render(question(0), {**knobs, "tools": TOOLS})
        without = probe.render(question(0), knobs)
    except Unsupported:
        return None
    probe.requests += 2
    return with_tools != without


def tool_probe(probe: Probe, n: int, max_tokens: int, seed: int, knobs: dict[str, Any],
               tool_choice: str = "auto") -> dict[str, Any]:
    """N weather questions with a tool schema; a success is a named call whose arguments are a JSON object
    (vLLM 0.32.0 with hermes and tool_choice required sent `"Paris"`, a JSON string, live)."""
    shown = template_shows_tools(probe, knobs)
    out: list[dict[str, Any]] = []
    for i in range(n):
        prompt = question(i)
        try:
            r = probe.chat(prompt, knobs, max_tokens, seed,
                           {"tools": TOOLS, "tool_choice": tool_choice})
        except (httpx.HTTPStatusError, BadServerData) as e:
            # A server that refuses tools answers 4xx/5xx (or garbage): the probe's finding, not a crash.
            out.append({"prompt": prompt, "ok": False, "error": str(e)})
            continue
        args = [tool_arguments(c) for c in r.tool_calls]
        ok = bool(args) and all(a is not None for a in args)
        out.append({"prompt": prompt, "ok": ok, "tool_calls": r.tool_calls,
                    "content": r.content[:300],
                    "why": "" if ok else ("no tool call" if not args else "arguments are no JSON object")})
    passed = sum(o["ok"] for o in out)
    return {"ok": passed, "n": n, "tool_choice": tool_choice, "template_shows_tools": shown,
            "tools": TOOLS, "calls": out}


def tool_verdict(report: dict[str, Any]) -> tuple[Verdict, str]:
    """ok when every call parses, else failed with the reasons; undetermined when the template
    never showed the model the schema, whatever the calls came to."""
    whys = sorted({c.get("why") or c.get("error", "") for c in report["calls"] if not c["ok"]})
    summary = f"{report['ok']}/{report['n']} parseable tool calls" + (
        f" ({'; '.join(whys)[:200]})" if whys else "")
    if report["template_shows_tools"] is False:
        return Verdict.UNDETERMINED, f"{TEMPLATE_BLIND} ({summary})"
    return (Verdict.OK if report["ok"] == report["n"] else Verdict.FAILED), summary
