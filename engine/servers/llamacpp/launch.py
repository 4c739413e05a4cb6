"""llama.cpp's command line: where it listens, and the verbosity its boot facts need."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from engine.servers.common import host_port_args
from engine.servers.launch import LaunchArgs, flag_value

# common/arg.cpp: synthetic acceptance, "benchmarking only": its length or per-position rates.
SYNTH_FLAGS = ("--spec-synth-len", "--spec-synth-rates")
SYNTH_ENV = ("LLAMA_ARG_SPEC_SYNTH_LEN", "LLAMA_ARG_SPEC_SYNTH_RATES")


class LlamaCppLaunch(LaunchArgs):
    default_container_port = 8080  # ghcr.io/ggml-org/llama.cpp:server* images

    def listen_args(self, host: str, port: int | str) -> list[str]:
        return host_port_args(host, port)

    def log_args(self) -> list[str]:
        # Boot facts are libllama INFO lines, printed only at trace verbosity (engine.servers.llamacpp.logs).
        return ["-lv", "4"]

    def simulated_acceptance(self, argv: Sequence[str], env: Mapping[str, str]) -> str:
        found = flag_value(argv, *SYNTH_FLAGS)
        if found is not None:
            return f"{found[0]} {found[1]}"
        name = next((n for n in SYNTH_ENV if env.get(n, "").strip()), None)
        return f"{name}={env[name]}" if name else ""
