"""Prometheus text as the adapters read it: one number per sample name."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def summed_samples(text: str) -> dict[str, float]:
    """Prometheus text -> {sample name: value}, counters summed over their label sets.

    SGLang and vLLM label every sample (model name, engine, ``is_streaming``, ...), so keeping
    only unlabelled samples would find nothing; a counter's total over label sets is what a rep
    delta needs. Gauges take the largest value (several ranks report the same setting).
    """
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            value = float(s.value)
            if s.name.endswith("_total"):
                out[s.name] = out.get(s.name, 0.0) + value
            else:
                out[s.name] = max(out.get(s.name, value), value)
    return out
