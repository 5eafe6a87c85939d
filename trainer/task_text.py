"""Read task / held-out text: .txt (one document per line, or blank-line separated blocks) or .jsonl
(a `text` field per record; consecutive records with the same `doc` value form one document, as in
`indexer.reader`), optionally gzipped. Documents come back as lists of sentences."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Iterable

from tapt.errors import InputError
from tapt.util.files import sha256_file

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def split_sentences(text: str) -> list[str]:
    """A light sentence splitter (after . ! ? followed by whitespace); enough to pack documents."""
    return [s for s in (" ".join(p.split()) for p in _SENTENCE_END.split(text)) if s]


def _open_text(path: Path):
    if path.name.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def _is_jsonl(path: Path) -> bool:
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    return name.endswith(".jsonl") or name.endswith(".json")


def _read_jsonl(path: Path, lines: list[str]) -> list[list[str]]:
    docs: list[list[str]] = []
    last_doc: object = None
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from exc
        if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
            raise InputError(f"{path}:{lineno}: a JSONL record needs a string field 'text'")
        sentences = split_sentences(" ".join(obj["text"].split()))
        if not sentences:
            continue
        doc = obj.get("doc")
        if doc is not None and doc == last_doc and docs:
            docs[-1].extend(sentences)
        else:
            docs.append(sentences)
        last_doc = doc
    return docs


def _read_plain(lines: list[str]) -> list[list[str]]:
    stripped = [line.strip() for line in lines]
    # A blank line between two text lines means "blocks are documents"; otherwise each line is one.
    filled = [i for i, s in enumerate(stripped) if s]
    if filled and "" in stripped[filled[0] : filled[-1]]:
        docs, block = [], []
        for line in stripped + [""]:
            if line:
                block.append(line)
            elif block:
                docs.append(split_sentences(" ".join(block)))
                block = []
        return docs
    return [split_sentences(s) for s in stripped if s]


def read_documents(paths: Iterable[str | Path]) -> list[list[str]]:
    """All documents (each a list of sentences) of the given files, in order; refuses missing,
    unreadable or empty input."""
    docs: list[list[str]] = []
    for p in paths:
        path = Path(p)
        if not path.is_file():
            raise InputError(f"text file {path} does not exist")
        try:
            with _open_text(path) as fh:
                lines = fh.read().splitlines()
        except (UnicodeDecodeError, OSError, EOFError) as exc:
            raise InputError(f"cannot read {path} as UTF-8 text: {exc}") from exc
        found = _read_jsonl(path, lines) if _is_jsonl(path) else _read_plain(lines)
        if not found:
            raise InputError(f"{path} contains no text")
        docs.extend(found)
    return docs


def files_sha256(paths: Iterable[str | Path]) -> list[str]:
    """SHA-256 of each file's bytes (recorded in manifests and compared on --resume)."""
    out = []
    for p in paths:
        try:
            out.append(sha256_file(p))
        except OSError as exc:
            raise InputError(f"cannot read {p}: {exc}") from exc
    return out
