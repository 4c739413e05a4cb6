"""SGLang's command line: where it listens."""

from __future__ import annotations

from engine.servers.common import host_port_args
from engine.servers.launch import LaunchArgs


class SGLangLaunch(LaunchArgs):
    default_container_port = 30000  # lmsysorg/sglang images; --port default in server_args

    def listen_args(self, host: str, port: int | str) -> list[str]:
        return host_port_args(host, port)
