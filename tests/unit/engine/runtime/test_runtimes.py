"""The runtime registry (engine.runtime): every name a campaign may give resolves to its runtime,
an unknown one is refused naming the known ones, and a runtime's module loads only when asked for."""

from __future__ import annotations

import json
import subprocess
import sys
import typing

import pytest

from engine.campaign.spec import Campaign
from engine.runtime import get_runtime, known_runtimes


def test_the_registry_knows_every_runtime_a_campaign_may_name() -> None:
    named = set(typing.get_args(typing.get_type_hints(Campaign)["runtime"])) - {"auto"}
    assert known_runtimes() == sorted(named)


@pytest.mark.parametrize("name", ["process", "attach", "slurm"])
def test_each_name_gives_its_runtime(name: str) -> None:
    rt = get_runtime(name, secrets={"hf_abcdefghijklmnop": "HF_TOKEN"}, partition="gpu",
                     url="http://127.0.0.1:1")
    assert rt.name == name


def test_an_unknown_runtime_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"^unknown runtime 'kubernetes'; known: attach, docker, "
                                         r"process, slurm$"):
        get_runtime("kubernetes")


def test_a_runtime_loads_only_its_own_module() -> None:
    code = ("import json, sys\nfrom engine.runtime import get_runtime\nget_runtime('process')\n"
            "print(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    mods = set(json.loads(out.stdout))
    assert "engine.runtime.process" in mods
    assert not mods & {"docker", "engine.runtime.docker", "engine.runtime.slurm.server"}
