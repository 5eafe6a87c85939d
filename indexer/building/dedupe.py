"""Documents an index or an add already holds, by the hashes each shard stores (`dochash.npy`:
`lexical.doc_hash` of each document's sentences): what a prepare task of `index add` skips
(`DocHashes`), and which new shards of one add repeat a document of an earlier one
(`repeated_documents`), so the add's shards are prepared in parallel and only those are
prepared again."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tapt.indexer.store.manifest import DOC_HASHES, SHARDS


class DocHashes:
    """Document hashes already held (sorted 64-bit prefixes, full hashes beside them), plus those
    met while preparing."""

    def __init__(self, directories: tuple[str, ...]) -> None:
        arrays = [np.load(Path(d) / DOC_HASHES) for d in directories
                  if (Path(d) / DOC_HASHES).is_file()]
        full = np.concatenate(arrays) if arrays else np.zeros((0, 16), dtype=np.uint8)
        keys = np.ascontiguousarray(full[:, :8]).view("<u8").reshape(-1)
        order = np.argsort(keys, kind="stable")
        self.keys, self.full = keys[order], full[order]
        self.new: set[bytes] = set()

    def seen(self, digest: bytes) -> bool:
        """Whether `digest` is held already; remembers it otherwise."""
        key = np.frombuffer(digest[:8], dtype="<u8")[0]
        at = int(np.searchsorted(self.keys, key))
        while at < len(self.keys) and self.keys[at] == key:
            if self.full[at].tobytes() == digest:
                return True
            at += 1
        if digest in self.new:
            return True
        self.new.add(digest)
        return False


@dataclass(frozen=True)
class RepeatsTask:
    """The new shards of an add, in row order, prepared each against the index alone."""

    work: str
    shards: tuple[str, ...]


def repeated_documents(task: RepeatsTask) -> list[int]:
    """Per shard, how many of its documents an earlier shard of the list holds (none repeats
    within a shard: a prepare task skips those). One sort of every document hash of the add
    (its 16 bytes as two 64-bit keys), in this task."""
    arrays, owner = [], []
    for i, name in enumerate(task.shards):
        path = Path(task.work) / SHARDS / name / DOC_HASHES
        hashes = np.load(path) if path.is_file() else np.zeros((0, 16), dtype=np.uint8)
        arrays.append(hashes)
        owner.append(np.full(len(hashes), i, dtype=np.int64))
    if not arrays or not sum(len(a) for a in arrays):
        return [0] * len(task.shards)
    keys = np.ascontiguousarray(np.concatenate(arrays)).view("<u8").reshape(-1, 2)
    shard = np.concatenate(owner)
    order = np.lexsort((shard, keys[:, 1], keys[:, 0]))    # by hash, then earliest shard
    sorted_keys = keys[order]
    later = np.zeros(len(order), dtype=bool)
    later[1:] = (sorted_keys[1:] == sorted_keys[:-1]).all(axis=1)
    return np.bincount(shard[order][later], minlength=len(task.shards)).astype(int).tolist()
