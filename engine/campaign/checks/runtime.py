"""The runtime: what it starts a server from (an image, a command, a URL to attach to)."""

from engine.campaign.checks.draft import Draft
from engine.campaign.yamlmarks import Issue

NEEDS = {
    "docker": [("docker", "image")],
    "process": [("process", "command")],
    "attach": [("attach", "url")],
    "auto": [("docker", "image"), ("process", "command")],
}


def runtime(d: Draft) -> list[Issue]:
    c = d.campaign
    if not d.stands(("runtime",)):
        return []
    runtime, start = c.runtime, c.slurm.start
    needs = NEEDS.get(runtime)
    if runtime == "slurm":  # the job starts the campaign's command, or a container of its image
        if not d.stands(("slurm", "start")):
            return []
        needs = [("process", "command")] if start == "process" else [("docker", "image")]
        if start == "pyxis" and not d.given(("docker", "command"), c.docker.command):
            # srun runs a program, not the image's entrypoint: the server's flags would be srun's.
            return [(("slurm", "start"), False, "slurm.start pyxis needs docker.command (srun runs "
                                                "a program in the container, not the image's "
                                                "entrypoint)")]
    if not needs or any(d.given(keys, d.value(keys)) for keys in needs):
        return []
    wanted = " or ".join(".".join(keys) for keys in needs)
    why = f" (slurm.start: {start})" if runtime == "slurm" else ""
    return [(("runtime",), False, f"runtime {runtime!r} needs {wanted}{why}")]
