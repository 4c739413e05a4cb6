"""Prometheus text as the adapters read it: one number per sample name."""

from __future__ import annotations

import re

from engine.servers.data import BadServerData, pos_key


def summed_samples(text: str, families: tuple[str, ...] = ()) -> dict[str, float]:
    """Prometheus text -> {sample name: value}, counters summed over their label sets.

    With ``families``, only their lines are parsed (:func:`only_families`): a big vLLM's
    /metrics is mostly histograms ruler does not read, and a server's 32 MiB of samples cost 12 s
    and 120 MB to parse whole.

    SGLang and vLLM label every sample (model name, engine, ``is_streaming``, ...), so keeping
    only unlabelled samples would find nothing; a counter's total over label sets is what a rep
    delta needs; a counter labelled ``position`` (vLLM's and llama.cpp's accepted tokens per draft
    position) also keeps each position's sum, under :func:`position_sample`. Gauges take the
    largest value (several ranks report the same setting).
    Text that is not Prometheus exposition (an HTML error page, a proxy's banner) raises
    :class:`BadServerData` with the parser's reason; values are not checked here (NaN is valid
    Prometheus), the counters a delta reads are.
    """
    # Here, not at the top: the adapters import this module, and reading a log through one (the
    # console) needs no parser.
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    if families:
        text = only_families(text, families)
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                value = float(s.value)
                if s.name.endswith("_total"):
                    out[s.name] = out.get(s.name, 0.0) + value
                    if "position" in s.labels:  # a per-position counter: each position's own sum too
                        key = position_sample(s.name, int(s.labels["position"]))
                        out[key] = out.get(key, 0.0) + value
                else:
                    out[s.name] = max(out.get(s.name, value), value)
    except (ValueError, TypeError, IndexError, KeyError) as e:  # the parser's ways of saying "not mine"
        raise BadServerData(f"not Prometheus text ({type(e).__name__}: {str(e)[:120]})") from e
    return out


def only_families(text: str, names: tuple[str, ...]) -> str:
    """The lines of ``text`` about the families ``names`` start (their samples, HELP and TYPE),
    in their order, found by searching for each name rather than splitting every line, and the
    text's first line that is no comment, whatever it is: a body that is no Prometheus text at all
    (an HTML error page, a proxy's banner) is still refused by the parser."""
    starts = set()
    for name in names:
        at = text.find(name)
        while at != -1:  # each occurrence judged by the few characters before it
            if at == 0 or text[at - 1] == "\n":
                starts.add(at)
            elif text[at - 7:at] in ("# HELP ", "# TYPE ") and (at == 7 or text[at - 8] == "\n"):
                starts.add(at - 7)
            at = text.find(name, at + len(name))
    if (first := _FIRST_SAMPLE.search(text)) is not None:
        starts.add(first.start())
    out = []
    for start in sorted(starts):
        end = text.find("\n", start)
        out.append(text[start:] if end == -1 else text[start:end])
    return "\n".join(out) + "\n"


_FIRST_SAMPLE = re.compile(r"^[ \t]*[^\s#]", re.M)


def position_sample(name: str, position: int) -> str:
    """The key of one position's sum of a per-position counter in :func:`summed_samples`."""
    return f'{name}{{position="{position}"}}'


def per_position(samples: dict[str, float], name: str) -> dict[str, float]:
    """A per-position counter's sums as ``pos.<i>`` counts (the shape engine.servers.data names)."""
    out: dict[str, float] = {}
    i = 0
    while (key := position_sample(name, i)) in samples:
        out[pos_key(i)] = samples[key]
        i += 1
    return out
