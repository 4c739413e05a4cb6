"""The console's k9s habits beside its keys: the ``:`` command line (what each key does, and what
no key says: a row by its key, the report), the sort keys and a header's click. Parsing is
``tui.core.commands``', ordering ``tui.core.sorting``'s; this runs them on the console."""

from __future__ import annotations

from typing import Protocol

from textual.message import Message
from textual.suggester import Suggester

from engine.record.state import RunState
from tui.core.commands import Command, CommandError, completions, parse
from tui.core.fmt import Seg
from tui.core.reps import MEDIAN, REP_COLUMNS, SPREAD
from tui.core.selection import Selection
from tui.core.sorting import Sort
from tui.core.windows import WINDOW_COLUMNS

# The sort keys per table (N: back to the campaign's order).
SORT_KEYS = {"windows": {"S": "status", "D": "Δ ctl"},
             "reps": {"S": "status", "T": MEDIAN, "P": SPREAD}}
SORT_WORDS = {"delta": "Δ ctl", "ci": "95% CI", "tok/s": MEDIAN, "name": "window"}
ENGINE_COMMANDS = ("abort", "advance", "rewarm", "pause", "resume", "rerun")


class Console(Protocol):
    """What the command line acts on: the console (tui.app.RulerConsole), as far as its commands
    reach."""

    state: RunState
    sel: Selection

    @property
    def over(self) -> bool: ...
    @property
    def on_reps(self) -> bool: ...  # the reps table has the focus (sorting acts on it)
    def say(self, segs: list[Seg]) -> None: ...
    def render_all(self) -> None: ...
    def rerun(self, key: str) -> None: ...
    def action_rerun(self) -> None: ...
    def action_abort(self) -> None: ...
    def command(self, cmd: str, args: list[str] | None = None) -> None: ...
    def window_command(self, cmd: str) -> None: ...
    def write_report(self, args: list[str]) -> None: ...
    def open_detail(self, key: str) -> None: ...
    def set_filter(self, text: str) -> None: ...
    def page(self, rel: str) -> None: ...
    def action_help(self) -> None: ...
    def action_quit_console(self) -> None: ...


class Reported(Message):
    """``ruler report`` on the run ended: its exit code and what it printed."""

    def __init__(self, code: int, out: str, err: str) -> None:
        super().__init__()
        self.code, self.out, self.err = code, out, err


class CommandSuggester(Suggester):
    """The ``:`` line's completion: the commands, and the run's rows and windows after them."""

    def __init__(self, console: Console) -> None:
        super().__init__(use_cache=False)
        self.console = console

    async def get_suggestion(self, value: str) -> str | None:
        st = self.console.state
        found = completions(value, [*st.order, *st.rows])
        return found[0] if found else None


class CommandLine:
    """The command line and the sorting of one console."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def submit(self, line: str) -> None:
        try:
            self.run(parse(line))
        except CommandError as e:
            self.console.say([(f":{line.strip()}", "bold"), (str(e), "warning")])

    def run(self, cmd: Command) -> None:
        c, name, args = self.console, cmd.name, cmd.args
        if name in ENGINE_COMMANDS and c.over:
            c.say([(f":{name}:", "bold"), ("the run is over: no engine to act", "warning")])
        elif name == "rerun":
            c.rerun(args[0]) if args else c.action_rerun()
        elif name == "abort":
            c.action_abort()
        elif name in ("advance", "rewarm", "pause", "resume"):
            c.command(name, args) if args else c.window_command(name)
        elif name == "report":
            c.say([(":report", "bold"), ("writing the report…", "muted")])
            c.write_report(args)
        elif name == "open":
            if args[0] in c.state.rows or args[0] in c.state.windows:
                c.open_detail(args[0])
            else:
                c.say([(":open", "bold"), (f"no row or window {args[0]!r}", "warning")])
        elif name == "filter":
            c.set_filter(" ".join(args))
        elif name == "sort":
            self.sort_word(args[0])
        elif name == "log":
            ws = c.state.windows.get(c.sel.shown or "")
            if ws and ws.log:
                c.page(ws.log)
        elif name == "help":
            c.action_help()
        elif name == "quit":
            c.action_quit_console()

    def _table(self) -> str:
        """The table a sort acts on: the reps table when it has the keys, else the windows list."""
        return "reps" if self.console.on_reps else "windows"

    def sort_key(self, key: str) -> None:
        table, c = self._table(), self.console
        column = SORT_KEYS[table].get(key)
        if key == "N":
            c.sel.sorts.pop(table, None)
            c.say([("sort:", "bold"), (f"the {table} in campaign order", "")])
            c.render_all()
        elif column is None:
            c.say([("sort:", "bold"), (f"{key} sorts " + ("the reps table (tab to it)" if table ==
                                       "windows" else "the windows list"), "warning")])
        else:
            self.sort_by(table, column)

    def sort_by(self, table: str, column: str) -> None:
        """Order a table by a column; again, the other way."""
        c = self.console
        before = c.sel.sorts.get(table)
        sort = before.toggled(column) if before else Sort(column)
        c.sel.sorts[table] = sort
        c.say([("sort:", "bold"), (f"{table} by {column}" + (", descending" if sort.descending
                                                             else ""), "")])
        c.render_all()

    def sort_word(self, word: str) -> None:
        table = self._table()
        columns = WINDOW_COLUMNS if table == "windows" else REP_COLUMNS
        want = SORT_WORDS.get(word, word)
        match = [col for col in columns if col.lower().startswith(want.lower())]
        if not match:
            self.console.say([(":sort", "bold"), (f"no column {word!r} in the {table}; "
                                                  f"columns: {', '.join(columns)}", "warning")])
        else:
            self.sort_by(table, match[0])

    def reported(self, message: Reported) -> None:
        if message.code == 0:
            made = [line.split(":", 1)[1].strip() for line in message.out.splitlines()
                    if line.startswith(("report:", "html:"))]
            self.console.say([(":report", "bold"), ("written: " + ", ".join(made), "success")])
        else:
            why = (message.err.strip().splitlines() or [f"exit code {message.code}"])[-1]
            self.console.say([(":report", "bold"), (f"failed: {why}", "error")])
