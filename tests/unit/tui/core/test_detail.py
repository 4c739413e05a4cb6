"""A window's and a row's detail (tui.core.detail) on folded journals: what the tables cut short,
whole, and the server's words as its terminal would show them."""

from __future__ import annotations

from engine.record.fold import fold
from engine.record.journal import read_events
from tests.paths import FIXTURES
from tui.core.detail import Detail, detail
from tui.core.rules import DECLARED, DEFAULT_RULE

EVERY = FIXTURES / "fold" / "every-kind.jsonl"


def text(d: Detail | None) -> list[str]:
    assert d is not None
    return [" ".join(t for t, _ in line if t) for line in d.lines]


def test_a_rejected_windows_log_lines_show_as_its_terminal_showed_them() -> None:
    """Issue 48: vLLM's boot log showed \\x0d in the log pane and the detail view; a rejection
    quotes the log's last lines, a progress bar's among them."""
    state = fold(read_events(EVERY))
    ws = state.windows["s2-control"]
    ws.errors = ["\rLoading weights:   0%\rLoading weights: 100%", "error: unknown argument: --bogus"]
    ws.reason = "boot 10%\rboot 100%: exited (exit code 1)"
    lines = text(detail(state, "s2-control", DECLARED, DEFAULT_RULE))
    assert lines[2:5] == ["reason: boot 100%: exited (exit code 1)", "  Loading weights: 100%",
                          "  error: unknown argument: --bogus"]
    assert not any("\r" in line or "\\x0d" in line for line in lines)


def test_a_window_on_another_stack_says_its_parity_per_class() -> None:
    """Issue 48: the detail of a stack window had no parity line."""
    state = fold(read_events(EVERY))
    ws = state.windows["s2-w"]
    ws.stack = "vllm"
    lines = text(detail(state, "s2-w", DECLARED, DEFAULT_RULE))
    at = lines.index("Parity: vllm against the control's stack (the token ids of every prompt, each "
                     "through its own template and tokenizer)")
    assert lines[at + 1].startswith("  not shown yet: this window's deltas are withheld")
    ws.parity = {"prose": {"verdict": "token-identical", "identical": True},
                 "code": {"verdict": "differs on 3 of 8 prompts", "identical": False}}
    lines = text(detail(state, "s2-w", DECLARED, DEFAULT_RULE))
    assert lines[at + 1:at + 3] == ["  code: differs on 3 of 8 prompts", "  prose: token-identical"]
    ws.stack = ""  # the campaign's own stack: no parity to say
    assert not any(line.startswith("Parity") for line in text(detail(state, "s2-w", DECLARED, DEFAULT_RULE)))
