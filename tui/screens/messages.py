"""What the App and the run screen tell each other. The App's workers post the first four to the
run screen (they come from threads, never touching a widget); the screen posts the rest, which
bubble up to the App."""

from __future__ import annotations

from typing import Any

from textual.message import Message

from tui.core.follow import Batch, Link


class Followed(Message):
    """A batch of journal events and log lines from the follower thread."""

    def __init__(self, batch: Batch) -> None:
        super().__init__()
        self.batch = batch


class Linked(Message):
    """What the engine probe found; only the latest matters."""

    def __init__(self, link: Link) -> None:
        super().__init__()
        self.link = link

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, Linked)


class Replied(Message):
    """The engine's answer to one command."""

    def __init__(self, cmd: str, args: list[str], reply: dict[str, Any]) -> None:
        super().__init__()
        self.cmd, self.args, self.reply = cmd, args, reply


class Reported(Message):
    """``ruler report`` on the run ended: its exit code and what it printed."""

    def __init__(self, code: int, out: str, err: str) -> None:
        super().__init__()
        self.code, self.out, self.err = code, out, err


class CaughtUp(Message):
    """The run screen read the journal and its log to their end for the first time."""


class Send(Message):
    """A command for the engine, over its control socket."""

    def __init__(self, cmd: str, args: list[str]) -> None:
        super().__init__()
        self.cmd, self.args = cmd, args


class Report(Message):
    """``ruler report`` on the run, with these arguments."""

    def __init__(self, args: list[str]) -> None:
        super().__init__()
        self.args = args
