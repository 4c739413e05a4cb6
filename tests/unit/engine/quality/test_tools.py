"""The tool-call probe against stub adapters: a template that renders the schema or not, a model
that calls the tool or answers in prose, a server that refuses tools."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from engine.quality.probe import Probe
from engine.quality.tools import TEMPLATE_BLIND, TOOLS, tool_probe, tool_verdict
from engine.quality.verdicts import verdict_row
from engine.servers.client import ChatReply, Http, Readiness, ServerClient, Unsupported
from engine.words import Check, Verdict


class Stub(ServerClient):
    """A server whose template shows ``tools`` or not, and whose model calls get_weather or not."""

    name = "stub"

    def __init__(self, renders_tools: bool | None, calls: bool, refuses: bool = False) -> None:
        self.renders_tools, self.calls, self.refuses = renders_tools, calls, refuses
        self.bodies: list[dict[str, Any]] = []

    def readiness(self, status: int | None, body: bytes) -> Readiness:
        return Readiness.READY

    def render_chat(self, client: Http, messages: list[dict[str, Any]], knobs: dict[str, Any]) -> str:
        if self.renders_tools is None:
            raise Unsupported("stub: no rendering")
        shown = json.dumps(knobs["tools"]) if self.renders_tools and "tools" in knobs else ""
        return f"<sys>{shown}</sys><user>{messages[-1]['content']}</user>"

    def chat(self, client: Http, body: dict[str, Any]) -> ChatReply:
        self.bodies.append(body)
        if self.refuses:
            request = httpx.Request("POST", "http://stub/v1/chat/completions")
            raise httpx.HTTPStatusError(
                "400 Bad Request: \"auto\" tool choice requires --enable-auto-tool-choice",
                request=request, response=httpx.Response(400, request=request))
        city = body["messages"][-1]["content"].split(" in ")[1].split(" right")[0]
        calls = [{"id": "c1", "type": "function", "function": {
            "name": "get_weather", "arguments": json.dumps({"city": city})}}] if self.calls else []
        return ChatReply("" if calls else "I cannot check the weather.", None, 9, None, calls,
                         "tool_calls" if calls else "stop", {})


def probe_of(adapter: Stub) -> Probe:
    return Probe(adapter, httpx.Client(), lambda: False)


def test_a_template_that_shows_the_schema_and_parseable_calls_are_ok() -> None:
    adapter = Stub(renders_tools=True, calls=True)
    report = tool_probe(probe_of(adapter), 3, 64, 1, {}, "auto")
    assert report["template_shows_tools"] is True
    assert (report["ok"], report["n"]) == (3, 3)
    assert all(b["tools"] == TOOLS and b["tool_choice"] == "auto" for b in adapter.bodies)
    assert tool_verdict(report) == (Verdict.OK, "3/3 parseable tool calls")


def test_prose_where_the_template_shows_the_schema_fails() -> None:
    report = tool_probe(probe_of(Stub(renders_tools=True, calls=False)), 2, 64, 1, {}, "auto")
    assert tool_verdict(report) == (Verdict.FAILED, "0/2 parseable tool calls (no tool call)")


@pytest.mark.parametrize("calls", [True, False])
def test_a_template_blind_to_tools_is_no_verdict_on_the_calls(calls: bool) -> None:
    """The model never saw the schema: neither a pass nor a fail says anything of the tool path."""
    report = tool_probe(probe_of(Stub(renders_tools=False, calls=calls)), 2, 64, 1,
                        {"chat_template_kwargs": {"enable_thinking": False}}, "required")
    assert report["template_shows_tools"] is False
    verdict, summary = tool_verdict(report)
    assert verdict == Verdict.UNDETERMINED
    assert summary.startswith(TEMPLATE_BLIND)
    assert f"{2 if calls else 0}/2 parseable tool calls" in summary


def test_a_server_that_cannot_render_is_judged_on_its_calls() -> None:
    report = tool_probe(probe_of(Stub(renders_tools=None, calls=True)), 2, 64, 1, {}, "auto")
    assert report["template_shows_tools"] is None
    assert tool_verdict(report)[0] == Verdict.OK


def test_a_server_that_refuses_tools_fails_with_its_reason() -> None:
    report = tool_probe(probe_of(Stub(renders_tools=True, calls=True, refuses=True)), 2, 64, 1, {})
    verdict, summary = tool_verdict(report)
    assert verdict == Verdict.FAILED
    assert "requires --enable-auto-tool-choice" in summary and summary.startswith("0/2")


@pytest.mark.parametrize(("verdict", "figures", "column"), [
    (Verdict.OK, {"ok": 3, "n": 3}, "3/3"),
    (Verdict.FAILED, {"ok": 1, "n": 3}, "1/3"),
    (Verdict.UNDETERMINED, {"ok": 3, "n": 3}, "undetermined"),
    (Verdict.ERROR, {}, "error"),
])
def test_verdicts_csv_counts_calls_only_where_the_count_stands(verdict: Verdict, figures: dict[str, int],
                                                               column: str) -> None:
    tools = {"verdict": verdict, "summary": "whatever it said", "figures": figures}
    row = verdict_row("s1", "w", "axis", False, {Check.TOOL_PROBE: tools})
    assert row["tool_calls"] == column


def test_arguments_that_are_a_json_string_are_no_call() -> None:
    """vLLM 0.32.0, hermes, tool_choice required, live: the name constrained, the arguments `"Paris"`."""
    class StringArgs(Stub):
        def chat(self, client: Http, body: dict[str, Any]) -> ChatReply:
            call = {"id": "c1", "type": "function", "function": {"name": "get_weather",
                                                                 "arguments": '"Paris"'}}
            return ChatReply("", None, 9, None, [call], "tool_calls", {})

    report = tool_probe(probe_of(StringArgs(renders_tools=True, calls=True)), 2, 64, 1, {}, "required")
    assert tool_verdict(report) == (Verdict.FAILED, "0/2 parseable tool calls (arguments are no JSON object)")
