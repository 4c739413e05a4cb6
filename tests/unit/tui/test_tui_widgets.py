"""The console's cells as Rich Text (tui.widgets.text.to_text): made at once, they are the very Text
that appending each segment in its tag's style makes (control codes shown as escapes, never acted
on: engine.sanitize.terminal; no span for a null style or an empty segment), so the screen is
unchanged."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from rich.style import Style
from rich.text import Text

from engine.sanitize import terminal
from tui.widgets.text import tag_styles, to_text

STYLES = tag_styles({})


def appended(segs: list[tuple[str, str]], sep: str, end: str) -> Text:
    """to_text as it was written first: one append per segment."""
    text = Text(no_wrap=True, overflow="ellipsis")
    for i, (s, tag) in enumerate(segs):
        if i and sep:
            text.append(sep)
        text.append(terminal(s), STYLES.get(tag, Style()))
    text.append(end)
    return text


CHARS = "ab ▶é±%\r\x07\x08\n\t\x1b\x9b\u202e"
SEGS = st.lists(st.tuples(st.text(alphabet=st.sampled_from(CHARS), max_size=6),
                          st.sampled_from([*STYLES, "no such tag"])), max_size=5)


@given(segs=SEGS, sep=st.sampled_from([" ", "", "·"]), end=st.sampled_from(["", " "]))
def test_a_cell_is_the_text_its_segments_append_to(segs: list[tuple[str, str]], sep: str,
                                                   end: str) -> None:
    want, got = appended(segs, sep, end), to_text(segs, STYLES, sep, end)
    assert (got.plain, got.spans) == (want.plain, want.spans)
    assert (got.no_wrap, got.overflow, got.end, got.style, got.justify) == (
        want.no_wrap, want.overflow, want.end, want.style, want.justify)


@given(segs=SEGS)
def test_no_cell_holds_a_character_a_terminal_acts_on(segs: list[tuple[str, str]]) -> None:
    """A void row's reason quoting a server's OSC would retitle the pane, its CSI move the cursor."""
    plain = to_text(segs, STYLES).plain
    assert not any(c < " " and c != "\t" or "\x7f" <= c <= "\x9f" or c == "\u202e" for c in plain)
