"""The guard on the sbatch options ruler owns, against every spelling sbatch itself resolves to one
(issue 26, item 1): long options by any unambiguous prefix, short ones inside a cluster, an option
whose value is the next entry, and words sbatch's reader of an #SBATCH line splits or cuts.

The table of sbatch's options (engine/runtime/slurm/options.py) is checked against the real sbatch,
prefix by prefix, in tests/integration/test_slurm_cluster.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from engine.campaign.load import SpecError, load_campaign
from engine.campaign.machines import SlurmSpec
from engine.runtime.slurm import options
from tests.paths import FIXTURES

CAMPAIGN = FIXTURES / "slurm" / "campaign.yaml"
LETTER = {long: short for short, long in options.SHORT.items()}
# A value as a campaign would write one: nothing sbatch's line reader treats specially.
VALUE = st.text(st.sampled_from("abcxyz019/_.:,@%+-="), max_size=12)


def refused(entry: str) -> bool:
    try:
        SlurmSpec.model_validate({"sbatch": [entry]})
    except ValidationError:
        return True
    return False


def with_slurm(tmp_path: Path, **slurm: object) -> Path:
    spec = yaml.safe_load(CAMPAIGN.read_text())
    spec["slurm"] = {**spec["slurm"], **slurm}
    path = tmp_path / "campaign.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def unambiguous_prefixes(name: str) -> list[str]:
    """The prefixes of ``name`` that name it alone in sbatch's table (getopt_long takes those)."""
    return [name[:n] for n in range(1, len(name) + 1)
            if name[:n] == name or [o for o in options.LONG if o.startswith(name[:n])] == [name]]


@pytest.mark.parametrize(("entry", "owned"), [
    # The spellings issue 26 found validating, each one of the owned options as sbatch reads it.
    ("--outp=/elsewhere/boot.log", "output"), ("--comm=ruler-run=other", "comment"),
    ("--requ", "requeue"), ("--nodel=node3", "nodelist"), ("--err=/elsewhere/err.log", "error"),
    ("--job=mine", "job-name"), ("--open=truncate", "open-mode"),
])
def test_an_abbreviation_of_an_owned_option_is_refused_naming_what_sbatch_reads(
        tmp_path: Path, entry: str, owned: str) -> None:
    path = with_slurm(tmp_path, sbatch=["--mem=0", entry])
    with pytest.raises(SpecError) as e:
        load_campaign(path)
    flag = entry.split("=", 1)[0]
    line, col = next((n, text.index(entry) + 1) for n, text in
                     enumerate(path.read_text().splitlines(), start=1) if entry in text)
    assert str(e.value) == (
        f"{path}:{line}:{col}: slurm.sbatch[1]: {flag} is sbatch's --{owned}, which ruler sets (job name, "
        "comment, output, one job of one task on one node of this cluster, no requeue, no --wait, "
        "the session's node): leave it out")


@pytest.mark.parametrize(("entry", "said"), [
    ("-vo/elsewhere/boot.log", "-vo/elsewhere/boot.log is sbatch's --output, which ruler sets"),
    ("-HJmine", "-HJmine is sbatch's --job-name, which ruler sets"),
    ("-wnode3", "-wnode3 is set by ruler"),
    ("--no", "--no may be sbatch's --no-requeue or --nodelist or --nodes, which ruler sets"),
    ("--clu=other", "--clu may be sbatch's --cluster or --clusters, which ruler sets"),
    ("--array=0-3", "--array is set by ruler"), ("-W", "-W is set by ruler"),
])
def test_short_clusters_and_ambiguous_prefixes_of_owned_options_are_refused(entry: str,
                                                                           said: str) -> None:
    with pytest.raises(ValidationError) as e:
        SlurmSpec.model_validate({"sbatch": [entry]})
    assert said in str(e.value)


@pytest.mark.parametrize(("entry", "why"), [
    # "--opt value": sbatch splits the line at the space, and reads the second word on its own.
    ("--mem=0 --output=/elsewhere/boot.log", "without whitespace"),
    ("--constraint h200", "without whitespace"),
    ("--mem=0\n#SBATCH --output=/elsewhere", "without whitespace"),
    ('--"output"=/elsewhere', "quotes"), ("--out\\put=/elsewhere", "backslashes"),
    ("--mem=0#--output=/x", "'#'"), ("--", "one sbatch option"), ("-", "one sbatch option"),
    # An option without its value takes the next entry as its value.
    ("--constraint", "--constraint takes a value: write it in the same entry (--constraint=VALUE)"),
    ("-C", "-C takes a value: write it in the same entry (-CVALUE)"),
])
def test_entries_sbatch_would_read_as_other_words_are_refused(entry: str, why: str) -> None:
    with pytest.raises(ValidationError) as e:
        SlurmSpec.model_validate({"sbatch": [entry]})
    assert why in str(e.value)


@pytest.mark.parametrize("entry", ["--mem=0", "--constraint=h200", "-Ch200", "--exclusive",
                                   "--gres-flags=enforce-binding", "--ntasks-per-node=1",
                                   "--export=ALL", "-t10", "--nodefile=/etc/nodes", "--hold",
                                   "--some-newer-slurm-option=1"])
def test_options_ruler_does_not_own_pass(entry: str) -> None:
    assert not refused(entry)


@given(st.sampled_from(sorted(options.OWNED)).flatmap(lambda name: st.tuples(
    st.just(name), st.sampled_from(unambiguous_prefixes(name)), VALUE, st.booleans())))
def test_any_long_spelling_sbatch_resolves_to_an_owned_option_is_refused(
        case: tuple[str, str, str, bool]) -> None:
    _, prefix, value, with_value = case
    assert refused(f"--{prefix}={value}" if with_value else f"--{prefix}")


@given(st.sampled_from(sorted(set(LETTER) & options.OWNED)).flatmap(lambda name: st.tuples(
    st.just(LETTER[name]),
    st.lists(st.sampled_from(sorted(s for s, o in options.SHORT.items() if o in options.NO_VALUE)),
             max_size=4),
    VALUE)))
def test_any_short_spelling_of_an_owned_option_is_refused(case: tuple[str, list[str], str]) -> None:
    """``-o``, ``-ofile``, ``-vHofile``: options without a value may come first in the word."""
    letter, before, value = case
    assert refused(f"-{''.join(before)}{letter}{value}")


@given(st.sampled_from(sorted(options.NEEDS_VALUE - options.OWNED)).flatmap(lambda name: st.tuples(
    st.sampled_from([p for p in unambiguous_prefixes(name)
                     if not any(o.startswith(p) for o in options.OWNED)]), VALUE)))
def test_any_spelling_of_an_option_ruler_does_not_own_passes(case: tuple[str, str]) -> None:
    prefix, value = case
    assert not refused(f"--{prefix}={value}")


@pytest.mark.parametrize(("field", "value"), [
    ("partition", "gpu\n#SBATCH --output=/elsewhere"), ("account", "proj --output=/elsewhere"),
    ("qos", "high\t--comment=x"), ("gres", 'gpu:4"'), ("partition", "gpu#2"), ("account", ""),
])
def test_a_slurm_field_sbatch_would_read_as_other_words_is_refused_where_it_is(
        tmp_path: Path, field: str, value: str) -> None:
    path = with_slurm(tmp_path, **{field: value})
    with pytest.raises(SpecError) as e:
        load_campaign(path)
    assert str(e.value).startswith(f"{path}:")
    assert (f"slurm.{field}: must be one word as sbatch reads an #SBATCH line: no whitespace, "
            "control characters, quotes, backslashes or '#'") in str(e.value)
