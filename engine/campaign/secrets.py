"""Which names hold a secret, and what a secret's value is replaced with wherever ruler writes:
the words engine.campaign.redact filters by and engine.campaign.sweep names windows by (a window
of a sweep over a secret is named by its position, never by its value)."""

from __future__ import annotations

import re

# HF_TOKEN, WANDB_API_KEY, AWS_SECRET_ACCESS_KEY, DB_PASSWORD, OPENAI_KEY, HF_AUTH, --api-key,
# SESSION_COOKIE...: these words anywhere in a name.
SECRET_PART = re.compile(r"KEY|SECRET|PASSW|PASSPHRASE|CREDENTIAL|AUTH|COOKIE", re.I)
# GITHUB_PAT, --github-pat: a personal access token, a word of its own (PATH, --patience are not).
SECRET_WORDS = frozenset({"PAT"})
# A token is a credential where it ends the name (HF_TOKEN, AWS_SESSION_TOKEN, --token); the
# servers' knobs count text tokens (MAX_TOKENS, --long-prefill-token-threshold,
# --kt-max-deferred-experts-per-token, EOS_TOKEN_ID), and their values, read everywhere in a
# record, are no credential. The words before TOKEN that make it a text token:
TEXT_TOKEN = frozenset({"PER", "FIRST", "LAST", "NEXT", "NEW", "EOS", "BOS", "PAD", "UNK", "SEP",
                        "CLS", "MASK", "STOP", "SPECIAL", "IMAGE", "VIDEO", "AUDIO"})
# A shorter value is no credential (a flag like USE_AUTH_TOKEN=true) and replacing it would
# corrupt unrelated text.
MIN_SECRET_LEN = 8


# The short forms of secret flags, whose own names say nothing (llama-server's -hft is --hf-token).
SECRET_SHORT_FLAGS = frozenset({"-hft"})


def is_secret(name: str) -> bool:
    """Whether a variable or flag of this name holds a secret (docs/campaign.md, "Secrets")."""
    if name in SECRET_SHORT_FLAGS or SECRET_PART.search(name):
        return True
    words = re.findall(r"[A-Z0-9]+", name.upper())
    if SECRET_WORDS.intersection(words):
        return True
    return bool(words) and words[-1].endswith("TOKEN") and (
        len(words) == 1 or words[-1] != "TOKEN" or words[-2] not in TEXT_TOKEN)


def marker(name: str) -> str:
    """What a secret's value is replaced with: it names the variable and stays valid plain YAML."""
    return f"<redacted:{name}>"
