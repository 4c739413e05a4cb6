"""A class from a dataset file: ShareGPT JSON (engine.campaign.sources.sharegpt) or JSONL
(engine.campaign.sources.jsonl), its records of one category if the class names one, a seeded
sample of them if it asks for one. The sample is drawn once, when the run freezes its items: every
rep and every window sends the same requests, and two runs with the same seed the same sample."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Literal

from engine.campaign.prompts import DataFileError
from engine.campaign.sources import jsonl, sharegpt
from engine.campaign.sources.base import Count, Frozen, Record, Seed, Source, Text
from engine.campaign.sources.item import Item

DEFAULT_SEED = 1234  # the campaign's quality seed's default too (engine.campaign.defaults.SEED)


class DatasetSpec(Frozen):
    file: Text
    format: Literal["sharegpt", "jsonl"] | None = None  # None: .jsonl is JSONL, anything else ShareGPT
    category: Text | None = None  # only the records whose category field has this value
    category_field: Text = "category"
    sample: Count | None = None  # this many records, drawn with the seed; None: every record, in order
    seed: Seed = DEFAULT_SEED
    # data: each request asks for its record's output length, exactly (the adapter's fields that
    # ignore the end of sequence); a record without one, the workload's max_tokens.
    # workload: every request up to the workload's max_tokens, as a plain class.
    output: Literal["data", "workload"] = "data"
    output_field: Text = "output_tokens"

    def reader_format(self) -> str:
        if self.format is not None:
            return self.format
        return "jsonl" if self.file.lower().endswith(".jsonl") else "sharegpt"


def pick(path: Path, found: list[Record], spec: DatasetSpec) -> list[Record]:
    """The records the class sends: its category's, then its seeded sample."""
    if spec.category is not None:
        kept = [r for r in found if r.category == spec.category]
        if not kept:
            seen = sorted({r.category for r in found if r.category is not None})
            raise DataFileError(path, f"no record has {spec.category_field} {spec.category!r} ("
                                      + (f"the file has {', '.join(map(repr, seen[:12]))}"
                                         + (", ..." if len(seen) > 12 else "")
                                         if seen else f"no record has a {spec.category_field}") + ")")
        found = kept
    if spec.sample is None:
        return found
    if spec.sample > len(found):
        of = f" of {spec.category_field} {spec.category!r}" if spec.category is not None else ""
        raise DataFileError(path, f"sample {spec.sample} is more than the {len(found)} records{of}")
    # A str seed hashes the same in every process and Python version.
    return random.Random(f"dataset:{spec.seed}").sample(found, spec.sample)


class Dataset(Source):
    key, what = "dataset", "dataset file"

    def file(self, spec: Any) -> str | None:
        return str(spec.file)

    def items(self, spec: Any, path: Path | None) -> list[Item]:
        assert path is not None and isinstance(spec, DatasetSpec)
        reader = jsonl.records if spec.reader_format() == "jsonl" else sharegpt.records
        chosen = pick(path, reader(path, spec.output_field, spec.category_field), spec)
        return [{"messages": r.messages,
                 "max_tokens": r.output_tokens if spec.output == "data" else None} for r in chosen]
