"""`tapt index repair`: rebuild what can be rebuilt without re-embedding (FAISS parts).

`tapt index verify` names the shards whose FAISS part is missing, cut or damaged; only those
parts are built again (an IVF part from the template of a sound part, so it shares its coarse
quantizer), in a new generation swapped in atomically (`generations`), like a reindex.
"""

from __future__ import annotations

import logging
from pathlib import Path

from tapt.errors import IndexFormatError
from tapt.indexer.ann.index_choice import choice_from_manifest
from tapt.indexer.building.reindex import rebuild_parts
from tapt.indexer.building.verify import REBUILD, verify_index
from tapt.indexer.index import Index
from tapt.indexer.store.manifest import FAISS, QUANTIZER

log = logging.getLogger(__name__)

FAISS_CHECKS = frozenset({"faiss", f"file {FAISS}", f"checksum {FAISS}", "quantizer",
                          f"file {QUANTIZER}", f"checksum {QUANTIZER}"})


def repair_index(path: str | Path, progress: bool = True) -> list[str]:
    """Rebuild the FAISS parts that are not sound from the stored embeddings; returns what it
    did.

    Refuses (IndexFormatError) when anything else is wrong: those parts need a rebuild.
    """
    path = Path(path)
    report = verify_index(path, progress=progress)
    broken = [f for f in report.findings if not f.ok]
    other = [f for f in broken if f.check not in FAISS_CHECKS]
    if other:
        where = f"shard {other[0].shard}: " if other[0].shard else ""
        raise IndexFormatError(
            f"cannot repair {path}: {where}{other[0].check}: {other[0].detail}; "
            + (other[0].repair or REBUILD.format(path=path)))
    if not broken:
        return []
    index = Index(path, check_faiss=False)  # every other part is sound (checked above)
    shards = sorted({f.shard for f in broken if f.shard})
    recorded = index.manifest.get("faiss", {})
    choice = choice_from_manifest(recorded, index.n_sentences, index.dim)  # same factory, seed
    manifest = rebuild_parts(index, choice, "repairing", progress, shards=shards,
                             keep=("reindexed", "previous"))
    done = (f"rebuilt {FAISS} of shard(s) {', '.join(shards)} from the embeddings "
            f"({manifest['faiss']['ntotal']:,} rows in all, {choice.factory})")
    log.info(done)
    return [done]
