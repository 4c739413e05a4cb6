"""The modal screens: the abort question and the help."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from engine.words import stop_keeps
from tui.core.verbs import help_rows


class ConfirmAbort(ModalScreen[bool]):
    """``runtime``: the run's, whose stop is said as it is (engine.words.stop_keeps)."""

    BINDINGS = [Binding("y", "answer(True)", "abort"), Binding("n", "answer(False)", "keep going"),
                Binding("escape", "answer(False)", "keep going")]

    def __init__(self, runtime: str) -> None:
        super().__init__()
        self.runtime = runtime

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(Text.assemble(
                ("Abort the campaign?", "bold"), "\n\nThe current server is stopped",
                f": {keeps}" if (keeps := stop_keeps(self.runtime)) else "",
                ". Rows in flight become ", ("aborted", "italic"),
                ". Finished rows stay in the results.\n\n", ("y", "bold"), " abort    ",
                ("n", "bold"), " / ", ("esc", "bold"), " keep going"))

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


HELP_INTRO = ("[b]ruler console[/b]: every key sends one command to the engine and shows its reply; "
              "[b]q[/b] quits the console and [b]the engine keeps running[/b].")

HELP_MARKS = [
    ("4.5!", "a rep suspected of a leaked pass: while the row measures, one far below the reps "
             "before it; once the row is done, the low rep of a leak-shaped row only"),
    ("VOID", "spread over the limit: error colour, the reason in [i]why[/i]"),
    ("att", "the row's attempt: 2 and up, a rerun; [i]rerun[/i] in its status: queued, [i]why[/i] "
            "says what it waits on"),
    ("sim", "beside an acceptance figure: the server was told to accept drafts at a set rate "
            "(simulated, not measured)"),
    ("~", "provisional: the shape is still measuring"),
    ("≠", "a boot fact that differs from this session's control"),
    ("Δ ctl", "the median shape's window / control - 1, its 95 % interval beside it ([i]95% CI[/i]) "
              "where there is room; coloured only beyond the noise (interval without 0, delta over "
              "leak.spread); [i]control void[/i] (or rejected, failed): the control has no figure "
              "to compare"),
    ("call", "the window's call, as the report's glance table says it: its one question (does it "
             "change tok/s at any of its shapes?) asked over its sessions; blank on a control"),
    ("…", "a cell cut to fit: [b]enter[/b] on its row shows it whole (the detail view)"),
    ("▶", "a window the engine is on; [b]▸[/b] the place n, w, p act on"),
]


def help_grid(rows: list[tuple[str, str]]) -> Table:
    """Keys (or marks) in bold beside what they do, each description wrapped in its own column."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True, style="bold", min_width=7)  # the keys' and the marks' alike
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
            yield Static(help_grid(help_rows()), classes="para")
            yield Static("[b]Marks[/b]")
            yield Static(help_grid(HELP_MARKS))
