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


def identity_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Human-readable 'key: old -> new' for each field that differs."""
    diffs = []
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            a, b = json.dumps(old.get(key)), json.dumps(new.get(key))
            if len(a) > 60 or len(b) > 60:
                diffs.append(f"{key} differs")
            else:
                diffs.append(f"{key}: {a} -> {b}")
    return diffs
