"""The selection file format (version 2): JSONL of selected segments plus `<SEL>.manifest.json`.

Each line is one segment, in rank order:
    {"id": 12, "rank": 0, "score": 0.71, "weight": 1.0, "method": "centroid", "doc": 3,
     "rows": [180, 195], "text": "...", "sentences": ["...", "..."],
     "doc_key": "medical:3", "source": "pool.jsonl.gz", "meta": {"domain": "medical"},
     "sentence_meta": [{"pos": 0}, {"pos": 1}, ...]}
`id` is the segment id for the selection's segment size, `rows` the half-open range of sentence ids
(FAISS row == LMDB key == embedding row) it covers, `doc` the document index; two segments are
adjacent in the corpus exactly when they share `doc` and one's `rows[1]` equals the other's
`rows[0]`. `weight` is 1.0 for discrete selections and lambda in (0, 1) for continuous ones.
`doc_key` is the corpus's own document key, `source` the input file, `meta` the input records'
other fields that every sentence of the segment shares; `sentence_meta` (only present when they
differ) holds each sentence's remaining fields; `explain` (only in a selection made with
`explain`) says why it was picked: {"parts": {scorer: mean part of its score}, "own": their
sum, "document": the pooled score at document context, "nearest": [{"sentence", "cosine"}]}.
Version 1 files (without `doc_key`, `source`, `meta` and `sentence_meta`) are read too. This
module imports neither faiss nor torch, so the trainer can read selections cheaply.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from tapt.errors import InputError
from tapt.util.files import atomic_write, hash_stream, parents_of, sha256_file, write_json_atomic
from tapt.util.manifests import read_versioned_json

SELECTION_FORMAT = "tapt-selection"
SELECTION_FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)


@dataclass(frozen=True)
class SelectedSegment:
    """One selected segment: one line of a selection file.

    Attributes:
        id: The segment id at the selection's segment size.
        rank: Position in the selection, 0 = best.
        score: The method's score; higher is more task-like for every method.
        weight: 1.0, or TADPOLE's lambda in (0, 1) for a continuous selection.
        method: The method that selected it.
        doc: The index's document number.
        rows: The half-open range of sentence rows (FAISS row = text-store key) it covers.
        text: Its sentences joined by spaces.
        sentences: Its sentences.
        doc_key: The corpus's own document key (None in version 1 files).
        source: The input file it came from (None in version 1 files).
        meta: The corpus fields that all of its sentences share.
        sentence_meta: Each sentence's remaining fields, where they differ (else None).
        explain: Why it was picked, where the selection was asked to explain
            (`selections.explain`: each scorer's part of its score, `own` and `document`
            scores, its nearest task sentences); None otherwise.
    """

    id: int
    rank: int
    score: float
    weight: float
    method: str
    doc: int
    rows: tuple[int, int]
    text: str
    sentences: list[str]
    doc_key: str | None = None
    source: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    sentence_meta: list[dict[str, Any]] | None = None
    explain: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The line's fields (score rounded to 6 decimals and weight to 6 significant digits,
        as written: a small lambda stays positive)."""
        out = {
            "id": self.id,
            "rank": self.rank,
            "score": round(float(self.score), 6),
            "weight": float(f"{float(self.weight):.6g}"),
            "method": self.method,
            "doc": self.doc,
            "rows": list(self.rows),
            "text": self.text,
            "sentences": self.sentences,
            "doc_key": self.doc_key,
            "source": self.source,
            "meta": self.meta,
        }
        if self.sentence_meta is not None:
            out["sentence_meta"] = self.sentence_meta
        if self.explain is not None:
            out["explain"] = self.explain
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> "SelectedSegment":
        """A segment from a parsed line (version 1 or 2)."""
        meta = obj.get("meta") or {}
        sentence_meta, explain = obj.get("sentence_meta"), obj.get("explain")
        if not isinstance(meta, dict) or not (sentence_meta is None
                                              or isinstance(sentence_meta, list)):
            raise TypeError("meta must be an object and sentence_meta a list")
        if not (explain is None or isinstance(explain, dict)):
            raise TypeError("explain must be an object")
        return cls(
            id=int(obj["id"]),
            rank=int(obj["rank"]),
            score=float(obj["score"]),
            weight=float(obj["weight"]),
            method=str(obj["method"]),
            doc=int(obj["doc"]),
            rows=(int(obj["rows"][0]), int(obj["rows"][1])),
            text=str(obj["text"]),
            sentences=[str(s) for s in obj["sentences"]],
            doc_key=None if obj.get("doc_key") is None else str(obj["doc_key"]),
            source=None if obj.get("source") is None else str(obj["source"]),
            meta=meta,
            sentence_meta=sentence_meta,
            explain=explain,
        )


def manifest_path(selection: str | Path) -> Path:
    """`SEL.jsonl` -> `SEL.jsonl.manifest.json` (the manifest always sits beside the file)."""
    selection = Path(selection)
    return selection.with_name(selection.name + ".manifest.json")


def write_selection(
    path: str | Path, segments: list[SelectedSegment], manifest: dict[str, Any]
) -> None:
    """Write the JSONL and then its manifest, each atomically (temporary name, fsync, rename).

    The manifest records the JSONL's hash, so a reader that catches the JSONL replaced but not
    yet its manifest refuses the pair instead of mixing two selections.
    """
    path = Path(path)
    digest = hashlib.sha256()
    with parents_of(path), atomic_write(path, "wb") as fh:
        for seg in segments:
            line = (seg.to_json() + "\n").encode("utf-8")
            digest.update(line)
            fh.write(line)
    manifest = {**manifest, "format": SELECTION_FORMAT, "format_version": SELECTION_FORMAT_VERSION,
                "selection_sha256": digest.hexdigest()}
    write_json_atomic(manifest_path(path), manifest)


def read_manifest(path: str | Path) -> dict[str, Any]:
    """The selection's manifest; refuses a missing one or one of another format version, and
    says what the file is when it is no selection at all (an export, a folder)."""
    if Path(path).is_dir():
        raise InputError(f"{path} is a folder (a Hugging Face export?), not a selection file: "
                         f"give the selection file tapt select wrote ({_WHAT_A_SELECTION_IS})")
    if not Path(path).is_file():
        raise InputError(f"selection file {path} does not exist")
    beside = manifest_path(path)
    if not beside.exists() and not beside.is_symlink():
        kind = _not_a_selection(path)
        if kind:
            raise InputError(f"{path} is {kind}, not a selection file: give the selection file "
                             f"tapt select wrote ({_WHAT_A_SELECTION_IS})")
        raise InputError(f"selection {path} has no manifest ({beside.name} is missing): a "
                         "selection written to standard output (--out -) has none; write it "
                         "with --out FILE to export or train on it")
    return read_versioned_json(beside, SELECTION_FORMAT, READABLE_VERSIONS,
                               f"selection {path}", InputError)


_WHAT_A_SELECTION_IS = "JSON Lines, with FILE.manifest.json beside it"


def _not_a_selection(path: str | Path) -> str | None:
    """What a file without a selection manifest is when its first bytes show it is no
    selection (a Parquet or Arrow export, text lines, JSON lines of an export); None when it
    may be a selection whose manifest is missing."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(1 << 16)
    except OSError:
        return None
    if head.startswith(b"PAR1"):
        return "a Parquet file (an export of a selection?)"
    if head.startswith((b"ARROW1", b"\xff\xff\xff\xff")):
        return "an Arrow file (an export of a selection?)"
    first = head.split(b"\n", 1)[0].strip()
    if not first:
        return None
    try:
        record = json.loads(first)
    except (ValueError, UnicodeDecodeError):
        return "not JSON Lines (a text export of a selection?)"
    if not isinstance(record, dict) or not {"id", "rows", "text"} <= set(record):
        return "JSON Lines that are not selection lines (an export of a selection?)"
    return None


def is_selection(path: str | Path) -> bool:
    """True when `path` is a file with a tapt selection manifest beside it (any version)."""
    return Path(path).is_file() and is_selection_manifest(manifest_path(path))


def is_unchanged_selection(path: str | Path) -> bool:
    """True when `path` is a tapt selection whose bytes are still the ones its manifest
    recorded: what tapt may replace as its own (an edited selection is the user's)."""
    try:
        check_unchanged(path, read_manifest(path))
    except (InputError, OSError):
        return False
    return True


def is_selection_manifest(path: str | Path) -> bool:
    """True when `path` is a file holding a tapt selection manifest (any version)."""
    if not Path(path).is_file():
        return False
    try:
        read_versioned_json(path, SELECTION_FORMAT, READABLE_VERSIONS, str(path), InputError)
    except InputError:
        return False
    return True


def iter_selection(path: str | Path) -> Iterator[SelectedSegment]:
    """Stream the segments of a selection file, checking every line (not its manifest's
    checksum: `checked_selection` reads the bytes it checked)."""
    with open(path, "rb") as fh:
        yield from _segments(path, fh)


def _segments(path: str | Path, fh: Any) -> Iterator[SelectedSegment]:
    for lineno, line in enumerate(fh, 1):
        if not line.strip():
            continue
        try:
            segment = SelectedSegment.from_dict(json.loads(line))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, IndexError) as exc:
            raise InputError(f"{path}:{lineno}: not a tapt selection line ({exc})") from exc
        yield segment


@contextlib.contextmanager
def checked_selection(path: str | Path
                      ) -> Iterator[tuple[dict[str, Any], Iterator[SelectedSegment]]]:
    """The selection's manifest and its segments, read from the very bytes whose SHA-256 was
    checked against the manifest: the file is opened once, hashed and read through that one
    descriptor, so a selection written over the path meanwhile (`select --out` again) can never
    lend its rows to the other one's manifest. A pair that does not match is read again once, a
    moment later (a concurrent write renames the file, then its manifest).

    Args:
        path: The selection file.

    Yields:
        (manifest, segments): the segments as an iterator over the checked bytes.

    Raises:
        InputError: no manifest, another format, or bytes that are not the manifest's.
    """
    for attempt in range(2):
        manifest = read_manifest(path)
        with open(path, "rb") as fh:
            expected = manifest.get("selection_sha256")
            digest = hashlib.sha256()
            hash_stream(fh, digest)
            if expected and digest.hexdigest() != expected:
                if attempt == 0:      # perhaps between a concurrent write's two renames
                    time.sleep(0.2)
                    continue
                raise InputError(f"selection {path} does not match its manifest (edited or "
                                 "truncated after it was written); select again, or restore "
                                 "the file")
            fh.seek(0)
            yield manifest, _segments(path, fh)
            return



def check_unchanged(path: str | Path, manifest: dict[str, Any]) -> None:
    """Refuse a selection file whose SHA-256 is not the one its manifest recorded.

    Raises:
        InputError: the file was edited or truncated after it was written.
    """
    expected = manifest.get("selection_sha256")
    if expected and sha256_file(path) != expected:
        raise InputError(
            f"selection {path} does not match its manifest (edited or truncated after it was "
            "written); select again, or restore the file"
        )


def read_selection(path: str | Path) -> tuple[dict[str, Any], list[SelectedSegment]]:
    """Manifest and all segments, read from the bytes whose hash matched the manifest's
    (`checked_selection`)."""
    with checked_selection(path) as (manifest, segments):
        return manifest, list(segments)
