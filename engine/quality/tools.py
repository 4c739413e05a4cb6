"""The tool-call probe: N questions with a tool schema; a success is a parseable call ("10/10")."""

from __future__ import annotations

from typing import Any

import httpx

from engine.quality.probe import Probe
from engine.servers.client import tool_arguments
from engine.servers.data import BadServerData

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "the city name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}]
TOOL_CITIES = ["Paris", "Tokyo", "Lima", "Nairobi", "Oslo", "Cairo", "Sydney", "Toronto",
               "Mumbai", "Berlin"]


def tool_probe(probe: Probe, n: int, max_tokens: int, seed: int, knobs: dict[str, Any],
               tool_choice: str = "auto") -> dict[str, Any]:
    """N weather questions with a tool schema; a success is a named call with JSON-object args."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        prompt = f"What is the weather like in {TOOL_CITIES[i % len(TOOL_CITIES)]} right now?"
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
                    "why": "" if ok else ("no tool call" if not args else "arguments do not parse")})
    passed = sum(o["ok"] for o in out)
    return {"ok": passed, "n": n, "tool_choice": tool_choice, "tools": TOOLS, "calls": out}
