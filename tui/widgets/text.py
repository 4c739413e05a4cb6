"""Segments to Rich text in the theme's colours: what every widget draws with."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.style import Style
from rich.text import Span, Text
from textual.color import Color

from engine.sanitize import terminal
from tui.core.fmt import Seg


def tag_styles(theme_variables: dict[str, str]) -> dict[str, Style]:
    """Theme colours per tag. Colour is never the only cue: the text carries a glyph or a word."""

    def c(name: str) -> str:
        return Color.parse(theme_variables.get(name, "white")).rich_color.name

    return {
        "error": Style(color=c("error-lighten-1"), bold=True),  # plain error is dim in 256 colours
        "warning": Style(color=c("warning")),
        "success": Style(color=c("success")),
        # textual-dark's accent is its warning orange: a light primary keeps "live" apart from "look".
        "accent": Style(color=c("primary-lighten-2")),
        "muted": Style(dim=True),
        "bold": Style(bold=True),
        "fact": Style(color=c("primary-lighten-2"), bold=True),
        "match": Style(reverse=True, bold=True),
        "": Style(),
    }


def to_text(segs: Iterable[Seg], styles: dict[str, Style], sep: str = " ", end: str = "") -> Text:
    """The Text that appending each segment in its tag's style makes, made at once: a day-long
    run's windows table is thousands of cells, and Text.append per segment took twice as long."""
    parts: list[str] = []
    spans: list[Span] = []
    at = 0
    for i, (s, tag) in enumerate(segs):
        if i and sep:
            parts.append(sep)
            at += len(sep)
        # Shown, never acted on: a reason or an error may quote a server's escapes (Rich strips
        # only BEL, BS, VT, FF and CR); the spans count what is kept.
        kept = terminal(s)
        style = styles.get(tag)
        if style and s:  # a null style or an empty segment: append adds no span either
            spans.append(Span(at, at + len(kept), style))
        parts.append(kept)
        at += len(kept)
    parts.append(end)
    return Text("".join(parts), no_wrap=True, overflow="ellipsis", spans=spans)


def lines_text(lines: Sequence[Seg], styles: dict[str, Style]) -> Text:
    text = Text(no_wrap=True, overflow="ellipsis")
    for i, (s, tag) in enumerate(lines):
        if i:
            text.append("\n")
        text.append(terminal(s), styles.get(tag, Style()))
    return text
