"""Which names hold a secret, and what a secret's value is replaced with wherever ruler writes:
the words engine.campaign.redact filters by and engine.campaign.sweep names windows by (a window
of a sweep over a secret is named by its position, never by its value)."""

from __future__ import annotations

import re

# HF_TOKEN, WANDB_API_KEY, AWS_SECRET_ACCESS_KEY, DB_PASSWORD, OPENAI_KEY, HF_AUTH, --api-key...;
# not MAX_TOKENS or TOKENIZERS_PARALLELISM, whose values (4096, false) are no credential and occur
# everywhere in a record.
SECRET_NAME = re.compile(r"KEY|SECRET|PASSW|PASSPHRASE|CREDENTIAL|AUTH|TOKEN(?!S|IZER)", re.I)
# A shorter value is no credential (a flag like USE_AUTH_TOKEN=true) and replacing it would
# corrupt unrelated text.
MIN_SECRET_LEN = 8


# The short forms of secret flags, whose own names say nothing (llama-server's -hft is --hf-token).
SECRET_SHORT_FLAGS = frozenset({"-hft"})


def is_secret(name: str) -> bool:
    return name in SECRET_SHORT_FLAGS or bool(SECRET_NAME.search(name))


def marker(name: str) -> str:
    """What a secret's value is replaced with: it names the variable and stays valid plain YAML."""
    return f"<redacted:{name}>"
