"""The selection file format (version 1): JSONL of selected segments plus `<SEL>.manifest.json`.

Each line is one segment, in rank order:
    {"id": 12, "rank": 0, "score": 0.71, "weight": 1.0, "method": "centroid", "doc": 3,
     "rows": [180, 195], "text": "...", "sentences": ["...", "..."]}
`id` is the segment id for the selection's segment size, `rows` the half-open range of sentence ids
(FAISS row == LMDB key == embedding row) it covers, `doc` the document index; two segments are
adjacent in the corpus exactly when they share `doc` and one's `rows[1]` equals the other's
`rows[0]`. `weight` is 1.0 for discrete selections and lambda in (0, 1) for continuous ones.
This module imports neither faiss nor torch, so the trainer can read selections cheaply.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from tapt.errors import InputError
from tapt.util.files import atomic_write, parents_of, sha256_file, write_json_atomic
from tapt.util.manifests import read_versioned_json

SELECTION_FORMAT = "tapt-selection"
SELECTION_FORMAT_VERSION = 1


@dataclass(frozen=True)
class SelectedSegment:
    """One line of a selection file."""

    id: int
    rank: int
    score: float
    weight: float
    method: str
    doc: int
    rows: tuple[int, int]
    text: str
    sentences: list[str]

    def to_json(self) -> str:
        return json.dumps(
            {
                "id": self.id,
                "rank": self.rank,
                "score": round(float(self.score), 6),
                "weight": round(float(self.weight), 6),
                "method": self.method,
                "doc": self.doc,
                "rows": list(self.rows),
                "text": self.text,
                "sentences": self.sentences,
            },
            ensure_ascii=False,
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
    """The selection's manifest; refuses a missing one or one of another format version."""
    if not Path(path).is_file():
        raise InputError(f"selection file {path} does not exist")
    return read_versioned_json(manifest_path(path), SELECTION_FORMAT, SELECTION_FORMAT_VERSION,
                               f"selection {path}", InputError)


def iter_selection(path: str | Path) -> Iterator[SelectedSegment]:
    """Stream the segments of a selection file, checking every line."""
    path = Path(path)
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                yield SelectedSegment(
                    id=int(obj["id"]),
                    rank=int(obj["rank"]),
                    score=float(obj["score"]),
                    weight=float(obj["weight"]),
                    method=str(obj["method"]),
                    doc=int(obj["doc"]),
                    rows=(int(obj["rows"][0]), int(obj["rows"][1])),
                    text=str(obj["text"]),
                    sentences=[str(s) for s in obj["sentences"]],
                )
            except (json.JSONDecodeError, KeyError, TypeError, ValueError, IndexError) as exc:
                raise InputError(f"{path}:{lineno}: not a tapt selection line ({exc})") from exc


def read_selection(path: str | Path) -> tuple[dict[str, Any], list[SelectedSegment]]:
    """Manifest and all segments; the file's hash must match the manifest's."""
    manifest = read_manifest(path)
    expected = manifest.get("selection_sha256")
    if expected and sha256_file(path) != expected:
        raise InputError(
            f"selection {path} does not match its manifest (edited or truncated after it was written)"
        )
    return manifest, list(iter_selection(path))
