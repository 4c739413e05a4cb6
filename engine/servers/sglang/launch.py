"""SGLang's command line: where it listens."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from engine.servers.common import host_port_args
from engine.servers.launch import LaunchArgs

# python/sglang/srt/environ.py: SGLANG_SIMULATE_ACC_LEN = EnvFloat(-1); above 0 the verifier
# accepts drafts to that mean length (SGLANG_SIMULATE_ACC_METHOD says how).
SIMULATE = "SGLANG_SIMULATE_ACC_LEN"


class SGLangLaunch(LaunchArgs):
    default_container_port = 30000  # lmsysorg/sglang images; --port default in server_args

    def listen_args(self, host: str, port: int | str) -> list[str]:
        return host_port_args(host, port)

    def simulated_acceptance(self, argv: Sequence[str], env: Mapping[str, str]) -> str:
        try:
            on = float(env.get(SIMULATE, "-1")) > 0
        except ValueError:
            return ""
        return f"{SIMULATE}={env[SIMULATE]}" if on else ""
