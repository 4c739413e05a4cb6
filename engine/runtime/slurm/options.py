"""sbatch's options as sbatch reads them, to find what an option of a campaign's ``slurm.sbatch``
list sets.

sbatch reads the ``#SBATCH`` lines of a job script into one argument list and hands it to glibc's
``getopt_long`` with Slurm's option table (``src/common/slurm_opt.c``, ``common_options``; those
with a sbatch setter): a long option may be written as any prefix that names one option alone (an
exact name wins; ``--outp`` is ``--output``), a short one may follow others in one word (``-vo x``
is ``-v -o x``, ``-vox`` too), and an option that takes a value takes the next word when it has
none of its own. The table below is Slurm 22.05.8's; a newer Slurm only adds options, which makes
more prefixes ambiguous (sbatch then refuses them itself), never fewer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())

# Long options by what they take after them (``--name=value``, or the next word).
NO_VALUE = _words("""
contiguous help hold ignore-pbs no-requeue overcommit oversubscribe parsable quiet reboot requeue
spread-job test-only use-min-nodes verbose version usage wait
""")
NEEDS_VALUE = _words("""
account acctg-freq array batch begin bb bbf cluster-constraint chdir cluster clusters comment
container context constraint core-spec cores-per-socket cpu-freq cpus-per-gpu cpus-per-task
deadline delay-boot dependency distribution error exclude export export-file extra-node-info gid
gpu-bind gpu-freq gpus gpus-per-node gpus-per-socket gpus-per-task gres gres-flags hint input
job-name kill-on-invalid-dep licenses mail-type mail-user mcs-label mem mem-bind mem-per-cpu
mem-per-gpu mincpus network nodefile nodelist nodes ntasks ntasks-per-core ntasks-per-gpu
ntasks-per-node ntasks-per-socket ntasks-per-tres open-mode output partition power prefer
priority profile qos reservation signal sockets-per-node switches tasks-per-node thread-spec
threads-per-core time time-min tmp uid wait-all-nodes wckey wrap
""")
MAY_TAKE_VALUE = _words("exclusive get-user-env nice no-kill propagate")  # only with =
LONG = NO_VALUE | NEEDS_VALUE | MAY_TAKE_VALUE
# Short options and their long names; sbatch's getopt string is
# "+A:a:b:D:M:C:S:c:d:m:e:x:B:G:hHi:J:L:k::F:w:N:n:o:Osp:q:Qt:vVW".
SHORT = {"A": "account", "a": "array", "b": "begin", "D": "chdir", "M": "clusters",
         "C": "constraint", "S": "core-spec", "c": "cpus-per-task", "d": "dependency",
         "m": "distribution", "e": "error", "x": "exclude", "B": "extra-node-info", "G": "gpus",
         "h": "help", "H": "hold", "i": "input", "J": "job-name", "L": "licenses", "k": "no-kill",
         "F": "nodefile", "w": "nodelist", "N": "nodes", "n": "ntasks", "o": "output",
         "O": "overcommit", "s": "oversubscribe", "p": "partition", "q": "qos", "Q": "quiet",
         "t": "time", "v": "verbose", "V": "version", "W": "wait"}

# What ruler sets itself, because the method or its receipts depend on it: the job's name and
# comment (how a killed engine's jobs are found), its output (boot.log), one job of one task on
# one node of this cluster (ruler reads this cluster's queue), no requeue, the session's node, and
# a submission that returns the job id at once.
OWNED = frozenset({"job-name", "comment", "output", "error", "open-mode", "nodes", "ntasks",
                   "requeue", "no-requeue", "nodelist", "parsable", "wrap", "array", "cluster",
                   "clusters", "wait"})
OWNED_WHY = ("job name, comment, output, one job of one task on one node of this cluster, no "
             "requeue, no --wait, the session's node")


# What sbatch reads specially in an #SBATCH line: it splits words at whitespace, takes quotes and
# backslashes as quoting and '#' as a comment, and a newline ends the line. A value holding one is
# read as other words, or other options, than the campaign wrote.
SPECIAL = re.compile(r"[\s\"'\\#\x00-\x1f\x7f]")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # a newline ends the line; no quoting holds one


@dataclass(frozen=True)
class Read:
    """What sbatch makes of one word of a ``#SBATCH`` line."""

    options: tuple[str, ...]  # the long names of the options it sets, in order
    # A prefix of several: the options it could be (sbatch refuses it). Neither: an option this
    # table does not know (a newer Slurm's, or a typo sbatch refuses).
    ambiguous: tuple[str, ...] = ()
    wants_next: bool = False  # its last option takes the next word as its value


def long_option(name: str) -> tuple[str, ...]:
    """The options ``--name`` can stand for: one (an exact name, or a prefix of one option alone),
    several (an ambiguous prefix), or none."""
    if name in LONG:
        return (name,)
    return tuple(sorted(n for n in LONG if n.startswith(name)))


def read_word(word: str) -> Read:
    """The options one word sets as sbatch reads it (``--name[=value]``, or ``-abc`` clusters of
    short options); a word that is no option (no leading ``-``, or ``--`` that ends them) sets none."""
    if word.startswith("--") and word != "--":
        name, eq, _ = word[2:].partition("=")
        found = long_option(name)  # "--=x" is a prefix of every option
        if len(found) != 1:
            return Read((), ambiguous=found)
        return Read(found, wants_next=found[0] in NEEDS_VALUE and not eq)
    if not word.startswith("-") or word == "-":
        return Read(())
    options: list[str] = []
    for i, letter in enumerate(word[1:], start=1):
        long = SHORT.get(letter)
        if long is None:
            continue  # sbatch refuses a letter it does not know, and reads on
        options.append(long)
        if long in NEEDS_VALUE:  # the rest of the word is its value, or else the next word
            return Read(tuple(options), wants_next=i == len(word) - 1)
        if long in MAY_TAKE_VALUE:  # the rest of the word, if any, is its value
            break
    return Read(tuple(options))


def refusal(word: str) -> str:
    """Why ``word`` may not be one of a campaign's extra sbatch options ("" when it may): it sets,
    or may set, an option ruler owns, or it takes the next entry as its value."""
    flag = word.split("=", 1)[0]
    read = read_word(word)
    owned = [o for o in read.options + read.ambiguous if o in OWNED]
    if owned and read.ambiguous:
        said = f"may be sbatch's {' or '.join(f'--{o}' for o in owned)}, which ruler sets"
    elif owned and (flag == f"--{owned[0]}" or SHORT.get(flag[1:2]) == owned[0]):
        said = "is set by ruler"
    elif owned:
        said = f"is sbatch's --{owned[0]}, which ruler sets"
    elif read.wants_next:
        return (f"{flag} takes a value: write it in the same entry "
                f"({flag}{'=' if flag.startswith('--') else ''}VALUE)")
    else:
        return ""
    return f"{flag} {said} ({OWNED_WHY}): leave it out"
