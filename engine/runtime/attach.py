"""An already running server at a URL: no lifecycle, no boot log, so no boot facts."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

from engine.runtime.base import Host, LaunchPlan, normalize_base_url


class AttachedServer:
    def __init__(self, url: str) -> None:
        self.base_url = normalize_base_url(url)
        self.identity: dict[str, object] = {"runtime": "attach", "url": self.base_url}

    def lines(self) -> Iterator[str]:
        return iter(())

    def alive(self) -> bool:
        return True  # we cannot know; readiness probes tell

    def exit_code(self) -> int | None:
        return None

    def stop(self) -> None:
        """Not ours to stop."""


class AttachRuntime:
    """A server someone else runs: every window talks to the same URL; nothing to stop."""

    name = "attach"

    def __init__(self, url: str) -> None:
        self.url = url

    def start(self, plan: LaunchPlan) -> AttachedServer:
        return AttachedServer(self.url)

    def preflight(self, run_dir: Path) -> None:
        """Nothing to check up front: a window that cannot start is rejected with the reason."""

    def stop_strays(self, run_id: str, dir_id: str,
                    servers: Iterable[dict[str, object]]) -> list[dict[str, object]]:
        return []

    def host(self, node: str | None = None) -> Host:
        """Only the URL's host name: the machine behind it is someone else's to describe."""
        return Host(name=urlsplit(normalize_base_url(self.url)).hostname or self.url)
