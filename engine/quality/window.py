"""A window's checks against its session's reference: greedy, |dlogp|, KL, no observable effect."""

from __future__ import annotations

import json
from typing import Any

from engine import files
from engine.quality.checks import Checks
from engine.quality.effect import IGNORED_FACT, fact_diff, no_effect_verdict, rows_called
from engine.quality.maths import greedy_compare, greedy_summary, greedy_verdict
from engine.quality.reference import (
    Reference,
    Scores,
    compare_kl,
    compare_scores,
    load_reference,
    same_items,
)
from engine.record import results
from engine.record.judgement import judgement
from engine.words import CONTROL, Check, Verdict, is_control

TF_CLOSE = 0.05  # nats: a p99 |dlogp| at or below this is numeric noise, not a different model
KL_CLEAR = 10.0  # a lossy window's KL is "above floor" when > KL_CLEAR x floor ...
KL_MIN = 1e-4  # ... and above this, so that a zero floor does not make any noise count


class WindowChecks(Checks):
    def window(self, mine: list[dict[str, Any]]) -> None:
        # control_position: last: the session's control runs later, an earlier one stands in.
        ref = self.session_reference() or self.previous_reference()
        if ref is None:
            self.write("greedy.json", {"reference": "pending", "seed": self.seed,
                                       "max_tokens": self.q.greedy.max_tokens, "outputs": mine})
            self.verdict(Check.GREEDY, Verdict.NO_REFERENCE, "the session's control has not run (yet)",
                         "greedy.json", reference="none")
            return
        across = not self.is_control and self.c.window(self.ctx.window).server is not None  # another stack
        cmp = greedy_compare(ref.greedy, mine, by_ids=not across)
        against = f"{ref.session}-{CONTROL}" + (" (its first boot)" if self.is_control else "")
        self.write("greedy.json", {"reference": against, "seed": self.seed,
                                   "max_tokens": self.q.greedy.max_tokens, "comparison": cmp,
                                   "outputs": mine})
        self.verdict(Check.GREEDY, greedy_verdict(cmp, across), greedy_summary(cmp, across),
                     "greedy.json", identical=cmp["identical"], n=cmp["n"],
                     first_divergence=cmp["first_divergence"], reference=against,
                     **({"agreement": round(cmp["identical"] / cmp["n"], 4) if cmp["n"] else None}
                        if across else {}))
        # Neither a boot of the control (a later control boot, or the control itself booted again
        # for a rerun: one of the control's boots, not a question) nor another stack (its boot
        # facts and numerics differ by nature) gets a no-observable-effect call.
        if not across and not self.is_control and not is_control(self.ctx.window):
            self.no_effect(cmp)
        scores = self.guarded(Check.TEACHER_FORCED, lambda: self.timed(
            "score", lambda: self.probe.score(ref.items, ref.top_k)))
        if scores is None:
            return
        self.teacher_forced(ref, scores)
        if self.lossy:
            self.guarded(Check.KL, lambda: self.kl(ref, scores))

    def teacher_forced(self, ref: Reference, scores: Scores) -> None:
        k = self.q.teacher_forced.top_k
        cmp = compare_scores(ref.items, ref.scores, scores, k)
        st = cmp["stats"]
        if st["n"] == 0:
            self.verdict(Check.TEACHER_FORCED, Verdict.NO_REFERENCE, "no scored positions", None)
            return
        verdict = (Verdict.EXACT if st["max"] == 0 else Verdict.CLOSE if st["p99"] <= TF_CLOSE
                   else Verdict.DIFFERS)
        summary = (f"|dlogp| p50 {st['p50']:.3g} p99 {st['p99']:.3g} max {st['max']:.3g} on "
                   f"{st['n']} tokens" + (f" ({cmp['floored']} floored)" if cmp["floored"] else "")
                   + (f"; {cmp['unscored']} not scored: the server gave no probabilities there "
                      "(a byte of a character not yet whole)" if cmp["unscored"] else ""))
        self.write("teacher-forced.json", {
            "reference": f"{ref.session}-{CONTROL}", "top_k": k, "stats": st,
            "floored": cmp["floored"], "unscored": cmp["unscored"],
            "floor_rule": "outside the top-k: the k-th logprob",
            "worst": cmp["worst"], "positions": cmp["positions"], "scores": scores})
        self.verdict(Check.TEACHER_FORCED, verdict, summary, "teacher-forced.json", **st,
                     floored=cmp["floored"])

    def kl(self, ref: Reference, scores: Scores) -> None:
        receipt_path = self.c.oracle_receipt(self.run.file_variables())
        if receipt_path is not None:
            oracle = load_reference(receipt_path)
            oracle_scores = oracle.kl_scores
            win = self.timed("score", lambda: self.probe.score(oracle.kl_items, self.top_k))
            provenance: dict[str, Any] = {"receipt": str(receipt_path), **oracle.provenance}
        else:
            oracle_scores = ref.kl_scores
            win = scores if same_items(ref.kl_items, ref.items) else self.timed(
                "score", lambda: self.probe.score(ref.kl_items, self.top_k))
            provenance = {"oracle": f"{ref.session}-{CONTROL}", **ref.provenance}
        k = self.q.kl.top_k
        res = compare_kl(oracle_scores, win, k)
        floor = ref.kl_floor()
        above = res["mean"] is not None and res["mean"] > max(KL_CLEAR * (floor or 0.0), KL_MIN)
        self.write("kl.json", {"oracle": provenance, "top_k": k, "kl": res, "floor": floor,
                               "floors": ref.kl_floors,
                               "rule": f"above floor: mean > max({KL_CLEAR:g} x floor, {KL_MIN:g})",
                               "scores": win if win is not scores else "see teacher-forced.json"})
        floor_text = f"floor {floor:.3g}" if floor is not None else "no floor measured"
        summary = (f"KL mean {res['mean']:.4g} p99 {res['p99']:.4g} on {res['n']} positions "
                   f"({floor_text})")
        self.verdict(Check.KL, Verdict.ABOVE_FLOOR if above else Verdict.AT_FLOOR, summary, "kl.json",
                     mean=res["mean"], p99=res["p99"], floor=floor)

    def no_effect(self, greedy: dict[str, Any]) -> None:
        """Boot facts equal, throughput rows inside the control's spread, greedy identical."""
        control_facts = self.control_facts()
        mine = [r for r in list(self.run.state.rows.values())
                if r.session == self.ctx.session and r.window == self.ctx.window and r.row]
        rows = rows_called(judgement(self.run.state, self.run.campaign.verdict.rule()), mine)
        facts = None if control_facts is None else fact_diff(self.ctx.facts.as_json()["facts"],
                                                             control_facts)
        verdict, reasons = no_effect_verdict(facts, rows, greedy)
        self.write("no-effect.json", {"verdict": verdict, "reasons": reasons, "facts_differ": facts,
                                      "ignored_facts": IGNORED_FACT.pattern, "rows": rows["rows"],
                                      "greedy": f"{greedy['identical']}/{greedy['n']}"})
        summary = verdict if not reasons else f"{verdict}: {'; '.join(reasons)}"
        self.verdict(Check.NO_EFFECT, verdict, summary, "no-effect.json")

    def control_facts(self) -> dict[str, Any] | None:
        facts = self.run.control_facts.get(self.ctx.session)
        if facts is not None:
            found: dict[str, Any] = facts.as_json()["facts"]
            return found
        path = results.window_dir(self.run.run_dir, self.ctx.session, CONTROL) / "boot-facts.json"
        return json.loads(files.read_text(path)).get("facts") if path.exists() else None
