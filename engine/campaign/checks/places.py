"""The places: each named once, and each key one the campaign's runtime reads (a Docker daemon
for docker, a node for slurm, GPUs as that runtime gives them)."""

from engine.campaign.checks.draft import Draft
from engine.campaign.yamlmarks import Issue


def places(d: Draft) -> list[Issue]:
    runtime = d.campaign.runtime if d.stands(("runtime",)) else None
    issues: list[Issue] = []
    seen: set[str] = set()
    for i, place in enumerate(d.campaign.places):
        if place.name in seen:
            issues.append((("places", i, "name"), False, f"place {place.name!r} is listed twice"))
        seen.add(place.name)
        if runtime is None:
            continue
        if place.docker_host and runtime not in ("docker", "auto"):
            issues.append((("places", i, "docker_host"), False,
                           f"docker_host needs runtime docker (the campaign's is {runtime!r})"))
        gpus = place.gpus
        if runtime == "slurm" and gpus is not None and not isinstance(gpus, int):
            issues.append((("places", i, "gpus"), False,
                           "on runtime slurm a place's gpus is a count (its share of the node: "
                           "--gres=gpu:N); Slurm picks the devices"))
        if runtime == "process" and gpus is not None and not isinstance(gpus, tuple) and gpus != "all":
            issues.append((("places", i, "gpus"), False,
                           "on runtime process a place's gpus is all or a list of device ids (they become "
                           "the server's CUDA_VISIBLE_DEVICES)"))
        if place.node and runtime != "slurm":
            issues.append((("places", i, "node"), False,
                           f"node needs runtime slurm (the campaign's is {runtime!r})"))
    return issues
