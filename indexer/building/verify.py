"""`tapt index verify`: check an index shard by shard and file by file, and say how to repair
what is wrong.

Reads the files directly (not through `Index`, which refuses a damaged index) so that every
problem is named, not only the first; every read is guarded first (file lengths before LMDB maps
a page, FAISS ids before a search), so a damaged index is diagnosed, never a crash. Each finding
names its shard. Repairs: `tapt index repair` rebuilds damaged FAISS parts from the stored
embeddings; damaged embeddings, text, offsets or lexical ids need a rebuild from the corpus; an
index of format 1 or 2 needs `tapt index upgrade`.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tapt.errors import TaptError
from tapt.indexer.store import integrity
from tapt.indexer.store.manifest import (
    DOCS,
    EMBEDDINGS,
    FAISS,
    LMDB_DATA,
    QUANTIZER,
    SHARDED_VERSIONS,
    SHARDS,
    STORE,
    TOKENS,
    UPGRADABLE_VERSIONS,
    VOCAB,
    lost_manifest_hint,
    read_index_manifest,
    read_shard_manifest,
    upgrade_hint,
)
from tapt.util.checks import whole_number
from tapt.util.files import read_regular, regular_file

REPAIR = "run tapt index repair {path} (rebuilds the FAISS index from the stored embeddings)"
REBUILD = "rebuild the index from its corpus (tapt index build ... --out {path} --overwrite)"
LMDB_FILE = LMDB_DATA
SELF_SEARCH_K = 10
SELF_SEARCH_MIN = 0.9
# numpy's .npy header parser raises many kinds (ValueError, SyntaxError, tokenize.TokenError...)
_READ_ERRORS = (Exception,)


@dataclass
class Finding:
    """One check: its name, verdict, what was found, what to run, and its shard (None for the
    index as a whole)."""

    check: str
    ok: bool
    detail: str
    repair: str = ""
    shard: str | None = None


@dataclass
class VerifyReport:
    path: str
    findings: list[Finding] = field(default_factory=list)
    shard: str | None = None   # the shard the next findings belong to

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.findings)

    def add(self, check: str, ok: bool, detail: str, repair: str = "") -> bool:
        self.findings.append(Finding(check, ok, detail, "" if ok else repair, self.shard))
        return ok

    def to_json(self) -> list[dict]:
        return [asdict(f) for f in self.findings]


@dataclass
class _Part:
    """What one directory's checks need: its rows, documents, checksums, FAISS record."""

    directory: Path
    rows: int
    documents: int
    checksums: dict
    faiss: dict
    id_base: int = 0
    checksummed: bool = True
    quantizer: Any = None       # the index's shared IVF quantizer, or "damaged"


ATTEMPTS = 3        # verifications of an index that another command keeps replacing


def verify_index(path: str | Path, deep: bool = False, sample: int = 200, encoder=None,
                 progress: bool = False, seed: int = 0, model: str | None = None) -> VerifyReport:
    """Every check of the index at `path`, shard by shard; `deep` also re-embeds `sample`
    stored sentences.

    The files are read by path, so a generation swapped in meanwhile (a reindex, an add, a
    build --overwrite finishing) could mix two sound generations into findings of damage: a
    report with findings is kept only when the index is the same generation after it as
    before; otherwise the index is verified again (ATTEMPTS in all)."""
    sample = whole_number(sample, "sample", minimum=0)
    for _ in range(ATTEMPTS):
        before = _generation(path)
        report = _verify(path, deep, sample, encoder, progress, seed, model)
        if report.ok or _generation(path) == before:
            return report
    report = VerifyReport(str(path))
    report.add("generation", False, f"the index was replaced by a new generation while it was "
               f"verified, {ATTEMPTS} times (a reindex, an add or a build --overwrite running)",
               f"run tapt index verify {path} again once they have finished")
    return report


def _generation(path: str | Path) -> tuple[int, int, bytes] | None:
    """What changes when a new generation replaces the index: its folder (a swap) and its
    manifest's bytes."""
    try:
        st = os.stat(path)
        return st.st_dev, st.st_ino, read_regular(Path(path) / "manifest.json")
    except OSError:             # a FIFO or device is never opened for reading (it would block)
        return None


def _verify(path: str | Path, deep: bool, sample: int, encoder, progress: bool, seed: int,
            model: str | None) -> VerifyReport:
    """One verification: `verify_index`'s checks, once."""
    path = Path(path)
    report = VerifyReport(str(path))
    rebuild = REBUILD.format(path=path)
    try:
        manifest = read_index_manifest(path, SHARDED_VERSIONS + UPGRADABLE_VERSIONS)
        n, dim = int(manifest["counts"]["sentences"]), int(manifest["model"]["dim"])
        documents = int(manifest["counts"]["documents"])
    except TaptError as exc:
        report.add("manifest", False, str(exc), lost_manifest_hint(path))
        return report
    except (KeyError, TypeError, ValueError) as exc:
        report.add("manifest", False, f"lacks its counts or model ({exc})", rebuild)
        return report
    version = manifest["format_version"]
    report.add("manifest", True, f"format {version}, uuid {manifest['uuid']}, generation "
                                 f"{manifest.get('generation', 1)}")
    emb_dtype = manifest.get("files", {}).get("embeddings", {}).get("dtype", "float32")
    rng = np.random.default_rng(seed)
    rows = np.unique(np.concatenate([[0, max(n - 1, 0)], rng.integers(0, max(n, 1), sample)]))
    faiss_info = manifest.get("faiss") or {}
    texts: dict[int, str] = {}
    embedded: dict[int, np.ndarray] = {}
    if version not in SHARDED_VERSIONS:
        report.add("format", False, f"format {version}: " + (
            "one unsharded directory, without lexical ids" if version == 2 else
            "text records carry no checksums"), upgrade_hint(path, version))
        part = _Part(path, n, documents, manifest.get("checksums") or {}, faiss_info, 0,
                     version >= 2)
        _verify_part(report, path, part, dim, emb_dtype, rows, faiss_info, progress, texts,
                     embedded, 0)
    else:
        _verify_shards(report, path, manifest, n, documents, dim, emb_dtype, rows, progress,
                       texts, embedded)
    report.shard = None
    if deep and texts and len(embedded) == len(texts):
        ids = sorted(texts)
        _deep(report, manifest, encoder or model, {i: texts[i] for i in ids},
              np.stack([embedded[i] for i in ids]), rebuild)
    return report


def _verify_shards(report, path, manifest, n, documents, dim, emb_dtype, rows, progress, texts,
                   embedded) -> None:
    rebuild = REBUILD.format(path=path)
    entries = manifest.get("shards")
    problems = []
    if not isinstance(entries, list) or not entries:
        report.add("shards", False, "the manifest lists no shards", rebuild)
        return
    row_at = doc_at = 0
    for e in entries:
        try:
            if int(e["row_offset"]) != row_at or int(e["doc_offset"]) != doc_at:
                problems.append(f"shard {e['name']} starts at row {e['row_offset']}, document "
                                f"{e['doc_offset']}, not {row_at}, {doc_at}")
            row_at += int(e["rows"])
            doc_at += int(e["documents"])
        except (KeyError, TypeError, ValueError) as exc:
            problems.append(f"a shard without its offsets ({exc})")
            break
    if not problems and (row_at != n or doc_at != documents):
        problems.append(f"the shards hold {row_at:,} rows in {doc_at:,} documents, the counts "
                        f"say {n:,} in {documents:,}")
    report.add("shards", not problems, "; ".join(problems) or f"{len(entries)} shard(s), "
               "offsets contiguous", rebuild)
    if problems:
        return
    listed = {str(e.get("name")) for e in entries if isinstance(e, dict)}
    unlisted = sorted(p.name for p in (path / SHARDS).iterdir()
                      if p.is_dir() and p.name.isdigit() and p.name not in listed) \
        if (path / SHARDS).is_dir() else []
    if unlisted:        # `index add` refuses such an index: it neither reuses nor deletes them
        report.add("unlisted shards", False, f"{SHARDS}/ holds {', '.join(unlisted[:5])}, which "
                   "the manifest does not list (left by restoring an older copy over a newer "
                   "index, or copied there); the index answers without them, but an index add "
                   "whose new shard would take such a name is refused", f"move {', '.join(unlisted[:5])} out of "
                   f"{path / SHARDS}")
    recorded = manifest.get("checksums") or {}
    if (path / VOCAB).is_file() and (why := _unreadable(path / VOCAB)) is not None:
        report.add(f"access {VOCAB}", False, f"cannot be read ({why})",
                   _access_fix(path / VOCAB))
    elif (path / VOCAB).is_file():
        from tapt.util.files import sha256_file

        actual = sha256_file(path / VOCAB)
        report.add(f"checksum {VOCAB}", actual == recorded.get(VOCAB),
                   "matches" if actual == recorded.get(VOCAB) else "differs from the manifest",
                   rebuild)
    else:
        report.add(f"file {VOCAB}", False, "not a regular file" if os.path.lexists(path / VOCAB)
                   else "missing", rebuild)
    global_ids = (manifest.get("faiss") or {}).get("part_ids") == "global"
    quantizer = _quantizer(report, path, manifest, dim)
    for e in entries:
        name = str(e["name"])
        report.shard = name
        directory = path / SHARDS / name
        if (why := _unreadable(directory / "shard.json")) is not None \
                and (directory / "shard.json").is_file():
            report.add("access shard.json", False, f"cannot be read ({why})",
                       _access_fix(directory / "shard.json"))
            continue
        try:
            shard = read_shard_manifest(directory, path, e.get("shard_sha256"))
        except TaptError as exc:
            report.add("shard manifest", False, _what(exc), rebuild)
            continue
        report.add("shard manifest", True, f"rows {e['row_offset']:,}-"
                   f"{int(e['row_offset']) + int(e['rows']) - 1:,}")
        part = _Part(directory, int(e["rows"]), int(e["documents"]), shard.get("checksums") or {},
                     shard.get("faiss") or {}, int(e["row_offset"]) if global_ids else 0,
                     quantizer=quantizer)
        start = int(e["row_offset"])
        local = np.unique(np.concatenate([[0, max(part.rows - 1, 0)], rows[
            (rows >= start) & (rows < start + part.rows)] - start]))
        try:
            _verify_part(report, path, part, dim, emb_dtype, local,
                         manifest.get("faiss") or {}, progress, texts, embedded,
                         int(e["row_offset"]))
            _lexical(report, directory, part.rows, rebuild)
        except OSError as exc:      # a file or folder of the shard that cannot be read
            where = Path(exc.filename) if exc.filename else directory
            report.add("access", False, f"{where} cannot be read ({exc.strerror or exc})",
                       _access_fix(where))


def _unreadable(path: Path) -> str | None:
    """Why a regular file cannot be opened for reading (its permissions, most often), or
    None: such a file is reported as unreadable, not read (and not called damaged). Anything
    but a regular file is not opened (a FIFO would block) and is judged by its own check."""
    if not path.is_file():
        return None
    try:
        with open(path, "rb"):
            return None
    except OSError as exc:
        return exc.strerror or type(exc).__name__


def _access_fix(path: Path) -> str:
    return f"give this user read access to it (chmod u+r {path}), then run the command again"


def _verify_part(report, label, part: _Part, dim, emb_dtype, rows, faiss_info, progress, texts,
                 embedded, row_offset: int) -> None:
    """The checks of one directory of files (a shard, or an index of format 1 or 2)."""
    path = part.directory
    fix, rebuild = REPAIR.format(path=label), REBUILD.format(path=label)
    names = (EMBEDDINGS, TOKENS, DOCS, FAISS, LMDB_FILE)
    present = {name: (path / name).is_file() for name in names}
    for name in names:
        if not present[name]:
            what = "not a regular file" if os.path.lexists(path / name) else "missing"
            report.add(f"file {name}", False, what, fix if name == FAISS else rebuild)
        elif (why := _unreadable(path / name)) is not None:
            present[name] = False
            report.add(f"access {name}", False, f"cannot be read ({why})",
                       _access_fix(path / name))
    _checksums(report, path, {"checksums": part.checksums}, present, progress, fix, rebuild)
    n = part.rows
    rows = np.asarray(rows, dtype=np.int64)
    emb = (_embeddings(report, path, n, dim, rows, rebuild, emb_dtype) if present[EMBEDDINGS]
           else None)
    docs = (_offsets(report, path, n, part.documents, rebuild) if present[DOCS]
            and present[TOKENS] else None)
    if present[FAISS]:
        _faiss(report, path, {"faiss": {**faiss_info, "bytes": part.faiss.get("bytes",
                                                                              faiss_info.get(
                                                                                  "bytes"))}},
               n, dim, rows, emb, fix, part.id_base, part.quantizer)
    if present[LMDB_FILE]:
        found = _store(report, path, n, rows, docs, rebuild, checksummed=part.checksummed)
        if found and emb is not None:
            for sid, text in found.items():
                texts[row_offset + sid] = text
                embedded[row_offset + sid] = np.asarray(emb[sid], dtype=np.float32)


def _lexical(report, directory: Path, n: int, rebuild: str) -> None:
    from tapt.indexer.store.manifest import BIGRAMS, LEXICAL, LEXICAL_OFFSETS

    problems = []
    try:
        vocab = np.load(regular_file(directory / VOCAB), mmap_mode="r", allow_pickle=False)
        bigrams = np.load(regular_file(directory / BIGRAMS), mmap_mode="r", allow_pickle=False)
        lexical = np.load(regular_file(directory / LEXICAL), mmap_mode="r", allow_pickle=False)
        offsets = np.load(regular_file(directory / LEXICAL_OFFSETS), mmap_mode="r",
                          allow_pickle=False)
        if offsets.shape != (n + 1,) or offsets.dtype != np.int64 or offsets[-1] != len(lexical):
            problems.append(f"{LEXICAL_OFFSETS} holds {offsets.dtype} {offsets.shape}")
        elif len(bigrams) and (bigrams.min() < 0 or bigrams.max() >= len(vocab)):
            problems.append(f"{BIGRAMS} names words that do not exist")
        elif len(lexical) and (lexical.min() < 0 or lexical.max() >= len(bigrams)):
            problems.append(f"{LEXICAL} names bigrams that do not exist")
    except _READ_ERRORS as exc:
        problems.append(f"unreadable: {type(exc).__name__}: {str(exc)[:120]}")
    report.add("lexical", not problems, "; ".join(problems) or
               f"{len(vocab):,} words, {len(bigrams):,} bigram types", rebuild)


def _checksums(report, path, manifest, present, progress, fix, rebuild) -> None:
    recorded = manifest.get("checksums")
    if not recorded:
        report.add("checksums", True, "none recorded (index built before tapt recorded them)")
        return
    from tapt.util.files import sha256_file

    for name, expected in recorded.items():
        if name not in present and not (path / name).is_file():
            # a file the manifest records, which every reader needs: its absence is damage
            what = "not a regular file" if os.path.lexists(path / name) else "missing"
            report.add(f"file {name}", False, f"{what} (its checksum is recorded)",
                       fix if name == FAISS else rebuild)
            continue
        if not present.get(name, True):
            continue
        actual = sha256_file(path / name, progress)
        report.add(f"checksum {name}", actual == expected,
                   "matches" if actual == expected else
                   f"sha256 {actual[:12]}... but the manifest records {expected[:12]}...",
                   fix if name == FAISS else rebuild)


def _embeddings(report, path, n, dim, rows, rebuild, manifest_dtype: str = "float32"):
    try:
        emb = np.load(regular_file(path / EMBEDDINGS), mmap_mode="r", allow_pickle=False)
        integrity.check_npy(emb, path / EMBEDDINGS, EMBEDDINGS, path, manifest_dtype, (n, dim))
    except TaptError as exc:
        report.add("embeddings", False, _what(exc), rebuild)
        return None
    except _READ_ERRORS as exc:
        report.add("embeddings", False, f"unreadable: {exc}", rebuild)
        return None
    dtype = np.dtype(manifest_dtype)
    norms = np.linalg.norm(np.asarray(emb[rows], dtype=np.float64), axis=1)
    bad = int((~(np.abs(norms - 1) <= integrity.UNIT_SLACK.get(dtype, 1e-3))).sum())
    report.add("embeddings", bad == 0, f"{n:,} x {dim} {dtype}" + (
        "" if bad == 0 else f"; {bad} of {len(rows)} sampled rows are not unit length"), rebuild)
    return emb if bad == 0 else None


def _offsets(report, path, n, documents, rebuild):
    problems = []
    docs = None
    try:
        tokens = np.load(regular_file(path / TOKENS), mmap_mode="r", allow_pickle=False)
        integrity.check_npy(tokens, path / TOKENS, TOKENS, path, np.int32, (n,))
        integrity.check_tokens(tokens, path)
    except TaptError as exc:
        problems.append(_what(exc))
    except _READ_ERRORS as exc:
        problems.append(f"tokens.npy unreadable: {exc}")
    try:
        mapped = np.load(regular_file(path / DOCS), mmap_mode="r", allow_pickle=False)
        integrity.check_npy(mapped, path / DOCS, DOCS, path, np.int64, (documents + 1,))
        docs = np.array(mapped)
        integrity.check_offsets(docs, n, documents, path)
    except TaptError as exc:
        problems.append(_what(exc))
        docs = None
    except _READ_ERRORS as exc:
        problems.append(f"docs.npy unreadable: {exc}")
        docs = None
    report.add("offsets", not problems, "; ".join(problems) or f"{documents:,} documents",
               rebuild)
    return None if problems else docs


def _what(exc: TaptError) -> str:
    """The damage named by an IndexFormatError from `integrity`, without the advice."""
    return str(exc).split(" is damaged: ", 1)[-1].split("; run tapt index verify")[0]


def _quantizer(report, path: Path, manifest: dict, dim: int) -> Any:
    """The shared IVF quantizer of an index of format 4, checked (file, checksum, centroids,
    graph); None where the index stores none, "damaged" where it does not check (reported:
    `tapt index repair` trains it again and rebuilds every part)."""
    from tapt.indexer.ann.faiss_index import read_quantizer
    from tapt.util.files import sha256_file

    record = (manifest.get("faiss") or {}).get("quantizer")
    if not record:
        return None
    fix = REPAIR.format(path=path)
    target = path / QUANTIZER
    if not target.is_file():
        report.add(f"file {QUANTIZER}", False, "not a regular file"
                   if os.path.lexists(target) else "missing", fix)
        return "damaged"
    expected = (manifest.get("checksums") or {}).get(QUANTIZER)
    same = sha256_file(target) == expected
    report.add(f"checksum {QUANTIZER}", same, "matches" if same else "differs from the manifest",
               fix)
    if not same:
        return "damaged"
    try:
        quantizer = read_quantizer(target, int(record["lists"]), dim, path)
    except (TaptError, KeyError, TypeError, ValueError) as exc:
        report.add("quantizer", False, _what(exc) if isinstance(exc, TaptError)
                   else f"its record lacks {exc}", fix)
        return "damaged"
    report.add("quantizer", True, f"{quantizer.ntotal:,} coarse centroids "
                                  f"({record.get('kind', 'flat')}), shared by every part")
    return quantizer


def _faiss(report, path, manifest, n, dim, rows, emb, fix, id_base: int = 0,
           quantizer: Any = None) -> None:
    from tapt.indexer.ann.faiss_index import (
        read_faiss_index,
        search_setting,
        set_search_param,
        with_quantizer,
    )

    faiss_info = manifest.get("faiss", {})
    if isinstance(quantizer, str):
        report.add("faiss", False, f"cannot be searched: {QUANTIZER} is damaged", fix)
        return
    try:
        integrity.check_faiss_file((path / FAISS).stat().st_size, manifest, path)
        index = with_quantizer(read_faiss_index(path / FAISS), quantizer, path)
    except TaptError as exc:
        report.add("faiss", False, _what(exc), fix)
        return
    except (RuntimeError, MemoryError) as exc:
        report.add("faiss", False, f"unreadable: {str(exc).strip().splitlines()[-1][:200]}", fix)
        return
    try:
        integrity.check_faiss_index(index, n, dim, path, id_base)
    except TaptError as exc:
        report.add("faiss", False, _what(exc), fix)
        return
    import faiss

    detail = ""
    if emb is not None:
        exact_storage = isinstance(faiss.downcast_index(index),
                                   (faiss.IndexFlat, faiss.IndexHNSWFlat))
        try:
            if not exact_storage:
                raise RuntimeError("compressed codes: check by search")
            stored = np.vstack([index.reconstruct(int(i)) for i in rows])
            same = np.allclose(stored, emb[rows], atol=1e-3)
        except RuntimeError:
            # Each sampled row must find itself. An approximate index may miss a few rows
            # (quantised codes, near-duplicates), so >= SELF_SEARCH_MIN of them must.
            queries = np.ascontiguousarray(emb[rows], dtype=np.float32)
            if exact_storage:
                _, ids = index.search(queries, 1)
                same = bool((ids[:, 0] == rows).all())
            else:
                try:
                    kind, name, value = search_setting(faiss_info or {}, n, dim)
                except TaptError:
                    kind, name, value = "approximate", None, None
                if name is not None:
                    set_search_param(index, name, value)
                _, ids = index.search(queries, min(n, SELF_SEARCH_K))
                found = float((ids == rows[:, None] + id_base).any(axis=1).mean())
                same = found >= SELF_SEARCH_MIN
                detail = (f"; {found:.0%} of {len(rows)} sampled rows find themselves in their "
                          f"top {min(n, SELF_SEARCH_K)} ({kind}, needs >= {SELF_SEARCH_MIN:.0%})")
        if not same:
            report.add("faiss", False, "its rows differ from the stored embeddings" + detail, fix)
            return
    report.add("faiss", True, f"{index.ntotal:,} rows agree with the embeddings" + detail)


def _store(report, path, n, rows, docs, rebuild, checksummed: bool = True
           ) -> dict[int, str] | None:
    """Every record's checksum (a full pass), the record count, and for the sampled rows the
    agreement of each record's document and position with the offsets."""
    import lmdb

    from tapt.indexer.store.text_store import DamagedRecord, decode_record, key, reader_env

    try:
        env = reader_env(path / STORE, path)  # checks the length before anything is mapped
    except (lmdb.Error, TaptError) as exc:
        report.add("text store", False, _what(exc) if isinstance(exc, TaptError) else
                   f"unreadable: {exc}", rebuild)
        return None
    texts: dict[int, str] = {}
    problems = []
    wanted = set(rows.tolist())
    damaged_ids: list[int] = []
    try:
        entries = int(env.stat()["entries"])
        if entries != n:
            problems.append(f"{entries:,} records, {n:,} sentences")
        with env.begin(buffers=True) as txn:
            for sid in range(n):
                raw = txn.get(key(sid))
                if raw is None:
                    if len(problems) < 3:
                        problems.append(f"sentence {sid} is missing")
                    continue
                try:
                    rec = decode_record(sid, bytes(raw), checksummed)
                    doc, pos = int(rec["doc"]), int(rec["pos"])
                except (DamagedRecord, KeyError, TypeError, ValueError):
                    damaged_ids.append(sid)
                    continue
                if sid not in wanted:
                    continue
                texts[sid] = rec["text"]
                if docs is not None:
                    d = int(np.searchsorted(docs, sid, side="right")) - 1
                    if d != doc or sid - int(docs[d]) != pos:
                        problems.append(f"record {sid} says document {doc} position {pos}, the "
                                        f"offsets say {d} position {sid - int(docs[d])}")
    except lmdb.Error as exc:
        problems.append(f"unreadable: {exc}")
    if damaged_ids:
        problems.insert(0, f"{len(damaged_ids):,} damaged record(s) (first: "
                           f"{', '.join(map(str, damaged_ids[:5]))})")
    report.add("text store", not problems, "; ".join(problems[:3]) or f"{n:,} records, every "
               f"checksum holds; {len(rows)} sampled records agree with the offsets", rebuild)
    return None if problems else texts


def _deep(report, manifest, encoder, texts, emb, rebuild) -> None:
    from tapt.indexer.encoding.encoder import model_differences

    recorded = manifest["model"]
    if encoder is None or isinstance(encoder, str):
        from tapt.indexer.encoding.encoder import load_encoder

        # Re-embed with the build's own backend: an int8 build differs from torch by design.
        encoder = load_encoder(encoder or recorded.get("source") or recorded["name"],
                               device="cpu", backend=manifest.get("build", {}).get("backend", "torch"))
    diffs = model_differences(recorded, encoder)
    if diffs:
        report.add("deep: re-embedded sample", False, f"model {encoder.name} is not the one the "
                   f"index was built with ({recorded['name']}): {'; '.join(diffs)}",
                   "pass `model` with its directory")
        return
    ids = sorted(texts)
    fresh = encoder.encode([texts[i] for i in ids])
    cos = np.sum(fresh * np.asarray(emb, dtype=np.float32), axis=1)  # emb: the rows of `ids`
    worst = float(cos.min())
    # Dynamic int8 scales activations per batch, so a sentence re-embedded beside other
    # neighbours differs from its stored row by up to ~0.02 in cosine; fp32/fp16 agree to ~1e-4.
    floor = 0.95 if manifest.get("build", {}).get("backend") == "onnx-int8" else 0.99
    report.add("deep: re-embedded sample", worst >= floor,
               f"{len(ids)} sentences, lowest cosine to the stored rows {worst:.4f}", rebuild)
