"""What a tune says: ``tune.json`` (the recommended flags and launch command, every candidate's
evidence, what was ruled out and why) and ``tune.md``, the same in words. tune.md is markdown made
as report.md is: every text from the campaign, the tune file or a server goes through the report's
one escaping path (``engine.report.text.table``, ``engine.sanitize.markdown``)."""

from __future__ import annotations

import shlex
from dataclasses import asdict
from pathlib import Path
from typing import Any

from engine.record.trade import value_text
from engine.report.text import table
from engine.sanitize import Md, code, markdown, terminal
from engine.tune.rounds import Round
from engine.tune.spec import Tune
from engine.words import CONTROL


def argv_of(done: list[Round], config: dict[str, Any]) -> list[str] | None:
    """The argv ruler booted the recommended configuration with, as the operator would run it: a
    control or a window of a round whose args were those."""
    for rnd in reversed(done):
        if rnd.control == config:
            found = next((a for k, a in rnd.argv.items() if k.endswith(f"-{CONTROL}")), None)
            if found:
                return found
        for c in rnd.candidates:
            if {**rnd.control, **c.change} == config:
                found = rnd.argv.get(f"{c.session}-{c.window}")
                if found:
                    return found
    return None


def flags_text(args: dict[str, Any]) -> str:
    """Flags as a command line says them: a bare flag alone, a value after its flag."""
    return " ".join(k if v is True else f"{k} {value_text(v)}" for k, v in args.items()
                    if v is not None and v is not False)


def verdict_words(tune: Tune) -> str:
    """How a candidate is called, in words: the verdict the trade tables use."""
    return ("each candidate's delta on the objective against its session's control boots, the "
            "noise between boots counted in its interval; " + tune.base.verdict.rule().text()
            + "; a delta called neither better nor worse is no decision")


def summary(tune: Tune, tune_dir: Path, done: list[Round], start: dict[str, Any],
            incumbent: dict[str, Any], stop: str) -> dict[str, Any]:
    argv = argv_of(done, incumbent)
    changed = {k: v for k, v in incumbent.items() if start.get(k) != v}
    return {
        "tune": str(tune.path), "campaign": str(tune.base.source_path), "directory": str(tune_dir),
        "objective": tune.objective_text(), "kl_max": tune.spec.kl_max,
        "verdict_rule": verdict_words(tune),
        "space": {k: {"values": list(v.values), "lossy": v.lossy} for k, v in tune.spec.space.items()},
        "stop": stop, "start": start, "recommended": incumbent, "changed": changed,
        # Paths as ruler booted them: the same command on another box with the same layout.
        "command": shlex.join(argv) if argv else "(not booted as such: see recommended)",
        "rounds": [{k: v for k, v in asdict(r).items() if k != "argv"} for r in done],
    }


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.1f} %"


def tune_md(out: dict[str, Any]) -> str:
    """tune.md from :func:`summary`'s ``out``: its verdict words and decisions are ruler's markdown
    (:func:`verdict_words`, engine.tune.judge.decision); every other text is escaped here."""
    changed = ", ".join(code(flags_text({k: v})) for k, v in out["changed"].items())
    command = terminal(out["command"]).replace("`", "'")  # inert inside the fence
    lines = [f"# ruler tune: {markdown(Path(out['campaign']).name)}", "",
             f"Objective: {markdown(out['objective'])}. Verdict: {Md(out['verdict_rule'])}. "
             "Lossless values keep greedy identical and teacher-forced |dlogp| exact or close; lossy "
             f"ones a KL mean at most {out['kl_max']:g}.", "",
             "## Recommended", "",
             f"Stopped: {markdown(out['stop'])}.", "",
             f"Changed from the control: {changed or 'nothing (the control stays)'}.", "",
             "The command ruler booted the recommended flags with (what ruler adds to it, its "
             "listening address and log verbosity, left out):", "",
             "```", command, "```", ""]
    ruled: list[str] = []
    for r in out["rounds"]:
        lines += [f"## Round {r['number']} ({markdown(r['kind'])})", "",
                  f"Control: {code(flags_text(r['control']))}; "
                  f"run {code(r['run'])} ({r['boots']} boots, {r['seconds'] / 60:.1f} min).", ""]
        rows: list[list[str | Md]] = []
        for c in r["candidates"]:
            change = flags_text(c["change"])
            quality = "; ".join(f"{k} {v}" for k, v in c["quality"].items()) or "-"
            iv = f"[{_pct(c['lo'])}, {_pct(c['hi'])}]" if c["lo"] is not None else "-"
            # A decision is ruler's words and figures, with what a server said in it already
            # through markdown() (engine.tune.judge.decision, no_figure_why).
            why = Md(c["why"])
            rows.append([f"{c['session']}-{c['window']}", change, Md(_pct(c["delta"])), Md(iv), c["call"],
                         quality, why, ", ".join(c["receipts"])])
            if not c["kept"]:
                ruled.append(f"- round {r['number']}: {markdown(change)}: {why.removeprefix('ruled out: ')}")
        lines += table(["window", "change", "delta", "95 % interval", "call", "quality", "decision",
                        "receipts"], rows)
    lines += ["## Ruled out", "", *(ruled or ["- nothing"]), ""]
    return "\n".join(lines)
