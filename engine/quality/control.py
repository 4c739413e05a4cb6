"""The control's checks: it becomes the session's reference, measures the floors, settles drift.

The control is scored twice ("self-score repeat-identical on N tokens"); the KL floor is KL between
scorings that should agree (the control twice, the previous session's control, a stored oracle
twice). With ``control_position: last`` windows that ran before it get their greedy verdict here.
"""

from __future__ import annotations

import json
import time
from typing import Any

from engine import __version__, files
from engine.quality.checks import Checks
from engine.quality.drift import DRIFT, drift_summary, write_drift
from engine.quality.maths import greedy_compare, greedy_summary, greedy_verdict
from engine.quality.probe import greedy_items
from engine.quality.reference import (
    REFERENCE,
    Item,
    Reference,
    Scores,
    compare_kl,
    compare_scores,
    load_reference,
    same_items,
)
from engine.record import results
from engine.record.events import EventKind
from engine.record.judgement import judgement
from engine.words import CONTROL, Check, Verdict


class ControlChecks(Checks):
    def control(self, mine: list[dict[str, Any]]) -> None:
        items = greedy_items(mine, self.q.teacher_forced.positions)
        scores = self.timed("score", lambda: self.probe.score(items, self.top_k))
        repeat = self.timed("score", lambda: self.probe.score(items, self.top_k))
        kl_items, kl_scores, kl_repeat, receipt = self.kl_side(items, scores, repeat)
        ref = Reference(self.ctx.session, CONTROL, self.top_k, mine, items, scores, repeat,
                        kl_items, kl_scores, kl_repeat, self.provenance())
        prev = self.previous_reference()
        ref.kl_floors = self.floors(ref, prev, receipt)
        results.write_json(self.ctx.dir / REFERENCE, ref.to_json())
        self.refs.put(ref)
        self.control_greedy(mine, prev)
        self.self_score(items, scores, repeat)
        self.control_kl(ref, receipt)
        self.settle_earlier_windows(ref)
        if self.baseline_dir is not None or self.earlier_sessions():
            self.drift()

    def control_greedy(self, mine: list[dict[str, Any]], prev: Reference | None) -> None:
        """The control is the session's reference; against the previous session's it shows drift."""
        base = {"seed": self.seed, "max_tokens": self.q.greedy.max_tokens}
        if prev is None:
            self.write("greedy.json", {"reference": "self", **base, "outputs": mine})
            self.verdict(Check.GREEDY, Verdict.REFERENCE, f"reference: {len(mine)} prompts",
                         "greedy.json", reference="self")
            return
        cmp = greedy_compare(prev.greedy, mine)
        against = f"{prev.session}-{CONTROL}"
        self.write("greedy.json", {"reference": against, **base, "comparison": cmp, "outputs": mine})
        self.verdict(Check.GREEDY, greedy_verdict(cmp), f"{greedy_summary(cmp)} vs {against}",
                     "greedy.json", identical=cmp["identical"], n=cmp["n"],
                     first_divergence=cmp["first_divergence"], reference=against)

    def kl_side(self, items: list[Item], scores: Scores,
                repeat: Scores) -> tuple[list[Item], Scores, Scores | None, Reference | None]:
        """What KL is taken over: a stored oracle receipt's texts, fixed texts, or the greedy items."""
        receipt_path = self.c.oracle_receipt(self.run.file_variables())
        if receipt_path is not None:
            receipt = load_reference(receipt_path)
            return receipt.kl_items, self.timed(
                "score", lambda: self.probe.score(receipt.kl_items, self.top_k)), None, receipt
        texts = self.c.kl_texts(self.run.file_variables())
        if texts is None:
            return items, scores, repeat, None
        kl_items = self.timed("score", lambda: self.probe.text_items(texts, self.q.kl.positions))
        kl_scores = self.timed("score", lambda: self.probe.score(kl_items, self.top_k))
        kl_repeat = self.timed("score", lambda: self.probe.score(kl_items, self.top_k))
        return kl_items, kl_scores, kl_repeat, None

    def self_score(self, items: list[Item], scores: Scores, repeat: Scores) -> None:
        cmp = compare_scores(items, scores, repeat, self.q.teacher_forced.top_k)
        n = cmp["stats"]["n"]
        if cmp["identical"]:
            verdict, summary = Verdict.REPEAT_IDENTICAL, f"self-score repeat-identical on {n} tokens"
        else:
            verdict = Verdict.REPEAT_DIFFERS
            summary = f"self-score repeat differs: max |dlogp| {cmp['stats']['max']:.3g} on {n} tokens"
        self.write("teacher-forced.json", {
            "reference": "self (scored twice)", "top_k": self.q.teacher_forced.top_k,
            "self_score": {"identical": cmp["identical"], "n": n, "stats": cmp["stats"],
                           "floored": cmp["floored"], "worst": cmp["worst"]},
            "scores": scores, "repeat": repeat})
        self.verdict(Check.SELF_SCORE, verdict, summary, "teacher-forced.json", **cmp["stats"])

    def floors(self, ref: Reference, prev: Reference | None,
               receipt: Reference | None) -> dict[str, Any]:
        """KL between scorings that should agree: the control twice, and across sessions."""
        k = self.q.kl.top_k
        floors: dict[str, Any] = {}
        if ref.kl_repeat is not None:
            floors["repeat"] = compare_kl(ref.kl_scores, ref.kl_repeat, k)
        if prev is not None and same_items(prev.kl_items, ref.kl_items):
            floors["previous_session"] = {**compare_kl(prev.kl_scores, ref.kl_scores, k),
                                          "against": f"{prev.session}-{CONTROL}"}
        if receipt is not None and receipt.kl_repeat is not None:
            floors["oracle_repeat"] = compare_kl(receipt.kl_scores, receipt.kl_repeat, k)
        for f in floors.values():
            f.pop("per_position", None)
        return floors

    def control_kl(self, ref: Reference, receipt: Reference | None) -> None:
        k = self.q.kl.top_k
        floor = ref.kl_floor()
        data: dict[str, Any] = {"oracle": CONTROL if receipt is None else "receipt", "top_k": k,
                                "floor": floor, "floors": ref.kl_floors}
        parts = [f"{name} {f['mean']:.3g}" for name, f in ref.kl_floors.items()]
        summary = f"KL floor: {', '.join(parts) or 'none measured'}"
        vs = None
        if receipt is not None:
            vs = compare_kl(receipt.kl_scores, ref.kl_scores, k)
            data.update(provenance=receipt.provenance, control_vs_oracle=vs)
            summary += f"; control vs oracle mean {vs['mean']:.4g} p99 {vs['p99']:.4g}"
        self.write("kl.json", data)
        self.verdict(Check.KL, Verdict.FLOOR, summary, "kl.json", floor=floor,
                     mean=vs["mean"] if vs else None, p99=vs["p99"] if vs else None)

    def settle_earlier_windows(self, ref: Reference) -> None:
        """Windows that ran with no reference get their greedy verdict now: with control_position
        last, those before the control; with a control that died before its checks and was
        booted again (an operator's rerun), those after it."""
        for window in self.c.windows_in(self.ctx.session):
            if window == CONTROL:
                continue
            path = results.window_dir(self.run.run_dir, self.ctx.session, window) / "greedy.json"
            if not path.exists():
                continue
            data = json.loads(files.read_text(path))
            if data.get("reference") not in (None, "pending"):
                continue
            across = self.c.window(window).server is not None  # another stack: a figure
            cmp = greedy_compare(ref.greedy, data["outputs"], by_ids=not across)
            data.update(reference=f"{self.ctx.session}-{CONTROL} (ran after this window)",
                        comparison=cmp)
            results.write_json(path, data)
            self.run.emit(EventKind.VERDICT, session=self.ctx.session, window=window,
                          check=Check.GREEDY, verdict=greedy_verdict(cmp, across),
                          summary=greedy_summary(cmp, across), file=str(path.relative_to(self.run.run_dir)),
                          figures={"identical": cmp["identical"], "n": cmp["n"],
                                   "first_divergence": cmp["first_divergence"],
                                   "reference": data["reference"]})

    def drift(self) -> None:
        rule = self.c.verdict.rule()
        j = judgement(self.run.state, rule)
        noise = {(cls, c): j.noise_or_declared(cls, c, None) for (cls, c, rate) in j.noise if not rate}
        rows = [r for r in write_drift(self.run.run_dir, list(self.c.sessions),
                                       self.run.state.session_places, rule, noise, self.baseline_dir)
                if r["session"] == self.ctx.session]
        if not rows:
            return
        verdict, summary, worst = drift_summary(rows)
        self.run.emit(EventKind.VERDICT, session=self.ctx.session, window=self.ctx.window,
                      check=Check.DRIFT, verdict=verdict, summary=summary, file=DRIFT,
                      figures={"worst_pct": worst})

    def provenance(self) -> dict[str, Any]:
        facts = self.ctx.facts.as_json()["facts"]
        keep = ("model.path", "model.name", "model.file_type", "model.n_vocab", "model.params",
                "spec.draft_model", "server.model")
        return {"run": self.run.run_id, "campaign": self.c.name, "session": self.ctx.session,
                "window": self.ctx.window, "server": self.ctx.adapter.name,
                "ruler_version": __version__, "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "facts": {k: facts[k] for k in keep if k in facts}}
