"""An already running server at a URL: no lifecycle, no boot log, so no boot facts."""

from __future__ import annotations

from collections.abc import Iterator

from engine.runtime.base import normalize_base_url


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
