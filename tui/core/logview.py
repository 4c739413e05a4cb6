"""What the log pane shows of a server log: each line's class, and the serving view. No Textual here
(the follower thread filters with it).

With the verbose logging the adapters ask for, a serving llama-server writes several lines per
request (slot, sampler, prompt cache: 550,000 per window on an H200 run); they scroll the boot
away within seconds. So once the server says it is ready (the adapter's ready line) the pane keeps
only what a person watches a server for: errors, warnings (the first of each wording) and the lines
the adapter reads (acceptance, periodic metrics, per-request timings); the rest is folded into a
count. The file keeps every line, and ``v`` shows it raw.
"""

from __future__ import annotations

from engine.servers.logs import LogReader

MARK = "[ruler: "  # the pane's own lines (folds, skips): never the server's
_ZEROS = str.maketrans("123456789", "000000000")  # ASCII digits: what the patterns' \d meet here


def overstruck(line: str) -> str:
    """A line as a terminal shows it: each carriage return goes back to the line's start and what
    follows writes over what was there (a progress bar redrawn in place: vLLM's weight loading
    writes ``\\rLoading ... 0%\\rLoading ... 100%`` on one line). Shown raw, every CR was a
    ``\\x0d`` between copies of the bar."""
    if "\r" not in line:
        return line
    shown = ""
    for part in line.split("\r"):
        shown = part + shown[len(part):]
    return shown


def shape(line: str) -> str:
    """A line with every digit 0: the thousands of request lines that differ only in their
    numbers share one shape. The adapters' patterns match digit classes (``\\d``), never given
    digits, so a line and its shape are classed alike (tests/unit/tui/test_logview.py checks the
    recorded logs)."""
    return line.translate(_ZEROS)


class LineClassifier:
    """error / warning / fact per log line, by the server adapter's own patterns; "muted" for the
    pane's own lines. Cached by shape: a line costs a substitution and a lookup, not ~40 patterns."""

    def __init__(self, adapter: LogReader | None = None) -> None:
        self.adapter = adapter
        self._cache: dict[str, str] = {}

    def use(self, adapter: LogReader) -> None:
        """Class lines by ``adapter``'s patterns from now on (a window on another stack logs in its
        server's words); what was cached by the other's goes."""
        self.adapter = adapter
        self._cache.clear()

    def __call__(self, line: str) -> str:
        if line.startswith(MARK):
            return "muted"
        if self.adapter is None:
            return ""
        key = shape(line)
        tag = self._cache.get(key)
        if tag is None:
            a = self.adapter
            tag = ("error" if a.is_error(line) else "warning" if a.is_warning(line)
                   else "fact" if a.parse_line(line) else "")
            if len(self._cache) > 8192:
                self._cache.clear()
            self._cache[key] = tag
        return tag


def fold_mark(n: int, warnings: int) -> str:
    repeated = f", {warnings:,} of them repeated warnings" if warnings else ""
    return f"{MARK}{n:,} line{'' if n == 1 else 's'} folded{repeated}]"


class ServingView:
    """One log's serving view, fed in order: every line up to and including the ready line, then
    errors, the first warning of each wording and the lines the adapter reads; each run of folded
    lines becomes one count line, written when the next kept line comes (the run still growing
    at the end is :attr:`pending`)."""

    def __init__(self, adapter: LogReader) -> None:
        self.adapter = adapter
        self.classify = LineClassifier(adapter)
        self.ready = False
        self.folded = 0  # lines folded in all
        self.pending = 0  # folded since the last kept line
        self._pending_warnings = 0
        self._warned: set[str] = set()

    def start_unread(self) -> None:
        """The log's start was not read (a huge log's tail only): its boot is over, serve."""
        self.ready = True

    def feed(self, lines: list[str]) -> list[str]:
        out: list[str] = []
        for line in lines:
            if not self.ready:
                out.append(line)
                self.ready = self.adapter.is_ready_line(line)
                continue
            tag = self.classify(line)
            if tag == "warning":
                key = shape(line)
                if key in self._warned:
                    tag = ""
                    self._pending_warnings += 1
                else:
                    self._warned.add(key)
            if tag:
                if self.pending:
                    out.append(fold_mark(self.pending, self._pending_warnings))
                    self.pending = self._pending_warnings = 0
                out.append(line)
            else:
                self.pending += 1
                self.folded += 1
        return out
