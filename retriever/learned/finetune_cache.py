"""The cache of fine-tuned Domain-Finetune classifiers (`finetune`): one entry per task, model and
parameters under the user cache directory (`finetune/<fingerprint>/`), holding the weights and an
entry record with their SHA-256; an entry that does not match is reported and rebuilt."""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

from tapt.util.cache import cache_dir
from tapt.util.files import read_regular, sha256_file, write_json_atomic

log = logging.getLogger(__name__)

CACHE_FORMAT = 1
WEIGHTS = "classifier.pt"
ENTRY = "entry.json"


def _entry_dir(fingerprint: str, kind: str = "finetune") -> Path | None:
    root = cache_dir()
    return None if root is None else root / kind / fingerprint[:32]


def load_cached(model: Any, fingerprint: str, kind: str = "finetune") -> dict | None:
    """Weights of a matching, intact cache entry loaded into `model`; None when there is none.
    A damaged or foreign entry is reported and ignored (it is rebuilt). `kind` names the
    cache's folder (`finetune`; `perplexity` for the task-adapted masked LMs)."""
    import torch

    entry = _entry_dir(fingerprint, kind)
    if entry is None or not (entry / ENTRY).exists():
        return None
    try:
        meta = json.loads(read_regular(entry / ENTRY, 1 << 20))
        if meta.get("format") != CACHE_FORMAT or meta.get("fingerprint") != fingerprint:
            raise ValueError("it belongs to another task, model or parameters")
        if sha256_file(entry / WEIGHTS) != meta.get("weights_sha256"):
            raise ValueError("its weights do not match their checksum")
        model.load_state_dict(torch.load(entry / WEIGHTS, map_location="cpu", weights_only=True))
    except (OSError, ValueError, KeyError, RuntimeError, json.JSONDecodeError) as exc:
        log.warning("the cached fine-tuned classifier %s is damaged (%s); training it again",
                    entry, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        return None
    return meta


def store_cached(model: Any, fingerprint: str, meta: dict, kind: str = "finetune"
                 ) -> Path | None:
    """Write the cache entry under a temporary name and rename it into place; None when the
    cache is off or not writable (the classifier is still used)."""
    import torch

    entry = _entry_dir(fingerprint, kind)
    if entry is None:
        return None
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".tmp-", dir=entry.parent))
    except OSError as exc:
        log.warning("fine-tuned classifier not cached (%s)", exc)
        return None
    try:
        state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
        torch.save(state, work / WEIGHTS)
        write_json_atomic(work / ENTRY, {**meta, "format": CACHE_FORMAT,
                                         "fingerprint": fingerprint,
                                         "weights_sha256": sha256_file(work / WEIGHTS)})
        if entry.exists():
            shutil.rmtree(entry)  # a damaged entry of ours, found by load_cached
        work.rename(entry)
        return entry
    except OSError as exc:
        log.warning("fine-tuned classifier not cached (%s)", exc)
        return None
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
