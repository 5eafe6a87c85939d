"""`tapt index verify`: check an index file by file, and say how to repair what is wrong.

Reads the files directly (not through `Index`, which refuses a damaged index) so that every
problem is named, not only the first; every read is guarded first (file lengths before LMDB maps
a page, FAISS ids before a search), so a damaged index is diagnosed, never a crash. Repairs:
`tapt index repair` rebuilds the FAISS index from the stored embeddings; damaged embeddings, text
or offsets need a rebuild from the corpus; an index of format 1 needs `tapt index upgrade`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from tapt.errors import TaptError

from . import integrity
from .manifest import (DOCS, EMBEDDINGS, FAISS, INDEX_FORMAT_VERSION, LMDB_DATA, STORE, TOKENS,
                       UPGRADABLE_VERSIONS, read_index_manifest, upgrade_hint)

REPAIR = "run tapt index repair {path} (rebuilds the FAISS index from the stored embeddings)"
REBUILD = "rebuild the index from its corpus (tapt index build ... --out {path} --overwrite)"
LMDB_FILE = LMDB_DATA
SELF_SEARCH_K = 10
SELF_SEARCH_MIN = 0.9
# numpy's .npy header parser raises many kinds (ValueError, SyntaxError, tokenize.TokenError...)
_READ_ERRORS = (Exception,)


@dataclass
class Finding:
    check: str
    ok: bool
    detail: str
    repair: str = ""


@dataclass
class VerifyReport:
    path: str
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.findings)

    def add(self, check: str, ok: bool, detail: str, repair: str = "") -> bool:
        self.findings.append(Finding(check, ok, detail, "" if ok else repair))
        return ok

    def to_json(self) -> list[dict]:
        return [asdict(f) for f in self.findings]


def verify_index(path: str | Path, deep: bool = False, sample: int = 200, encoder=None,
                 progress: bool = False, seed: int = 0, model: str | None = None) -> VerifyReport:
    """Every check of the index at `path`; `deep` also re-embeds `sample` stored sentences."""
    path = Path(path)
    report = VerifyReport(str(path))
    fix, rebuild = REPAIR.format(path=path), REBUILD.format(path=path)
    try:
        manifest = read_index_manifest(path, (INDEX_FORMAT_VERSION,) + UPGRADABLE_VERSIONS)
        n, dim = int(manifest["counts"]["sentences"]), int(manifest["model"]["dim"])
        documents = int(manifest["counts"]["documents"])
    except TaptError as exc:
        report.add("manifest", False, str(exc), rebuild)
        return report
    except (KeyError, TypeError, ValueError) as exc:
        report.add("manifest", False, f"lacks its counts or model ({exc})", rebuild)
        return report
    version = manifest["format_version"]
    report.add("manifest", True, f"format {version}, uuid {manifest['uuid']}, generation "
                                 f"{manifest.get('generation', 1)}")
    if version != INDEX_FORMAT_VERSION:
        report.add("format", False, f"format {version}: text records carry no checksums",
                   upgrade_hint(path))
    names = (EMBEDDINGS, TOKENS, DOCS, FAISS, LMDB_FILE)
    present = {name: (path / name).is_file() for name in names}
    for name in names:
        if not present[name]:
            report.add(f"file {name}", False, "missing", fix if name == FAISS else rebuild)
    _checksums(report, path, manifest, present, progress, fix, rebuild)
    rng = np.random.default_rng(seed)
    rows = np.unique(np.concatenate([[0, max(n - 1, 0)], rng.integers(0, max(n, 1), sample)]))
    emb_dtype = manifest.get("files", {}).get("embeddings", {}).get("dtype", "float32")
    emb = (_embeddings(report, path, n, dim, rows, rebuild, emb_dtype) if present[EMBEDDINGS]
           else None)
    docs = (_offsets(report, path, n, documents, rebuild) if present[DOCS] and present[TOKENS]
            else None)
    if present[FAISS]:
        _faiss(report, path, manifest, n, dim, rows, emb, fix)
    if present[LMDB_FILE]:
        texts = _store(report, path, n, rows, docs, rebuild, checksummed=version >= 2)
        if deep and texts and emb is not None:
            _deep(report, manifest, encoder or model, texts, emb, rebuild)
    return report


def _checksums(report, path, manifest, present, progress, fix, rebuild) -> None:
    recorded = manifest.get("checksums")
    if not recorded:
        report.add("checksums", True, "none recorded (index built before tapt recorded them)")
        return
    from tapt.util.files import sha256_file

    for name, expected in recorded.items():
        if not present.get(name, (path / name).is_file()):
            continue
        actual = sha256_file(path / name, progress)
        report.add(f"checksum {name}", actual == expected,
                   "matches" if actual == expected else
                   f"sha256 {actual[:12]}... but the manifest records {expected[:12]}...",
                   fix if name == FAISS else rebuild)


def _embeddings(report, path, n, dim, rows, rebuild, manifest_dtype: str = "float32"):
    try:
        emb = np.load(path / EMBEDDINGS, mmap_mode="r", allow_pickle=False)
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
        tokens = np.load(path / TOKENS, mmap_mode="r", allow_pickle=False)
        integrity.check_npy(tokens, path / TOKENS, TOKENS, path, np.int32, (n,))
        integrity.check_tokens(tokens, path)
    except TaptError as exc:
        problems.append(_what(exc))
    except _READ_ERRORS as exc:
        problems.append(f"tokens.npy unreadable: {exc}")
    try:
        mapped = np.load(path / DOCS, mmap_mode="r", allow_pickle=False)
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


def _faiss(report, path, manifest, n, dim, rows, emb, fix) -> None:
    from .faiss_index import read_faiss_index, search_setting, set_search_param

    faiss_info = manifest.get("faiss", {})
    try:
        integrity.check_faiss_file((path / FAISS).stat().st_size, manifest, path)
        index = read_faiss_index(path / FAISS)
    except TaptError as exc:
        report.add("faiss", False, _what(exc), fix)
        return
    except (RuntimeError, MemoryError) as exc:
        report.add("faiss", False, f"unreadable: {str(exc).strip().splitlines()[-1][:200]}", fix)
        return
    try:
        integrity.check_faiss_index(index, n, dim, path)
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
                found = float((ids == rows[:, None]).any(axis=1).mean())
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

    from .store import DamagedRecord, decode_record, key, reader_env

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
    from .encoder import model_differences

    recorded = manifest["model"]
    if encoder is None or isinstance(encoder, str):
        from .encoder import load_encoder

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
    cos = np.sum(fresh * np.asarray(emb[ids], dtype=np.float32), axis=1)
    worst = float(cos.min())
    # Dynamic int8 scales activations per batch, so a sentence re-embedded beside other
    # neighbours differs from its stored row by up to ~0.02 in cosine; fp32/fp16 agree to ~1e-4.
    floor = 0.95 if manifest.get("build", {}).get("backend") == "onnx-int8" else 0.99
    report.add("deep: re-embedded sample", worst >= floor,
               f"{len(ids)} sentences, lowest cosine to the stored rows {worst:.4f}", rebuild)
