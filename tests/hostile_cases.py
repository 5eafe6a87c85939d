"""Hostile inputs tried on purpose, shared by tests/test_hostile_input.py and
benchmarks/hostile_input.py: each case makes its input, runs one `tapt` command (with the hashing
encoder in place of the model), and states the outcome it must have."""

from __future__ import annotations

import gzip
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from conftest import HashingEncoder, write_labelled_corpus  # noqa: E402

BIG_LINE_MB = 50


class TruncatingEncoder(HashingEncoder):
    """The hashing encoder reading at most 64 words, as a real model reads a bounded window."""

    def encode(self, texts, batch_size: int = 64):
        return super().encode([" ".join(t.split()[:64]) for t in texts], batch_size)


@dataclass
class Case:
    name: str
    make: Callable[[Path], list[str]]   # writes inputs under a directory, returns the argv
    expect: str                         # "error: <substring>" or "ok: <substring of output>"


def _file(name: str, data: bytes | str) -> Callable[[Path], Path]:
    def write(d: Path) -> Path:
        path = d / name
        opener = gzip.open if name.endswith(".gz") else open
        with opener(path, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
        return path
    return write


def _build(maker: Callable[[Path], Path], *extra: str) -> Callable[[Path], list[str]]:
    return lambda d: ["index", "build", str(maker(d)), "--out", str(d / "idx"), *extra]


def _truncated_gz(d: Path) -> Path:
    path = _file("t.jsonl.gz", "".join(json.dumps({"text": f"Line {i}."}) + "\n"
                                       for i in range(2000)))(d)
    path.write_bytes(path.read_bytes()[:-40])
    return path


def _symlink_loops(d: Path) -> Path:
    corpus = d / "corpus"
    (corpus / "sub").mkdir(parents=True)
    (corpus / "sub" / "a.txt").write_text("A real sentence about ships.\n")
    os.symlink(corpus, corpus / "sub" / "loop")          # directory loop
    os.symlink(corpus / "x.txt", corpus / "y.txt")       # file loop: x -> y -> x
    os.symlink(corpus / "y.txt", corpus / "x.txt")
    return corpus


def _big_line(d: Path) -> Path:
    path = d / "big.txt"
    with open(path, "w") as fh:
        chunk = "word " * 9 + "end. "
        for _ in range(BIG_LINE_MB * 20):
            fh.write(chunk * 1000)
        fh.write("\n")
    return path


def _index(d: Path) -> Path:
    """A small sound index (built once per directory) for the selection cases."""
    from tapt.indexer.build import BuildConfig, build_index

    out = d / "good-index"
    if not out.exists():
        write_labelled_corpus(d / "pool.jsonl", docs_per_topic=4)
        build_index([d / "pool.jsonl"], out, TruncatingEncoder(),
                    BuildConfig(split=False, progress=False, segment_size=4))
    return out


def _select(budget: str, task: str = "Patient fever therapy dose.\n") -> Callable:
    def argv(d: Path) -> list[str]:
        t = _file("task.txt", task)(d)
        return ["select", "centroid", str(_index(d)), "--task", str(t), "--budget", budget,
                "--out", str(d / "sel.jsonl")]
    return argv


def _newer_version(d: Path) -> list[str]:
    import shutil

    idx = d / "newer"
    shutil.copytree(_index(d), idx)
    manifest = json.loads((idx / "manifest.json").read_text())
    manifest["format_version"] = 99
    (idx / "manifest.json").write_text(json.dumps(manifest))
    return ["select", "centroid", str(idx), "--task", str(_file("task.txt", "Fever.\n")(d)),
            "--budget", "1", "--out", str(d / "sel.jsonl")]


CASES = [
    Case("binary file (PNG bytes)", _build(_file("img.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")),
         "error: a binary file"),
    Case("invalid UTF-8", _build(_file("latin1.txt", "caf\xe9 au lait\n".encode("latin-1"))),
         "error: not valid UTF-8"),
    Case("NUL byte inside text", _build(_file("nul.txt", b"fine line\n" * 2000 + b"bad\x00line\n")),
         "error: nul.txt:2001: contains NUL bytes"),
    Case(f"a {BIG_LINE_MB} MB single line (--no-split)", _build(_big_line, "--no-split"),
         "ok: 1 documents)"),
    Case("1,000,000 empty lines", _build(_file("empty.txt", "\n" * 1_000_000)),
         "error: holds no text"),
    Case("1,000,000 empty lines around 3 lines of text",
         _build(_file("sparse.txt", "\n" * 500_000 + "One.\nTwo.\nThree.\n" + "\n" * 500_000)),
         "ok: indexed 3 sentences"),
    Case("empty file", _build(_file("nothing.txt", "")), "error: holds no text"),
    Case("JSONL record without `text`", _build(_file("a.jsonl", '{"text": "ok"}\n{"body": "x"}\n')),
         "error: a.jsonl:2: field 'text' is missing or not a string"),
    Case("JSONL `text` not a string", _build(_file("b.jsonl", '{"text": 42}\n')),
         "error: b.jsonl:1: field 'text' is missing or not a string"),
    Case("JSONL line that is not JSON", _build(_file("c.jsonl", '{"text": "ok"}\n{oops\n')),
         "error: c.jsonl:2: not valid JSON"),
    Case("truncated .gz", _build(_truncated_gz), "error: cannot read"),
    Case("symlink loops in a corpus directory", _build(_symlink_loops),
         "ok: indexed 1 sentences"),
    Case("task sharing no vocabulary with the corpus", _select("3", "\u6f22\u5b57 \u304b\u306a 12345\n"),
         "ok: centroid: selected 3 segments"),
    Case("budget 0", _select("0"), "error: must be positive"),
    Case("budget -5", _select("-5"), "error: not understood"),
    Case("budget nan", _select("nan"), "error: not understood"),
    Case("budget inf", _select("inf"), "error: not understood"),
    Case("budget 1e9sent (larger than the corpus)", _select("1e9sent"),
         "error: larger than the corpus"),
    Case("budget 1.5 (fraction > 1)", _select("1.5"), "error: a fraction must be in (0, 1]"),
    Case("index of a newer format version", _newer_version, "error: upgrade tapt"),
]


def run_case(case: Case, work: Path, monkeypatch_encoder: Callable[[type], None]
             ) -> tuple[int, str, list[str]]:
    """(exit code, output, paths the failed command left behind) of one case."""
    from click.testing import CliRunner

    from tapt.cli import cli

    monkeypatch_encoder(TruncatingEncoder)
    argv = case.make(work)
    before = set(os.listdir(work))
    result = CliRunner().invoke(cli, ["-q", *argv])
    left = sorted(set(os.listdir(work)) - before)
    return result.exit_code, result.output.strip(), left
