"""The training manifest and the run identity checked on --resume."""

from __future__ import annotations

import hashlib
import json
from typing import Any

TRAINING_MANIFEST = "training_manifest.json"
TRAINING_FORMAT = "tapt-training"
TRAINING_FORMAT_VERSION = 1


def identity_hash(identity: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of a run identity."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


# What a difference in these fields means, said instead of their values (hashes)
_MEANING = {
    "selections": "a selection file holds other segments than when the run began (it was "
                  "rewritten or replaced since: a select --out over it?)",
    "task": "a task file holds other text than when the run began",
    "eval_text": "the held-out text differs from the run's",
}


def identity_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Human-readable 'key: old -> new' for each field that differs; a changed input file says
    so in words (its hash is no use to a reader), and the data's hash, which follows from the
    inputs, is left out when an input differs."""
    diffs = []
    changed = {key for key in _MEANING if old.get(key) != new.get(key)}
    for key in sorted(set(old) | set(new)):
        if key in changed:
            diffs.append(_MEANING[key])
        elif key == "data_sha256" and changed:
            continue
        elif old.get(key) != new.get(key):
            a, b = json.dumps(old.get(key)), json.dumps(new.get(key))
            if len(a) > 60 or len(b) > 60:
                diffs.append(f"{key} differs")
            else:
                diffs.append(f"{key}: {a} -> {b}")
    return diffs
