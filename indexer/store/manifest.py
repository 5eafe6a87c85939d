"""The index layout: its file names, and its manifests, each sealed by a checksum of its own
content.

Format versions:
    1  one directory; text records stored as plain JSON; no manifest seal
    2  one directory; every text record carries a CRC32 of its id and bytes; the manifest carries
       `self_sha256`, a SHA-256 of its own canonical JSON; the model block records the model's
       full fingerprint; `same_content_as` lists the manifests of the same rows and text
       (before a reindex, repair or upgrade)
    3  sharded: `shards/NNNNNN/` directories, each a group of whole input files with its own
       text store, offsets, token counts, embeddings, FAISS part and lexical ids, sealed by its
       `shard.json`; the top `manifest.json` (written last) lists the shards with their row,
       document and segment offsets and the SHA-256 of each `shard.json`. Global row id = the
       shard's row offset + its local row. Formats 1 and 2 are read only by `tapt index upgrade`
       (and `verify` / `info`, to say so).
    4  format 3 with the IVF coarse quantizer stored once, in `quantizer.faiss` at the top (the
       manifest's `faiss.quantizer` records it), and every shard's IVF part written without
       one: a tapt that reads only format 3 would search such parts without their quantizer,
       so it is refused there. Indexes without an IVF quantizer of their own are still
       written as format 3; format 3 indexes are read as they are (a quantizer in every part).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, Iterable

from tapt.errors import IndexFormatError
from tapt.indexer.store.text_store import damaged
from tapt.util.files import read_regular, write_json_atomic
from tapt.util.manifests import read_versioned_json

INDEX_FORMAT = "tapt-index"
INDEX_FORMAT_VERSION = 4
SHARDED_VERSIONS = (3, 4)     # read as they are; 1 and 2 through `tapt index upgrade`
UPGRADABLE_VERSIONS = (1, 2)
MANIFEST_NAME = "manifest.json"
SEAL = "self_sha256"
SHARD_FORMAT = "tapt-index-shard"
SHARD_MANIFEST = "shard.json"
SHARDS = "shards"
VOCAB = "vocab.npy"            # top: sorted unique word hashes of the whole corpus; shard: local ids
LEXICAL = "lexical.npy"        # per predicted token of every sentence: its bigram type id
LEXICAL_OFFSETS = "lexical_offsets.npy"
BIGRAMS = "bigrams.npy"        # per bigram type: (history, word) local word ids
DOC_HASHES = "dochash.npy"     # per document: 16 bytes of SHA-256 of its normalised sentences
CODES = "codes.npy"            # optional: int8 scalar-quantised embeddings for `scan="codes"`

EMBEDDINGS = "embeddings.npy"
TOKENS = "tokens.npy"
DOCS = "docs.npy"
STORE = "text.lmdb"
FAISS = "index.faiss"
QUANTIZER = "quantizer.faiss"  # format 4: the IVF coarse quantizer every shard's part shares
LMDB_DATA = f"{STORE}/data.mdb"
# Everything tapt writes into an index directory: formats 1 and 2 at the top; format 3 at the top
# (manifest, vocabulary, shards/, and while a build runs its plan and stage records) and in each
# shard directory.
INDEX_ENTRIES = frozenset({MANIFEST_NAME, EMBEDDINGS, TOKENS, DOCS, STORE, FAISS, "progress.json",
                           SHARDS, VOCAB, QUANTIZER, "plan.json", "faiss.trained", "train.json",
                           "codes.json"})
SHARD_ENTRIES = frozenset({SHARD_MANIFEST, EMBEDDINGS, TOKENS, DOCS, STORE, FAISS, LEXICAL,
                           LEXICAL_OFFSETS, BIGRAMS, VOCAB, DOC_HASHES, CODES, "prepared.json",
                           "embedded.json", "parts"})
STORE_ENTRIES = frozenset({"data.mdb", "lock.mdb"})
# a killed write's temporary file or folder
_LEFTOVER = re.compile(r"^\..+\.(tmp|repair|preparing|indexing|buckets)-\d+$")
_SHARD_NAME = re.compile(r"^\d{6}$")
_PART_NAME = re.compile(r"^(emb|tok|part)-\d{6}\.(npy|json)$")


def is_leftover(name: str) -> bool:
    """Whether `name` is a temporary file or folder a killed write of tapt's left behind."""
    return bool(_LEFTOVER.match(name))


def shard_name(number: int) -> str:
    """The directory name of shard `number` (`000003`)."""
    return f"{int(number):06d}"


def shard_dir(index_dir: Path, name: str) -> Path:
    return Path(index_dir) / SHARDS / name


def written_version(faiss_info: dict[str, Any]) -> int:
    """The format version an index manifest with this `faiss` section is written as: 4 where
    the index stores its IVF quantizer once (`faiss.quantizer`), else 3 (readable by every
    tapt that reads sharded indexes)."""
    return INDEX_FORMAT_VERSION if (faiss_info or {}).get("quantizer") else 3


def upgrade_hint(index_dir: Path, version: int = 1) -> str:
    what = ("moves its files into one shard by hard links and stores lexical ids"
            if version == 2 else "rewrites its text store with checksums, then shards it")
    return f"run tapt index upgrade {index_dir} ({what}; no re-embedding)"


def _canonical(manifest: dict[str, Any]) -> bytes:
    body = {k: v for k, v in manifest.items() if k != SEAL}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def seal(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest with `self_sha256` set to the SHA-256 of the rest of it."""
    return {**{k: v for k, v in manifest.items() if k != SEAL},
            SEAL: hashlib.sha256(_canonical(manifest)).hexdigest()}


def write_index_manifest(index_dir: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """Seal `manifest` and write it atomically into `index_dir`; returns what was written."""
    sealed = seal(manifest)
    write_json_atomic(Path(index_dir) / MANIFEST_NAME, sealed)
    return sealed


def lost_manifest_hint(index_dir: str | Path) -> str:
    """What to run for an index whose manifest is lost or unreadable (what `tapt index verify`
    recommends too). Not `--overwrite` of the same folder: a folder whose manifest cannot be
    read cannot be told from a user's, so tapt never replaces it."""
    return (f"restore {Path(index_dir) / MANIFEST_NAME} from a backup, or rebuild the index from "
            "its corpus into a new folder (tapt index build ... --out NEW_FOLDER)")


def read_index_manifest(index_dir: Path, versions: tuple[int, ...] = SHARDED_VERSIONS,
                        label: Path | None = None, rebuild_hint: bool = False) -> dict[str, Any]:
    """Load and check an index manifest; clear errors for a missing, foreign, older, newer or
    damaged one.

    Args:
        index_dir: The index directory (or a /proc/self/fd path to it).
        versions: The format versions the caller reads (verify and upgrade also read 1).
        label: How to name the index in messages (default: `index_dir`).
        rebuild_hint: End the error for a manifest that is not JSON, or not a tapt index's,
            with what to run (opening an index; `verify` names the fix in its own column).

    Returns:
        The manifest.
    """
    label = label or index_dir
    if not index_dir.exists():
        raise IndexFormatError(f"index {label} does not exist")
    if not index_dir.is_dir():
        raise IndexFormatError(f"index {label} is not a directory")
    if not os.path.lexists(index_dir / MANIFEST_NAME):
        raise IndexFormatError(f"{label} is not a tapt index (no {MANIFEST_NAME})")
    manifest = read_versioned_json(index_dir / MANIFEST_NAME, INDEX_FORMAT,
                                   tuple(versions) + UPGRADABLE_VERSIONS, f"index {label}",
                                   IndexFormatError, rebuild="rebuild it with this tapt",
                                   lost=lost_manifest_hint(label) if rebuild_hint else "",
                                   shown=Path(label) / MANIFEST_NAME)
    version = manifest["format_version"]
    if version not in versions:
        what = ("an unsharded index" if version == 2 else
                "without checksums on its text records")
        raise IndexFormatError(f"index {label} has format version {version}, {what}: "
                               f"{upgrade_hint(label, version)}")
    if version >= 2 and manifest.get(SEAL) != seal(manifest)[SEAL]:
        raise IndexFormatError(f"index {label} is damaged: {MANIFEST_NAME} does not match its own "
                               f"checksum (edited or corrupted); run tapt index verify {label}")
    return manifest


def read_shard_manifest(directory: Path, label: str | Path, expected_sha256: str | None = None
                        ) -> dict[str, Any]:
    """A shard's `shard.json`, checked against its seal and (when given) the SHA-256 the top
    manifest records for it."""
    path = Path(directory) / SHARD_MANIFEST
    try:
        raw = read_regular(path)
    except FileNotFoundError:
        raise IndexFormatError(f"index {label} is incomplete: {path.parent.name}/{SHARD_MANIFEST} "
                               f"is missing; run tapt index verify {label}") from None
    except OSError as exc:
        raise damaged(label, f"{path.parent.name}/{SHARD_MANIFEST} cannot be read "
                             f"({exc.strerror or exc})", exc) from exc
    if expected_sha256 is not None and hashlib.sha256(raw).hexdigest() != expected_sha256:
        raise IndexFormatError(f"index {label} is damaged: shard {path.parent.name}/{SHARD_MANIFEST} "
                               "does not match the checksum in manifest.json; run tapt index "
                               f"verify {label}")
    try:
        manifest = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise IndexFormatError(f"index {label} is damaged: {path.parent.name}/{SHARD_MANIFEST} is "
                               f"not JSON; run tapt index verify {label}") from exc
    if (not isinstance(manifest, dict) or manifest.get("format") != SHARD_FORMAT
            or manifest.get(SEAL) != seal(manifest)[SEAL]):
        raise IndexFormatError(f"index {label} is damaged: {path.parent.name}/{SHARD_MANIFEST} "
                               f"does not match its own checksum; run tapt index verify {label}")
    return manifest


def write_shard_manifest(directory: Path, manifest: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """Seal and write a shard's `shard.json`; returns it and the SHA-256 of its bytes (what the
    top manifest records)."""
    sealed = seal({**manifest, "format": SHARD_FORMAT, "format_version": INDEX_FORMAT_VERSION})
    write_json_atomic(Path(directory) / SHARD_MANIFEST, sealed)
    return sealed, hashlib.sha256((Path(directory) / SHARD_MANIFEST).read_bytes()).hexdigest()


def listed_shards(manifest: dict[str, Any]) -> list[str]:
    """The shard names an index manifest lists (none for formats 1 and 2)."""
    entries = manifest.get("shards") if isinstance(manifest, dict) else None
    return [str(e.get("name")) for e in entries or [] if isinstance(e, dict)]


def foreign_entries(index_dir: Path, listed: Iterable[str] | None = None) -> list[str]:
    """Entries of an index directory that tapt did not write there (never deleted by tapt), as
    paths relative to it (`notes.txt`, `.git`, `shards/000001/README`).

    Args:
        index_dir: An index directory, or a build's work directory.
        listed: The shard names the index's manifest lists: a shard directory not among them
            (left behind by a restored backup, or copied) belongs to no generation of this
            index and is foreign too. None: every shard directory counts (a work directory).

    Returns:
        The foreign entries, sorted; a foreign directory is named, not its content.
    """
    index_dir = Path(index_dir)
    listed = None if listed is None else set(listed)
    out = []
    for item in sorted(index_dir.iterdir()):
        if _LEFTOVER.match(item.name):
            continue
        if item.name == STORE and _real_dir(item):
            out += [f"{STORE}/{s.name}" for s in sorted(item.iterdir())
                    if s.name not in STORE_ENTRIES]
        elif item.name == SHARDS and _real_dir(item):
            out += [f"{SHARDS}/{e}" for e in _foreign_in_shards(item, listed)]
        elif item.name not in INDEX_ENTRIES or item.name in (STORE, SHARDS) or (
                item.is_symlink()):
            out.append(item.name)
    return out


def index_foreign_entries(index_dir: Path) -> list[str]:
    """`foreign_entries` of an index directory, against the shards its manifest lists."""
    try:
        manifest = json.loads(read_regular(Path(index_dir) / MANIFEST_NAME))
    except (OSError, ValueError):
        manifest = {}
    return foreign_entries(index_dir, listed_shards(manifest))


def _real_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def _foreign_in_shards(shards: Path, listed: set[str] | None) -> list[str]:
    out = []
    for shard in sorted(shards.iterdir()):
        if _LEFTOVER.match(shard.name):
            continue
        if not (_SHARD_NAME.match(shard.name) and _real_dir(shard)) or (
                listed is not None and shard.name not in listed):
            out.append(shard.name)
            continue
        for item in sorted(shard.iterdir()):
            if _LEFTOVER.match(item.name):
                continue
            if item.name == STORE and _real_dir(item):
                out += [f"{shard.name}/{STORE}/{s.name}" for s in sorted(item.iterdir())
                        if s.name not in STORE_ENTRIES or s.is_symlink()]
            elif item.name == "parts" and _real_dir(item):
                out += [f"{shard.name}/parts/{p.name}" for p in sorted(item.iterdir())
                        if not (_PART_NAME.match(p.name) or _LEFTOVER.match(p.name))
                        or p.is_symlink()]
            elif item.name not in SHARD_ENTRIES or item.name in (STORE, "parts") or (
                    item.is_symlink()):
                out.append(f"{shard.name}/{item.name}")
    return out
