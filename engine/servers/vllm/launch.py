"""vLLM's command line: where it listens, and the flag its spec-decode counters need."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from engine.servers.common import host_port_args
from engine.servers.launch import LaunchArgs, flag_value


class VLLMLaunch(LaunchArgs):
    default_container_port = 8000  # vllm/vllm-openai images; `vllm serve --port` default

    def listen_args(self, host: str, port: int | str) -> list[str]:
        return host_port_args(host, port)

    def simulated_acceptance(self, argv: Sequence[str], env: Mapping[str, str]) -> str:
        # vllm/config/speculative.py: rejection_sample_method "synthetic" accepts draft tokens at
        # synthetic_acceptance_rates (or _length) whatever the target says.
        found = flag_value(argv, "--speculative-config", "-sc")
        try:
            spec = json.loads(found[1]) if found else None
        except ValueError:
            return ""
        if not isinstance(spec, dict) or spec.get("rejection_sample_method") != "synthetic":
            return ""
        how = next((f" ({k} {spec[k]})" for k in ("synthetic_acceptance_length",
                                                   "synthetic_acceptance_rates") if k in spec), "")
        return f"{found[0] if found else ''} rejection_sample_method synthetic{how}"

    def metrics_requirement(self, argv: list[str]) -> str | None:
        if self.metrics_flag not in argv:
            return "no --speculative-config: no spec-decode counters, acceptance is not measured"
        return None
