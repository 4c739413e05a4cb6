"""The console's widgets: tables updated cell by cell, the boot log with highlights and search,
and the two modal screens. They render what the console's Textual-free modules derived (``tui.header``,
``tui.windows``, ``tui.reps``...); they hold no campaign state."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from rich.control import strip_control_codes
from rich.highlighter import Highlighter
from rich.style import Style
from rich.table import Table
from rich.text import Span, Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.color import Color
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Static
from textual.widgets.data_table import ColumnKey

from tui._textual_hacks import NoLineMeasure, OwnColumnWidths, WheelBackHook
from tui.columns import Col, fit_columns
from tui.fmt import Seg


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
        kept = strip_control_codes(s)  # as Text.append does: the spans count what is kept
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
        text.append(s, styles.get(tag, Style()))
    return text


class Panel(Widget):
    """Text in a box whose size CSS fixes. Unlike Static.update, setting new text only repaints
    this widget, never re-lays out the screen, and the same text again costs nothing: the header
    and panels change at every journal batch while a log floods."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._text = Text()

    @property
    def text(self) -> Text:
        return self._text

    def set(self, text: Text) -> None:
        if text != self._text:
            self._text = text
            self.refresh()

    def render(self) -> Text:
        return self._text


class RepBars(Widget):
    """Tok/s per rep as bars from zero: a bar's height is its share of the largest rep.

    Textual's Sparkline stretches min..max over the full height, so 1.78 against 1.81 tok/s draws
    as an empty bar beside a full one: a leak where there is none. From zero, a leaked rep (135
    against 700) is a stub and two equal reps are two equal bars. Newest reps on the right; as
    many as fit.
    """

    BLOCKS = " ▁▂▃▄▅▆▇█"

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._data: tuple[float, ...] = ()

    @property
    def data(self) -> tuple[float, ...]:
        return self._data

    @data.setter
    def data(self, values: Sequence[float]) -> None:
        if tuple(values) != self._data:
            self._data = tuple(values)
            self.refresh()

    def render(self) -> Text:
        width, height = max(self.size.width, 1), max(self.size.height, 1)
        values = self._data[-width:]
        top = max(values, default=0.0)
        levels = [round(v / top * 8 * height) if top > 0 else 0 for v in values]
        lines = []
        for row in range(height - 1, -1, -1):  # top line first
            cells = [self.BLOCKS[min(max(n - row * 8, 0), 8)] for n in levels]
            lines.append("".join(cells))
        return Text("\n".join(lines), style="bold")


class FollowTable(OwnColumnWidths):
    """A DataTable updated in place by row key (only changed cells are touched, as dolphie does),
    showing the columns that fit its width (:func:`tui.columns.fit_columns`): dropped by rank, a long
    one cut with an ellipsis, never one over another.

    Cursor moves made by the operator post :class:`Picked`; moves the app makes to follow the
    campaign do not, so "the operator chose this row" is never confused with "the live row moved".
    """

    class Picked(Message):
        def __init__(self, table: FollowTable, key: str) -> None:
            super().__init__()
            self.table, self.key = table, key

        @property
        def control(self) -> FollowTable:
            return self.table

    def __init__(self, columns: Sequence[Col], **kw: Any) -> None:
        # No cell padding: a trailing space per cell instead, so 80 columns hold five of them.
        super().__init__(cursor_type="row", cell_padding=0, **kw)
        self._spec = list(columns)
        self._columns = [c.name for c in columns]
        self._cells: dict[str, list[tuple[Seg, ...]]] = {}  # every column's, shown or not
        self._widths: dict[str, list[int]] = {}  # row key -> each cell's full width
        self._shown: dict[str, int] = {c: len(c) + 1 for c in self._columns}  # name -> width
        self._styles: dict[str, Style] = {}
        # Rows of _cells not in the DataTable yet (sync adds them once the columns are chosen):
        # each cell's text at its full width.
        self._fresh: dict[str, list[Text]] = {}

    def on_mount(self) -> None:
        self.reset()

    @property
    def keys(self) -> list[str]:
        return list(self._cells)

    @property
    def shown(self) -> list[str]:
        return list(self._shown)

    def plain_row(self, key: str) -> list[str]:
        """A row's text in every column, shown or not (what a narrow screen leaves out included)."""
        return [to_text(c, self._styles, end=" ").plain for c in self._cells[key]]

    def reset(self) -> None:
        # Columns too: DataTable.clear() keeps their widths, so an empty table would carry the
        # widths of whatever window was shown before.
        self._cells.clear()
        self._widths.clear()
        self._fresh.clear()
        self._rebuild()

    def _rebuild(self) -> None:
        at = self.cursor_key()  # clear() puts the cursor back on the first row
        self.clear(columns=True)
        for col in self._shown:
            self.add_column(col + " ", key=col)
        for key in self._cells:
            self._add(key)
        self._set_widths()
        self.forget_rendered()
        self.show_key(at)

    def _add(self, key: str) -> None:
        texts = self._fresh.pop(key, None) or [to_text(c, self._styles) for c in self._cells[key]]
        self.add_row(*(self._cut(col, texts[i]) for i, col in enumerate(self._columns)
                       if col in self._shown), key=key)

    def _text(self, col: str, segs: Sequence[Seg]) -> Text:
        return self._cut(col, to_text(segs, self._styles))

    def _cut(self, col: str, text: Text) -> Text:
        """A cell as shown (``text`` itself): cut to its column's width, with the space that parts
        it from the next."""
        room = self._shown.get(col, 0) - 1
        if text.cell_len > room:
            text.truncate(max(room, 1), overflow="ellipsis")
        text.append(" ")
        return text

    def full_width(self, core_only: bool = False) -> int:
        """Cells this table's columns want at their full width (only the always-shown ones'), and
        one for the scrollbar."""
        widths = self._natural()
        return sum(widths[c.name] for c in self._spec if not core_only or c.rank == 0) + 1

    def _natural(self) -> dict[str, int]:
        return {col: max([len(col) + 1, *(w[i] for w in self._widths.values())])
                for i, col in enumerate(self._columns)}

    def sync(self, rows: Sequence[tuple[str, list[list[Seg]]]], styles: dict[str, Style]) -> None:
        """Make the table show ``rows`` (key, cells in column order), touching only what changed."""
        if self.stage(rows, styles):
            self.place()

    def stage(self, rows: Sequence[tuple[str, list[list[Seg]]]], styles: dict[str, Style]) -> bool:
        """The first half of :meth:`sync`: ``rows`` taken with their widths, the changed cells of
        rows already shown updated; True when something changed (:meth:`place` then). Between the
        two the app may size the table for what it now holds."""
        self._styles = styles
        want = [k for k, _ in rows]
        if want[: len(self._cells)] != list(self._cells):
            self.reset()  # rows went away or moved: rare (a rebuilt journal), so just start over
        changed = False
        for key, cells in rows:
            frozen = [tuple(c) for c in cells]
            old = self._cells.get(key)
            changed = changed or old != frozen
            self._cells[key] = frozen
            if old is None:
                self._fresh[key] = texts = [to_text(c, styles) for c in frozen]
                self._widths[key] = [t.cell_len + 1 for t in texts]
            else:
                for i, (col, before, after) in enumerate(zip(self._columns, old, frozen, strict=True)):
                    if before != after:
                        text = to_text(after, styles)
                        self._widths[key][i] = text.cell_len + 1
                        if col in self._shown:
                            self.update_cell(key, col, self._cut(col, text))
        return changed

    def place(self) -> None:
        """The second half of :meth:`sync`: the columns chosen, then the new rows added. Added
        once the columns are chosen with their widths, a table filled at once (800 windows as
        the console attaches) has each cell made and cut once, not added, then added again as
        the columns its widths bring rebuild the table."""
        self.refit()
        for key in list(self._fresh):
            self._add(key)
        self.forget_rendered()

    def refit(self) -> None:
        """Choose the columns for the width the table has now (the app calls it after a resize)."""
        # A width set in cells (the app's for the windows list) counts at once, laid out or not:
        # the layout applies it later, and columns chosen for another would be chosen again on
        # the resize, every row added again.
        width = self.styles.width
        given = width.cells if width is not None else None
        room = (self.size.width if given is None else given - self.styles.gutter.width) - 1
        if room <= 0:  # not laid out yet; a vertical scrollbar may take one
            return
        shown = fit_columns(self._spec, self._natural(), room)
        if list(shown) != list(self._shown):
            self._shown = shown
            self._rebuild()
        elif shown != self._shown:
            cut = [c for c in shown if shown[c] != self._shown[c]]
            self._shown = shown
            for key, cells in self._cells.items():
                if key in self._fresh:  # not in the DataTable yet: sync adds it cut to fit
                    continue
                for col in cut:
                    self.update_cell(key, col, self._text(col, cells[self._columns.index(col)]))
            self._set_widths()
            self.forget_rendered()
        else:
            self._set_widths()

    def on_resize(self) -> None:
        self.refit()

    def _set_widths(self) -> None:
        """Each shown column exactly its chosen width. DataTable only widens columns, and on its
        next idle: widths then depended on what had been on screen before, and when the table
        found itself idle (the flaky snapshots)."""
        for col, want in self._shown.items():
            column = self.columns[ColumnKey(col)]
            if column.content_width != want:
                column.content_width = want
                self.virtual_size_stale()

    def cursor_key(self) -> str | None:
        keys = self.keys
        return keys[self.cursor_row] if 0 <= self.cursor_row < len(keys) else None

    def show_key(self, key: str | None) -> None:
        """Move the cursor to ``key`` (the app following the campaign: no Picked)."""
        if key in self._cells and self.cursor_key() != key:
            self.move_cursor(row=self.keys.index(key), animate=False)

    def _picked(self) -> None:
        key = self.cursor_key()
        if key is not None:
            self.post_message(self.Picked(self, key))

    # The operator's own moves: DataTable's cursor actions, then say so.
    def action_cursor_up(self) -> None:
        super().action_cursor_up()
        self._picked()

    def action_cursor_down(self) -> None:
        super().action_cursor_down()
        self._picked()

    def action_page_up(self) -> None:
        super().action_page_up()
        self._picked()

    def action_page_down(self) -> None:
        super().action_page_down()
        self._picked()

    def action_scroll_top(self) -> None:
        super().action_scroll_top()
        self._picked()

    def action_scroll_bottom(self) -> None:
        super().action_scroll_bottom()
        self._picked()

    def action_select_cursor(self) -> None:
        super().action_select_cursor()
        self._picked()


class _LogHighlighter(Highlighter):
    def __init__(self, log: BootLog) -> None:
        self.log = log

    def highlight(self, text: Text) -> None:
        tag = self.log.classify(text.plain)
        if tag:
            text.stylize(self.log.tags.get(tag, Style()))
        term = self.log.term
        if term:
            match = self.log.tags.get("match", Style(reverse=True))
            text.highlight_words([term], match, case_sensitive=False)


class BootLog(NoLineMeasure, WheelBackHook):
    """The server's log: plain lines, bounded, boot facts and errors highlighted, searchable.

    ``auto_scroll`` is the follow switch: while on, every write and every resize shows the tail;
    scrolling back (keys or wheel) turns it off, as reading old lines should not be yanked away.
    """

    class FollowChanged(Message):
        pass

    def __init__(self, classify: Callable[[str], str], max_lines: int, **kw: Any) -> None:
        super().__init__(highlight=True, max_lines=max_lines, auto_scroll=True, **kw)
        self.classify = classify
        self.tags: dict[str, Style] = {}
        self.term = ""
        self.match: int | None = None
        self.highlighter = _LogHighlighter(self)

    def follow_tail(self) -> None:
        if self.auto_scroll:
            # Now, from the size already known: the lazy scroll_end waits a refresh, a frame of
            # latency per batch. Forced, as it does nothing while the widget is not laid out.
            self.scroll_end(animate=False, immediate=True, force=True, x_axis=False)

    def set_follow(self, on: bool) -> None:
        if on != self.auto_scroll:
            self.auto_scroll = on
            self.post_message(self.FollowChanged())
        if on:
            self.match = None
            self.follow_tail()

    def on_resize(self) -> None:
        self.follow_tail()

    def action_scroll_up(self) -> None:
        self.set_follow(False)
        super().action_scroll_up()

    def action_page_up(self) -> None:
        self.set_follow(False)
        super().action_page_up()

    def action_scroll_home(self) -> None:
        self.set_follow(False)
        super().action_scroll_home()

    def scrolled_back(self) -> None:
        self.set_follow(False)

    def find(self, term: str) -> int | None:
        """The next older line holding ``term`` (wrapping around); scrolls to it."""
        if term != self.term:
            self.term, self.match = term, None
        lines = self.lines
        if not term or not lines:
            self.refresh()
            return None
        needle = term.lower()
        start = (self.match if self.match is not None else len(lines)) - 1
        n = len(lines)
        for i in range(n):
            y = (start - i) % n
            if needle in lines[y].lower():
                self.set_follow(False)  # the operator is reading: stop following
                self.match = y
                self.scroll_to(y=max(0, y - self.size.height // 2), animate=False)
                self.refresh()
                return y
        self.match = None
        self.refresh()
        return None


class ConfirmAbort(ModalScreen[bool]):
    BINDINGS = [Binding("y", "answer(True)", "abort"), Binding("n", "answer(False)", "keep going"),
                Binding("escape", "answer(False)", "keep going")]

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static("[b]Abort the campaign?[/b]\n\n"
                         "The current server is stopped (a container is kept) and rows in flight "
                         "become [i]aborted[/i]. Finished rows stay in the results.\n\n"
                         "[b]y[/b] abort    [b]n[/b] / [b]esc[/b] keep going")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


HELP_INTRO = "[b]ruler console[/b]: every key sends one command to the engine and shows its reply."

# (key, what it does): a description wraps under its own column, never under the keys.
HELP_KEYS = [
    ("a", "abort the campaign (asks first)"),
    ("n", "advance: end the current window, go on with the next"),
    ("w", "rewarm: a warm pass before the next rep"),
    ("r", "rerun the void row under the cursor (reps table)"),
    ("p", "pause / resume between reps"),
    ("/", "search the log ([b]enter[/b] next older match, [b]esc[/b] close)"),
    ("f", "follow the log on / off"),
    ("v", "the raw log, every line / the serving view: once the server is ready, errors, warnings "
          "and the lines ruler reads; the rest folded"),
    ("esc", "back to the live window and shape"),
    ("↑ ↓", "pick a window (or a row); [b]enter[/b] on a window opens its reps"),
    ("tab", "windows list -> reps table -> log (the heavy line marks it)"),
    ("ctrl+p", "command palette (every key is there too)"),
    ("q", "quit the console: [b]the engine keeps running[/b];"),
    ("", "reattach with [b]ruler attach RUN_DIR[/b]"),
]

HELP_MARKS = [
    ("4.5!", "a rep suspected of a leaked autotune pass (far below the median)"),
    ("VOID", "spread over the limit: error colour, the reason in [i]why[/i]"),
    ("att", "the row's attempt: 2 and up, a rerun"),
    ("~", "provisional: the shape is still measuring"),
    ("≠", "a boot fact that differs from this session's control"),
    ("Δ ctl", "the median shape's window / control - 1, its 95 % interval beside it ([i]95% CI[/i]) "
              "where there is room; coloured only beyond the noise (interval without 0, delta over "
              "leak.spread); [i]control void[/i] (or rejected, failed): the control has no figure "
              "to compare"),
    ("▶", "a window the engine is on; [b]▸[/b] the place n, w, p act on"),
]


def help_grid(rows: list[tuple[str, str]]) -> Table:
    """Keys (or marks) in bold beside what they do, each description wrapped in its own column."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True, style="bold", min_width=6)  # the keys' and the marks' alike
    grid.add_column(ratio=1)
    for key, what in rows:
        grid.add_row(key, Text.from_markup(what))
    return grid


class HelpScreen(ModalScreen[None]):
    """The keys and marks; at 80x24 they are taller than the screen, so the dialog scrolls (it has
    the focus: the arrow and page keys scroll it)."""

    BINDINGS = [Binding("escape", "dismiss", "close"), Binding("question_mark", "dismiss", "close"),
                Binding("q", "dismiss", "close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="dialog") as dialog:
            dialog.border_subtitle = "↑ ↓ scroll · esc close"
            yield Static(HELP_INTRO, classes="para")
            yield Static(help_grid(HELP_KEYS), classes="para")
            yield Static("[b]Marks[/b]")
            yield Static(help_grid(HELP_MARKS))
