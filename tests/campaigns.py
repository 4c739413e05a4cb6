"""The one campaign builder of the tests: a campaign as its YAML would say it, as a dict, with the
defaults a small test wants; a test overrides what it is about and writes it with :func:`write`.

``campaign`` is the fake runtime's (its command is never run: tests/component/fakes.py starts the
servers); ``testbed_campaign`` runs the testbed's llama-server (tests/integration).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

# No row is void unless a test means it: spread is only checked from C8, and up to 90%.
CALM = {"min_concurrency": 8, "spread": 0.9, "max_reruns": 1}
# A leak check from C2 at 50% for the tests of void rows. Their requests are long enough (16
# tokens, 0.1 s) that scheduling noise on a loaded machine stays far below that spread.
LEAKY = {"min_concurrency": 2, "spread": 0.5, "max_reruns": 1}


def campaign(name: str, windows: dict[str, dict[str, Any]], sessions: dict[str, list[str]],
             **workload: Any) -> dict[str, Any]:
    """A small campaign, as its YAML would say it; ``workload`` keys override the defaults."""
    wl: dict[str, Any] = {"classes": {"prose": {"prompts": ["Write one sentence about the sea.",
                                                            "Name three colours."]}},
                          "concurrency": [2], "reps": 3, "requests_per_rep": 2, "max_tokens": 6}
    leak = workload.pop("leak", CALM)
    quality = workload.pop("quality", {"enabled": False})
    boot = workload.pop("boot", 10)
    position = workload.pop("control_position", "first")
    verdict = workload.pop("verdict", None)
    wl.update(workload)
    return {**({"verdict": verdict} if verdict is not None else {}),
        "name": name, "server": "llamacpp", "runtime": "process",
        "process": {"command": ["llama-server"]},  # never run: the fake runtime starts the servers
        "control": {"args": {"-c": 2048, "-np": 2, "--metrics": True}},
        "windows": [{"name": w, "axis": spec.pop("axis", w), "change": spec}
                    for w, spec in windows.items()],
        # The control once a session: a test about something else boots no control again (the
        # verdicts' own tests ask for control_position both).
        "sessions": sessions, "control_position": position,
        "workload": wl, "leak": leak, "quality": quality,
        "timeouts": {"boot": boot, "request": 10},
    }


CTX = {"ctx": {"axis": "context 4096", "args": {"-c": 4096}}}


def testbed_campaign(name: str, windows: dict[str, dict[str, Any]], sessions: dict[str, list[str]],
                     model: str = "Q8_0", **workload: Any) -> dict[str, Any]:
    """:func:`campaign` on the testbed's llama-server (``${testbed.*}``, tests/integration), one
    server thread."""
    spec = campaign(name, windows, sessions, **workload)
    spec["process"] = {"command": ["${testbed.llama_server}"]}
    spec["control"] = {"model": f"${{testbed.models}}/SmolLM2-135M-Instruct.{model}.gguf",
                       "args": {"-m": "${model}", "-c": 2048, "-np": 2, "-t": 1, "--metrics": True}}
    return spec


def write(directory: Path, spec: dict[str, Any]) -> Path:
    """The campaign file ``<name>.yaml`` in ``directory``."""
    path = directory / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path
