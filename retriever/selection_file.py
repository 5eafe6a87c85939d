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
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from tapt.errors import InputError

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


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_selection(
    path: str | Path, segments: list[SelectedSegment], manifest: dict[str, Any]
) -> None:
    """Write the JSONL and its manifest atomically: temporary names, then rename, manifest last."""
    path = Path(path)
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    mpath = manifest_path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    mtmp = mpath.with_name(f".{mpath.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            for seg in segments:
                fh.write(seg.to_json())
                fh.write("\n")
        manifest = dict(manifest)
        manifest["format"] = SELECTION_FORMAT
        manifest["format_version"] = SELECTION_FORMAT_VERSION
        manifest["selection_sha256"] = file_sha256(tmp)
        with open(mtmp, "w", encoding="utf-8") as fh:
            json.dump(manifest, fh, indent=2, sort_keys=False)
            fh.write("\n")
        os.replace(tmp, path)
        os.replace(mtmp, mpath)
    finally:
        for leftover in (tmp, mtmp):
            if leftover.exists():
                leftover.unlink()


def read_manifest(path: str | Path) -> dict[str, Any]:
    """The selection's manifest; refuses a missing one or one of another format version."""
    mpath = manifest_path(path)
    if not Path(path).is_file():
        raise InputError(f"selection file {path} does not exist")
    if not mpath.is_file():
        raise InputError(f"selection {path} has no manifest ({mpath.name} is missing)")
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"selection manifest {mpath} is not valid JSON: {exc}") from exc
    if manifest.get("format") != SELECTION_FORMAT:
        raise InputError(f"{mpath} is not a tapt selection manifest")
    version = manifest.get("format_version")
    if version != SELECTION_FORMAT_VERSION:
        raise InputError(
            f"selection {path} has format version {version}; this tapt reads version "
            f"{SELECTION_FORMAT_VERSION}"
        )
    return manifest


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
    if expected and file_sha256(path) != expected:
        raise InputError(
            f"selection {path} does not match its manifest (edited or truncated after it was written)"
        )
    return manifest, list(iter_selection(path))
