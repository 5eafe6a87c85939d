"""`tapt index repair`: rebuild what can be rebuilt without re-embedding (the FAISS index).

The repaired index replaces the old one in one atomic swap (`generations`), like a reindex.
"""

from __future__ import annotations

import logging
from pathlib import Path

from tapt.errors import IndexFormatError

from .index import Index
from .index_choice import choice_from_manifest
from .manifest import FAISS
from .reindex import rebuild_faiss
from .verify import REBUILD, verify_index

log = logging.getLogger(__name__)

FAISS_CHECKS = frozenset({"faiss", f"file {FAISS}", f"checksum {FAISS}"})


def repair_index(path: str | Path, progress: bool = True) -> list[str]:
    """Rebuild the FAISS index from the stored embeddings if it is not sound; returns what it did.

    Refuses (IndexFormatError) when anything else is wrong: those parts need a rebuild.
    """
    path = Path(path)
    report = verify_index(path, progress=progress)
    broken = [f for f in report.findings if not f.ok]
    other = [f for f in broken if f.check not in FAISS_CHECKS]
    if other:
        raise IndexFormatError(
            f"cannot repair {path}: {other[0].check}: {other[0].detail}; "
            + REBUILD.format(path=path))
    if not broken:
        return []
    index = Index(path, check_faiss=False)  # every other part is sound (checked above)
    recorded = index.manifest.get("faiss", {})
    choice = choice_from_manifest(recorded, index.n_sentences, index.dim)  # same factory, seed
    manifest = rebuild_faiss(index, choice, "repairing", progress, keep=("reindexed", "previous"))
    info = manifest["faiss"]
    done = f"rebuilt {FAISS} from the embeddings ({info['ntotal']:,} rows, {choice.factory})"
    log.info(done)
    return [done]
