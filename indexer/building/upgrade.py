"""`tapt index upgrade`: bring an index of format 1 or 2 to the current format (3, sharded)
without re-embedding.

The upgrade first checks every file against the SHA-256 its manifest recorded (a damaged index is
refused: its text would be sealed as sound). The old index becomes shard `000000` of a new
generation: its embeddings, token counts, document offsets and FAISS index are hard-linked (not
rewritten); its text store too for format 2, while format 1's bare JSON records are rewritten with
CRC32s. What format 3 adds is computed from the stored text in one pass: each document's hash
(for `index add`) and the lexical ids text-scanning methods read. The new generation is swapped
in atomically (`generations`), like `add` and `reindex`. Rows and text are unchanged, so
selections made from the old index stay valid: the old manifest's hash is listed under
`same_content_as`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from tapt.indexer.building import stages
from tapt.indexer.building.generations import link_or_copy, replace_generation
from tapt.indexer.building.publishing import top_vocabulary
from tapt.indexer.index import Index
from tapt.indexer.reading.lexical import LexicalWriter, doc_hash
from tapt.indexer.reading.splitter import segment_offsets
from tapt.indexer.store.integrity import check_all_checksums
from tapt.indexer.store.manifest import (
    BIGRAMS,
    DOC_HASHES,
    DOCS,
    EMBEDDINGS,
    FAISS,
    LEXICAL,
    LEXICAL_OFFSETS,
    LMDB_DATA,
    SHARDED_VERSIONS,
    SHARDS,
    STORE,
    TOKENS,
    UPGRADABLE_VERSIONS,
    VOCAB,
    shard_name,
    write_index_manifest,
    write_shard_manifest,
    written_version,
)
from tapt.indexer.store.text_store import TextStoreWriter
from tapt.util.files import sha256_file
from tapt.util.versions import library_versions, utc_now

log = logging.getLogger(__name__)

_BATCH = 4096


def upgrade_index(path: str | Path, progress: bool = True) -> tuple[dict[str, Any], bool]:
    """Upgrade the index at `path` in place (atomically); returns (manifest, whether it changed).

    Raises:
        IndexFormatError: the index is damaged (any file differs from its recorded checksum,
            a record is not JSON), or of a format this tapt cannot read.
    """
    path = Path(path)
    index = Index(path, versions=SHARDED_VERSIONS + UPGRADABLE_VERSIONS)
    old = index.manifest
    if index.format_version in SHARDED_VERSIONS:
        return old, False
    check_all_checksums(path, old, path, ", so it cannot be upgraded")
    previous = index.manifest_sha256
    n = index.n_sentences
    names = [item.name for item in path.iterdir()]

    def write(work: Path) -> dict[str, Any]:
        name = shard_name(0)
        shard = work / SHARDS / name
        shard.mkdir(parents=True)
        for file in (EMBEDDINGS, TOKENS, DOCS, FAISS):
            if (path / file).is_file():
                link_or_copy(path / file, shard / file)
        (shard / STORE).mkdir()
        rewrite = index.format_version < 2
        writer = TextStoreWriter(shard / STORE, checksummed=True) if rewrite else None
        if not rewrite:
            link_or_copy(path / LMDB_DATA, shard / LMDB_DATA)
        lexical = LexicalWriter()
        hashes, current, sentences = [], None, []
        docs = index.doc_offsets
        try:
            with tqdm(total=n, unit="record", desc="upgrade", disable=not progress,
                      leave=False) as bar:
                for start in range(0, n, _BATCH):
                    batch = index.store.records(range(start, min(n, start + _BATCH)))
                    if writer is not None:
                        writer.put_many(start, batch)
                    for offset, record in enumerate(batch):
                        row = start + offset
                        doc = int(np.searchsorted(docs, row, side="right")) - 1
                        if doc != current:
                            if sentences:
                                hashes.append(doc_hash(sentences))
                            current, sentences = doc, []
                        sentences.append(record["text"])
                        lexical.add(record["text"])
                    bar.update(len(batch))
            if sentences:
                hashes.append(doc_hash(sentences))
        finally:
            if writer is not None:
                writer.close()
        stages._save(shard / DOC_HASHES,
                     np.frombuffer(b"".join(hashes), dtype=np.uint8).reshape(-1, 16))
        arrays = lexical.arrays()
        for file, key in ((stages.VOCAB, "vocab"), (BIGRAMS, "bigrams"), (LEXICAL, "lexical"),
                          (LEXICAL_OFFSETS, "lexical_offsets")):
            stages._save(shard / file, arrays[key])
        recorded = old.get("checksums") or {}
        checksums = {file: recorded.get(file) or sha256_file(shard / file)
                     for file in (EMBEDDINGS, TOKENS, DOCS, FAISS) if (shard / file).is_file()}
        for file in (LMDB_DATA, DOC_HASHES, stages.VOCAB, BIGRAMS, LEXICAL, LEXICAL_OFFSETS):
            checksums[file] = (recorded.get(file) if file == LMDB_DATA and not rewrite
                               else None) or sha256_file(shard / file)
        faiss_info = dict(old.get("faiss") or {})
        is_ivf = faiss_info.get("kind") == "ivfpq" or "IVF" in str(faiss_info.get("factory"))
        counts = old["counts"]
        _, sha = write_shard_manifest(shard, {
            "shard": name, "built": {"row_offset": 0, "factory": faiss_info.get("factory"),
                                     "template_sha256": None, "codes": False},
            "rows": n, "documents": int(counts["documents"]), "tokens": int(counts["tokens"]),
            "truncated_sentences": int(counts.get("truncated_sentences", 0)),
            "duplicate_documents_skipped": 0,
            "skipped_blank_records": int(counts.get("skipped_blank_records", 0)),
            "invalid_utf8_records": int(counts.get("invalid_utf8_records", 0)),
            "input_files": [f.get("path") if isinstance(f, dict) else str(f)  # format 1: paths
                            for f in old.get("ingest", {}).get("files", [])],
            "embeddings": old["files"]["embeddings"],
            "faiss": {"factory": faiss_info.get("factory"), "ntotal": n,
                      "bytes": faiss_info.get("bytes") or (shard / FAISS).stat().st_size,
                      "ids": "global" if is_ivf else "local", "id_base": 0},
            "codes": None, "checksums": checksums})
        vocab_sha = top_vocabulary(work, [name])
        size = int(old["segment_size"])
        manifest = dict(old)
        manifest["format_version"] = written_version(faiss_info)
        manifest["shards"] = [{"name": name, "row_offset": 0, "rows": n, "doc_offset": 0,
                               "documents": int(counts["documents"]), "segment_offset": 0,
                               "segments": len(segment_offsets(docs, size)) - 1,
                               "tokens": int(counts["tokens"]), "shard_sha256": sha}]
        manifest["faiss"] = {**faiss_info, "part_ids": "global" if is_ivf else "local",
                             "ntotal": n}
        manifest["codes"] = None
        manifest["files"] = {**old.get("files", {}),
                             "store_records": "CRC32 (big-endian) of local key + JSON, then the "
                                              "JSON",
                             "layout": f"{SHARDS}/NNNNNN/", "vocabulary": VOCAB}
        manifest["lexical"] = {"tokens": r"\w+|[^\w\s] of the lowercased text",
                               "hash": "first 8 bytes (little-endian) of BLAKE2b of the word, "
                                       "UTF-8",
                               "vocabulary": int(len(np.load(work / VOCAB, mmap_mode="r")))}
        manifest["checksums"] = {VOCAB: vocab_sha}
        manifest["same_content_as"] = list(old.get("same_content_as") or []) + [previous]
        manifest["upgraded"] = {"from_format": old["format_version"], "at": utc_now(),
                                "versions": library_versions()}
        return write_index_manifest(work, manifest)

    manifest = replace_generation(path, "upgrading", names, write, based_on=previous)
    log.info("%s: format %s -> %s (one shard of %s records, lexical ids stored)", path,
             old["format_version"], manifest["format_version"], f"{n:,}")
    return manifest, True
