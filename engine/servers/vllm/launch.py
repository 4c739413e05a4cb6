"""vLLM's command line: where it listens, and the flag its spec-decode counters need."""

from __future__ import annotations

from engine.servers.common import host_port_args
from engine.servers.launch import LaunchArgs


class VLLMLaunch(LaunchArgs):
    default_container_port = 8000  # vllm/vllm-openai images; `vllm serve --port` default

    def listen_args(self, host: str, port: int | str) -> list[str]:
        return host_port_args(host, port)

    def metrics_requirement(self, argv: list[str]) -> str | None:
        if self.metrics_flag not in argv:
            return "no --speculative-config: no spec-decode counters, acceptance is not measured"
        return None
