"""Large line files read in byte ranges (`formats.spans`, `building.scanning`): pieces scanned
and read apart give the documents, counts, line numbers and index of one pass over the file."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from build_worker import assert_same_content, assert_same_index
from conftest import HashingEncoder
from tapt.errors import InputError
from tapt.indexer.building.executors import LocalExecutor
from tapt.indexer.building.pipeline import BuildConfig, build_index
from tapt.indexer.building.scanning import scan_corpus
from tapt.indexer.index import Index
from tapt.indexer.reading.formats import ReadOptions
from tapt.indexer.reading.reader import CorpusScan, iter_documents

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 30))) + "."


def write_jsonl(path: Path, seed: int = 0, docs: int = 60) -> Path:
    """Documents of 1-6 records (some blank, some without a doc key), whitespace lines, an
    invalid byte, a last line without its newline."""
    rng = random.Random(seed)
    lines = []
    for d in range(docs):
        key = None if d % 7 == 3 else f"d{d}"
        for _ in range(rng.randint(1, 6)):
            record = {"text": _text(rng) if rng.random() > 0.1 else "  ", "n": rng.randint(0, 9)}
            if key is not None:
                record["doc"] = key
            lines.append(json.dumps(record))
            if rng.random() < 0.05:
                lines.append("   ")
    path.write_bytes(("\n".join(lines)).encode() + b"\n" + json.dumps(
        {"text": "caf\xe9", "doc": "last"}).encode("latin-1").replace(b"\\u00e9", b"\xe9"))
    return path


def write_text(path: Path, seed: int = 0, blocks: bool = True) -> Path:
    rng = random.Random(seed)
    out = []
    for _ in range(80):
        out += [_text(rng) for _ in range(rng.randint(1, 4) if blocks else 1)]
        if blocks:
            out += [""] * rng.randint(1, 2)
    path.write_text("\n".join(out) + "\n")
    return path


def documents(scan: CorpusScan) -> list[tuple]:
    out = []
    for piece in scan.pieces:      # each piece apart, as a prepare task reads its own
        for doc in iter_documents(CorpusScan([piece], scan.options)):
            out.append((doc.source, doc.key, [(r.text, r.meta) for r in doc.records]))
    return out


def scanned(path: Path, size: int, **options) -> CorpusScan:
    return scan_corpus([str(path)], ReadOptions(**options), LocalExecutor(progress=False), size)


@pytest.mark.parametrize("size", [41, 97, 333, 4096, 1 << 30])
@pytest.mark.parametrize("kind,options", [
    ("jsonl", {"invalid_utf8": "replace"}),
    ("jsonl", {"doc_field": None, "invalid_utf8": "replace"}),
    ("blocks", {}), ("lines", {}), ("blocks", {"text_docs": "line"})])
def test_pieces_read_what_one_pass_reads(tmp_path, size, kind, options):
    path = (write_jsonl(tmp_path / "c.jsonl") if kind == "jsonl" else
            write_text(tmp_path / "c.txt", blocks=kind == "blocks"))
    whole, pieces = scanned(path, 1 << 40, **options), scanned(path, size, **options)
    assert len(whole.pieces) == 1 and len(pieces.pieces) == -(-path.stat().st_size // size)
    assert documents(pieces) == documents(whole)
    a, b = whole.files[0].scanned, pieces.files[0].scanned
    assert (a.records, a.blank, dict(a.detail)) == (b.records, b.blank, dict(b.detail))
    assert sum(p.scanned.records for p in pieces.pieces) == a.records
    assert sum(p.invalid_utf8_read for p in pieces.pieces) == \
        sum(f.invalid_utf8_read for f in whole.pieces)


def test_a_blank_line_only_at_a_piece_boundary_still_makes_blocks(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("one line\n\nanother line\nand more\n")
    for size in range(1, 30):
        assert scanned(path, size).files[0].scanned.detail["text_docs"] == "block", size


@pytest.mark.parametrize("size", [50, 200, 10_000])
def test_a_bad_line_in_a_later_piece_is_reported_at_its_line(tmp_path, size):
    lines = [json.dumps({"text": f"sentence {i}."}) for i in range(200)]
    lines[150] = '{"text": "broken'
    lines[170] = "[1, 2]"
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=r"c\.jsonl:151: not valid JSON"):
        scanned(path, size)


def _config(**changes) -> BuildConfig:
    return BuildConfig(**{"segment_size": 3, "progress": False, "part_size": 64, "batch_size": 64,
                          "invalid_utf8": "replace", "embedding_dtype": "float32", **changes})


def test_a_build_in_pieces_is_the_build_of_the_whole_file(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", seed=4, docs=120)
    build_index([str(path)], tmp_path / "whole", HashingEncoder(), _config())
    build_index([str(path)], tmp_path / "pieces", HashingEncoder(), _config(piece_size=300))
    assert_same_index(tmp_path / "whole", tmp_path / "pieces")
    manifest = build_index([str(path)], tmp_path / "shards", HashingEncoder(),
                           _config(piece_size=300, shard_size=40))
    assert len(manifest["shards"]) > 3               # shards end inside the one file
    assert_same_content(tmp_path / "whole", tmp_path / "shards")
    assert Index(tmp_path / "shards").manifest["ingest"]["files"] == \
        Index(tmp_path / "whole").manifest["ingest"]["files"]
