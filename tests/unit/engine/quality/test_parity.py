"""Parity across stacks against tiny FAKE servers: a llama.cpp that renders with /apply-template and
tokenizes with /tokenize, a vLLM whose /tokenize renders messages and /detokenize gives the text
back. Their "tokenizer" is one id per character, so a token position is a character position and a
planted difference is found where it was planted. Faults the fakes inject are named per test: a
template with an extra space, a tokenizer that maps one character otherwise, an HTTP 500 on one
prompt, an endpoint that is absent (404), an adapter with no rendering."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine.campaign.sources.item import Message
from engine.commands.cli import main
from engine.quality.knobs import across_stacks
from engine.quality.parity import IDENTICAL, Parity, Rendered, Stack, against, excerpt, parity, render_all
from engine.servers import get_adapter
from engine.servers.client import Readiness, ServerClient
from tests.campaigns import campaign, write

# SmolLM2's template as it renders one user message (ChatML with a default system prompt).
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
TURN = "<|im_start|>{role}\n{content}<|im_end|>\n"
# The planted fault: one extra space after the role, as a hand-edited template might have.
SPACED = "<|im_start|>{role} \n{content}<|im_end|>\n"
PROSE = ["Write one sentence about the sea.", "Name three colours."]
CODE = ["Write a function that adds two numbers."]


def render(messages: list[dict[str, Any]], turn: str = TURN) -> str:
    said = [{"role": "system", "content": SYSTEM}, *messages]
    return "".join(turn.format(**m) for m in said) + "<|im_start|>assistant\n"


@dataclass
class Fake:
    """One fake server: ``kind`` llamacpp or vllm, its template, its tokenizer and its faults."""

    kind: str
    turn: str = TURN
    remap: dict[str, int] = field(default_factory=dict)  # FAULT: characters tokenized otherwise
    fail_on: str | None = None  # FAULT: HTTP 500 for a prompt containing this text
    absent: bool = False  # FAULT: the rendering endpoint answers 404
    paths: list[str] = field(default_factory=list)

    def ids(self, text: str) -> list[int]:
        return [self.remap.get(c, ord(c)) for c in text]

    def answer(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self.paths.append(path)
        if self.absent:
            return 404, {"error": {"code": 404, "message": "File Not Found"}}
        if self.fail_on is not None and self.fail_on in json.dumps(body):
            return 500, {"error": {"code": 500, "message": "template raised"}}
        if self.kind == "llamacpp" and path == "/apply-template":
            return 200, {"prompt": render(body["messages"], self.turn)}
        if self.kind == "llamacpp" and path == "/tokenize":
            return 200, {"tokens": self.ids(body["content"])}
        if self.kind == "vllm" and path == "/tokenize" and "messages" in body:
            return 200, {"tokens": self.ids(render(body["messages"], self.turn))}
        if self.kind == "vllm" and path == "/detokenize":
            back = {v: k for k, v in self.remap.items()}
            return 200, {"prompt": "".join(back.get(i, chr(i)) for i in body["tokens"])}
        return 404, {"detail": "Not Found"}

    def transport(self) -> httpx.MockTransport:
        def handle(request: httpx.Request) -> httpx.Response:
            status, body = self.answer(request.url.path, json.loads(request.content or b"{}"))
            return httpx.Response(status, json=body)

        return httpx.MockTransport(handle)

    def stack(self, name: str | None = None) -> Stack:
        client = httpx.Client(base_url="http://fake", transport=self.transport())
        return Stack(name or self.kind, get_adapter(self.kind), client)


def classes() -> dict[str, list[list[Message]]]:
    return {"prose": [[{"role": "user", "content": p}] for p in PROSE],
            "code": [[{"role": "user", "content": p}] for p in CODE]}


def run(*fakes: Fake, knobs: dict[str, Any] | None = None) -> Parity:
    names = [f"{f.kind}{i}" for i, f in enumerate(fakes)]
    return parity(classes(), knobs or {}, [f.stack(n) for f, n in zip(fakes, names, strict=True)])


def test_the_same_template_and_tokenizer_are_token_identical() -> None:
    result = run(Fake("llamacpp"), Fake("vllm"))
    assert result.identical and not result.differs
    assert [(c.cls, c.stack, c.verdict) for c in result.classes] == [
        ("prose", "vllm1", IDENTICAL), ("code", "vllm1", IDENTICAL)]
    assert result.verdict("prose") == IDENTICAL
    tokens = len(render([{"role": "user", "content": PROSE[0]}]))
    assert result.classes[0].prompts[0].tokens == tokens
    data = result.as_json()
    assert data["identical"] is True and data["verdicts"] == {"prose": IDENTICAL, "code": IDENTICAL}
    assert json.loads(json.dumps(data)) == data


def test_a_planted_space_is_found_at_its_position_with_both_renderings() -> None:
    result = run(Fake("llamacpp"), Fake("vllm", turn=SPACED))
    prose = result.classes[0]
    assert prose.verdict == "differs on 2 of 2 prompts"
    assert result.verdict("code") == "vllm1: differs on 1 of 1 prompts"
    d = prose.prompts[0].divergence
    assert d is not None
    # The first turn is the system's: the space comes right after "<|im_start|>system".
    at = len("<|im_start|>system")
    assert (d.position, d.char) == (at, at)
    assert d.reference_ids[d.position - d.start] == ord("\n")
    assert d.ids[d.position - d.start] == ord(" ")
    # Both renderings from their start (the difference is 18 characters in), whitespace escaped.
    assert d.reference_text.startswith("'<|im_start|>system\\nYou are") and d.reference_text.endswith("…")
    assert d.text.startswith("'<|im_start|>system \\nYou are")
    assert d.tokens == d.reference_tokens + 2  # one space more in each turn: system and user


def test_the_same_text_tokenized_otherwise_names_the_tokenizer() -> None:
    result = run(Fake("llamacpp"), Fake("vllm", remap={"|": 100000}))
    d = result.classes[0].prompts[0].divergence
    assert d is not None
    assert d.position == 1 and d.char is None  # "<|im_start|>": the "|" is the second token
    assert d.reference_ids[:3] == (ord("<"), ord("|"), ord("i")) and d.ids[1] == 100000


def test_a_prompt_one_stack_refuses_is_said_and_the_rest_compared() -> None:
    result = run(Fake("llamacpp"), Fake("vllm", fail_on="colours"))
    prose = result.classes[0]
    assert prose.verdict == "identical on 1 of 2 prompts; 1 not compared"
    [failed] = prose.failed
    assert failed.index == 1 and failed.tokens is None
    assert failed.error is not None and failed.error.startswith("vllm1: /tokenize: HTTP 500")
    assert result.classes[1].verdict == IDENTICAL and not result.identical and not result.differs


def test_an_absent_endpoint_stops_asking_that_stack() -> None:
    absent = Fake("llamacpp", absent=True)
    result = run(Fake("vllm"), absent)
    assert absent.paths == ["/apply-template"]  # asked once, for the first prompt
    assert [c.verdict for c in result.classes] == [
        "not compared: llamacpp1: /apply-template: HTTP 404: "
        '{"error":{"code":404,"message":"File Not Found"}}'] * 2
    assert dict(result.stack_errors)["llamacpp1"].startswith("/apply-template: HTTP 404")


class NoRendering(ServerClient):
    """An adapter without render_chat: the base class raises Unsupported."""

    name = "bare"
    health_path = "/health"

    def readiness(self, status: int | None, body: bytes) -> Readiness:
        return Readiness.READY


def test_a_stack_that_cannot_render_is_said_not_raised() -> None:
    bare = Stack("bare", NoRendering(), httpx.Client())
    result = parity(classes(), {}, [Fake("llamacpp").stack(), bare])
    assert dict(result.stack_errors) == {
        "bare": "cannot render: bare: rendering the chat template is not implemented"}
    assert all(c.verdict.startswith("not compared: bare: cannot render") for c in result.classes)


def test_knobs_reach_both_stacks_renderings() -> None:
    llama, vllm = Fake("llamacpp"), Fake("vllm")
    bodies: list[dict[str, Any]] = []
    original = vllm.answer

    def recording(path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        bodies.append(body)
        return original(path, body)

    vllm.answer = recording  # type: ignore[method-assign]  # records what the adapter sends
    run(llama, vllm, knobs={"chat_template_kwargs": {"enable_thinking": False}})
    assert bodies[0]["chat_template_kwargs"] == {"enable_thinking": False}


def test_excerpt_escapes_whitespace_and_marks_cuts() -> None:
    assert excerpt("ab\tc", 2) == "'ab\\tc'"
    assert excerpt("x" * 30 + " \n" + "y" * 30, 30, 2) == "…'xx \\n'…"


# ---------------------------------------------------------------- the command


class _Handler(BaseHTTPRequestHandler):
    fake: Fake

    def log_message(self, format: str, *args: Any) -> None:  # the stdlib's name
        pass

    def do_POST(self) -> None:  # the stdlib's name
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        status, answer = self.fake.answer(self.path, body)
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def serve() -> Iterator[Callable[[Fake], str]]:
    """Fakes on the test's own sockets, for the command, which makes its own clients."""
    servers: list[ThreadingHTTPServer] = []

    def start(fake: Fake) -> str:
        handler = type("Handler", (_Handler,), {"fake": fake})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    return write(tmp_path, campaign("parity", {"ctx": {"args": {"-c": 4096}}}, {"s1": ["ctx"]},
                                    classes={"prose": {"prompts": PROSE}, "code": {"prompts": CODE}}))


def test_command_exits_0_when_identical(serve: Callable[[Fake], str], spec: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    llama, vllm = serve(Fake("llamacpp")), serve(Fake("vllm"))
    assert main(["parity", str(spec), f"llamacpp={llama}", f"vllm={vllm}/v1/"]) == 0
    out = capsys.readouterr().out
    assert f"reference llamacpp ({llama}) against vllm ({vllm})" in out
    assert "prose  vllm   2        token-identical" in out
    assert out.rstrip().endswith("every prompt token-identical")


def test_command_shows_a_planted_difference_and_exits_1(serve: Callable[[Fake], str], spec: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    plain, spaced = serve(Fake("llamacpp")), serve(Fake("llamacpp", turn=SPACED))
    assert main(["parity", str(spec), f"llamacpp={plain}", f"llamacpp={spaced}",
                 "--max-prompts", "1"]) == 1
    out = capsys.readouterr().out
    other = f"llamacpp@{spaced.removeprefix('http://')}"
    assert f"prose  {other}  1        differs on 1 of 1 prompts" in out
    at = len("<|im_start|>system")
    assert (f"prose #0 'Write one sentence about the sea.' on {other}: first differing token at "
            f"position {at}") in out
    assert "system \\nYou are" in out and "system\\nYou are" in out
    # The ids around it, the first differing one marked: "\n" (10) on one side, " " (32) on the other.
    assert f"ids from position {at - 4} (the first differing one in >< ):" in out
    assert "109 >10< 89 111" in out and "109 >32< 10 89" in out  # "em", then "\nYo" or " \nY"
    assert "NOT token-identical" in out


def test_command_json(serve: Callable[[Fake], str], spec: Path,
                      capsys: pytest.CaptureFixture[str]) -> None:
    llama, vllm = serve(Fake("llamacpp")), serve(Fake("vllm", turn=SPACED))
    assert main(["parity", str(spec), f"llamacpp={llama}", f"vllm={vllm}", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["verdicts"] == {"prose": "vllm: differs on 2 of 2 prompts",
                                "code": "vllm: differs on 1 of 1 prompts"}
    assert data["urls"] == {"llamacpp": llama, "vllm": vllm}
    assert data["classes"][0]["per_prompt"][0]["divergence"]["position"] == len("<|im_start|>system")


@pytest.mark.parametrize(("stacks", "said"), [
    (["llamacpp=http://127.0.0.1:1"], "give two or more stacks as SERVER=URL (got 1)"),
    (["llamacpp=http://127.0.0.1:1", "vllm"], "stack 'vllm': expected SERVER=URL"),
    (["llamacpp=http://127.0.0.1:1", "tgi=http://127.0.0.1:2"],
     "unknown server 'tgi'; known: llamacpp, sglang, vllm"),
    (["llamacpp=http://127.0.0.1:1", "vllm=127.0.0.1:2"], "is not an http:// or https:// base URL"),
    (["vllm=http://127.0.0.1:1", "vllm=http://127.0.0.1:1/"], "stack vllm@127.0.0.1:1 is given twice"),
])
def test_bad_stacks_exit_2_saying_which(spec: Path, stacks: list[str], said: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parity", str(spec), *stacks]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err


def test_a_campaign_that_does_not_load_exits_2_at_its_line(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nserver: llamacpp\nworkload: [\n")
    assert main(["parity", str(bad), "llamacpp=http://127.0.0.1:1", "vllm=http://127.0.0.1:2"]) == 2
    assert f"{bad}:" in capsys.readouterr().err


def test_renderings_kept_as_json_compare_as_the_live_ones() -> None:
    """A run keeps each boot's renderings (renderings.json) and compares a stack window with its
    control's when both are up no more: the kept ones must give the live comparison's answer."""
    mine, theirs = Fake("llamacpp"), Fake("vllm", turn=SPACED)
    live = run(mine, theirs)
    kept = [Rendered.of(json.loads(json.dumps(render_all(classes(), {}, f.stack(n)).as_json())))
            for f, n in ((mine, "llamacpp0"), (theirs, "vllm1"))]
    again = against("llamacpp0", kept[0], [("vllm1", kept[1])], classes())
    assert again.as_json() == live.as_json()


def test_a_knob_that_acts_on_one_stack_only_is_named() -> None:
    """The knob check of a window on another stack beside its control's (engine.quality.knobs)."""
    control = {"knobs": {"repeat_penalty": {"verdict": "acts"}, "top_k": {"verdict": "acts"}}}
    mine = {"knobs": {"repeat_penalty": {"verdict": "ruler suspect"}, "top_k": {"verdict": "acts"}}}
    found = across_stacks(control, mine, ("vllm", "llamacpp"))
    assert found["one_sided"] == ["repeat_penalty"]
    assert found["said"] == "repeat_penalty acts on llamacpp only"
    assert found["knobs"]["top_k"] == {"vllm": "acts", "llamacpp": "acts"}
    assert across_stacks(None, mine, ("vllm", "llamacpp"))["one_sided"] == []
