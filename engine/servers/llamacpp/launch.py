"""llama.cpp's command line: where it listens, and the verbosity its boot facts need."""

from __future__ import annotations

from engine.servers.common import host_port_args
from engine.servers.launch import LaunchArgs


class LlamaCppLaunch(LaunchArgs):
    default_container_port = 8080  # ghcr.io/ggml-org/llama.cpp:server* images

    def listen_args(self, host: str, port: int | str) -> list[str]:
        return host_port_args(host, port)

    def log_args(self) -> list[str]:
        # Boot facts are libllama INFO lines, printed only at trace verbosity (engine.servers.llamacpp.logs).
        return ["-lv", "4"]
