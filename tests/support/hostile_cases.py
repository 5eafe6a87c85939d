"""Hostile inputs and ordinary faults tried on purpose, shared by tests/cli/test_hostile_input.py and
benchmarks/hostile_input.py: each case makes its input (a corpus, a damaged index, a folder of the
user's files, a full or read-only disk), runs one `tapt` command as a user would (hashing encoder
in place of the model), and states the outcome it must have. `verdict` judges it: an error case
must fail with exactly one `Error:` line, leave nothing behind, and keep every user file; an exit
status 0 where an error was due is a silent wrong answer."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/: conftest
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the repository

from conftest import HashingEncoder, write_labelled_corpus  # noqa: E402

BIG_LINE_MB = 50


class TruncatingEncoder(HashingEncoder):
    """The hashing encoder reading at most 64 words, as a real model reads a bounded window."""

    def encode(self, texts, batch_size: int = 64):
        return super().encode([" ".join(t.split()[:64]) for t in texts], batch_size)


@dataclass
class Case:
    name: str
    make: Callable[[Path], list[str] | None]  # writes inputs, returns the argv (None: not here)
    expect: str                         # "error: <substring>" or "ok: <substring of output>"
    group: str = "input"
    protect: Callable[[Path], str | None] | None = None  # a user file lost or changed, or None
    env: dict[str, str] = field(default_factory=dict)
    subprocess: bool = False            # in a fresh process (a signal would kill the runner)
    encoder: type | None = None         # the model the command loads (default: hashing)
    report: bool = False                # prints a report before its one Error line (verify)
    keeps: tuple[str, ...] = ()         # what a failed command keeps on purpose (to resume)
    unprivileged: bool = False          # file modes must bind (root runs it without DAC override)


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


def _bad_parquet(d: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    raw = pa.array([b"Fine words.", b"caf\xe9 au lait"], type=pa.binary())
    text = pa.Array.from_buffers(pa.string(), 2, raw.buffers())      # not validated
    pq.write_table(pa.table({"text": text}), d / "bad.parquet")
    return d / "bad.parquet"


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
    from tapt.indexer.building.pipeline import BuildConfig, build_index

    out = d / "good-index"
    if not out.exists():
        write_labelled_corpus(d / "pool.jsonl", docs_per_topic=4)
        # built as a user would have built it: without the case's settings (a case's cache
        # or scratch directory is what its own command meets)
        held = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("TAPT_")}
        try:
            build_index([d / "pool.jsonl"], out, TruncatingEncoder(),
                        BuildConfig(split=False, progress=False, segment_size=4))
        finally:
            os.environ.update(held)
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
    Case("invalid UTF-8 with --invalid-utf8 replace",
         _build(_file("latin1.txt", "caf\xe9 au lait\n".encode("latin-1")), "--invalid-utf8",
                "replace"), "ok: 1 documents, 1 shard(s))"),
    Case("invalid UTF-8 in a Parquet string column (Parquet writers do not check)",
         _build(_bad_parquet), "error: bad.parquet:row 2: column 'text' is not valid UTF-8"),
    Case("NUL byte inside text", _build(_file("nul.txt", b"fine line\n" * 2000 + b"bad\x00line\n")),
         "error: nul.txt:2001: contains NUL bytes"),
    Case(f"a {BIG_LINE_MB} MB single line (--no-split)", _build(_big_line, "--no-split"),
         "ok: 1 documents, 1 shard(s))"),
    Case("1,000,000 empty lines", _build(_file("empty.txt", "\n" * 1_000_000)),
         "error: holds no text"),
    Case("1,000,000 empty lines around 3 lines of text",
         _build(_file("sparse.txt", "\n" * 500_000 + "One.\nTwo.\nThree.\n" + "\n" * 500_000)),
         "ok: indexed 3 sentences"),
    Case("empty file", _build(_file("nothing.txt", "")), "error: holds no text"),
    Case("JSONL record without `text`", _build(_file("a.jsonl", '{"text": "ok"}\n{"body": "x"}\n')),
         "error: a.jsonl:2: field 'text' is missing (the record's fields: 'body'); name the one "
         "holding the text with --text-field"),
    Case("JSONL `text` not a string", _build(_file("b.jsonl", '{"text": 42}\n')),
         "error: b.jsonl:1: field 'text' is not a string (it holds int: 42)"),
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
    Case("budget 1.5 (fraction > 1)", _select("1.5"),
         "error: is a fraction of the corpus and must be in (0, 1]"),
    Case("index of a newer format version", _newer_version, "error: upgrade tapt"),
]



# ----------------------------------------------------------------- issue 11: user files, damage,
# caches, disks. Helpers make the situation; `protect` checks what must survive.

THESIS = "years of work\n"
TASK = "Patient fever therapy dose.\nKidney biopsy lesion.\n"


def _task(d: Path) -> Path:
    return _file("task.txt", TASK)(d)


def _copy(d: Path, name: str = "idx") -> Path:
    out = d / name
    if not out.exists():
        shutil.copytree(_index(d), out)
    return out


def _flip(path: Path, offset: int, mask: int = 0x40) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= mask
    path.write_bytes(bytes(data))


def _thesis_kept(where: str) -> Callable[[Path], str | None]:
    def check(d: Path) -> str | None:
        path = d / where
        return None if path.is_file() and path.read_text() == THESIS else f"{where} lost"
    return check


def _papers(d: Path) -> Path:
    folder = d / "papers"
    folder.mkdir(exist_ok=True)
    (folder / "thesis.tex").write_text(THESIS)
    return folder


def _corpus(d: Path) -> Path:
    folder = d / "corpus"
    folder.mkdir(exist_ok=True)
    (folder / "a.txt").write_text(THESIS)
    return folder


def _sel(method: str, idx: Callable[[Path], Path], *extra: str, out: str = "sel.jsonl"):
    def argv(d: Path) -> list[str]:
        budget = ["--k", "3"] if method == "knn" else ["--budget", "3"]
        return ["select", method, str(idx(d)), "--task", str(_task(d)), *budget, *extra,
                "--out", str(d / out)]
    return argv


def _damaged(damage: Callable[[Path], None], name: str = "idx") -> Callable[[Path], Path]:
    def make(d: Path) -> Path:
        idx = _copy(d, name)
        damage(idx)
        return idx
    return make


def _at(idx: Path, rel: str) -> Path:
    """A file of the test index: top-level files, else shard 000000's (its only shard)."""
    return idx / rel if rel in ("manifest.json", "vocab.npy") else \
        idx / "shards" / "000000" / rel


def _truncate(rel: str, keep: float = 0.5) -> Callable[[Path], None]:
    return lambda idx: os.truncate(_at(idx, rel), int(_at(idx, rel).stat().st_size * keep))


def _record_flip(idx: Path) -> None:
    from tapt.indexer.index import Index

    text = Index(idx).store.texts([5])[0].encode()
    data = _at(idx, "text.lmdb/data.mdb")
    _flip(data, data.read_bytes().index(text) + 3, 0x01)


def _record_not_json(idx: Path) -> None:
    import zlib

    from tapt.indexer.store.text_store import TextStoreWriter, key

    writer = TextStoreWriter(_at(idx, "text.lmdb"))
    payload = b'{"text": "cut'
    with writer.env.begin(write=True) as txn:
        txn.put(key(3), zlib.crc32(payload, zlib.crc32(key(3))).to_bytes(4, "big") + payload)
    writer.close()


def _exponent(idx: Path) -> None:
    _flip(_at(idx, "embeddings.npy"), 128 + 4 * 64 * 7 + 4 * 3 + 3, 0x40)


def _nan_row(idx: Path) -> None:
    emb = np.load(_at(idx, "embeddings.npy"), mmap_mode="r+")
    emb[11, 0] = np.nan
    emb.flush()


def _faiss_row_flip(idx: Path) -> None:
    """A flipped byte in the FAISS vector of the row a knn query finds first."""
    from tapt.indexer.index import Index

    ix = Index(idx)
    best = int(ix.search(TruncatingEncoder().encode(["Patient fever therapy dose."]), 1)[1][0, 0])
    vectors = _at(idx, "index.faiss").stat().st_size - ix.n_sentences * ix.dim * 4
    _flip(_at(idx, "index.faiss"), vectors + best * ix.dim * 4 + 2, 0x40)


def _repaired(d: Path) -> None:
    from tapt.indexer.building.repair import repair_index

    repair_index(d / "idx", progress=False)


def _edit_docs(reseal: bool) -> Callable[[Path], None]:
    def edit(idx: Path) -> None:
        docs = np.load(_at(idx, "docs.npy"))
        docs[3] = docs[4] if reseal else docs[3] - 1
        np.save(_at(idx, "docs.npy"), docs)
        if reseal:  # someone fixed the checksum too: the offsets themselves are checked
            from conftest import reseal_shard
            from tapt.util.files import sha256_file

            reseal_shard(idx, **{"docs.npy": sha256_file(_at(idx, "docs.npy"))})
    return edit


def _edit_tokens(idx: Path) -> None:
    tokens = np.load(_at(idx, "tokens.npy"))
    tokens[2] += 7
    np.save(_at(idx, "tokens.npy"), tokens)


def _edit_manifest(idx: Path) -> None:
    text = (idx / "manifest.json").read_text()
    (idx / "manifest.json").write_text(text.replace('"segment_size": 4', '"segment_size": 5'))


def _legacy(version: int) -> Callable[[Path], None]:
    def make(idx: Path) -> None:
        from conftest import make_legacy

        make_legacy(idx, version)
    return make


def _lexical_out_of_range(idx: Path) -> None:
    """A bigram type id past the end, its checksum forged: the range check must hold."""
    from conftest import reseal_shard
    from tapt.util.files import sha256_file

    lexical = np.load(_at(idx, "lexical.npy"))
    lexical[4] = lexical.max() + 3
    np.save(_at(idx, "lexical.npy"), lexical)
    reseal_shard(idx, **{"lexical.npy": sha256_file(_at(idx, "lexical.npy"))})


def _sel_all(idx: Callable[[Path], Path]) -> Callable[[Path], list[str]]:
    """A selection of every segment: it reads every text record."""
    def argv(d: Path) -> list[str]:
        return ["select", "centroid", str(idx(d)), "--task", str(_task(d)), "--budget", "1.0",
                "--out", str(d / "sel.jsonl")]
    return argv


def _selection_of(d: Path, idx: Path, name: str) -> Path:
    from click.testing import CliRunner

    from tapt.cli import cli

    out = d / name
    CliRunner().invoke(cli, ["-q", "select", "centroid", str(idx), "--task", str(_task(d)),
                             "--budget", "4", "--out", str(out)])
    return out


def _hf_export_with_a_user_file(d: Path) -> list[str]:
    from click.testing import CliRunner

    from tapt.cli import cli

    sel = _selection_of(d, _index(d), "sel.jsonl")
    CliRunner().invoke(cli, ["-q", "export", str(sel), "--format", "hf", "--out", str(d / "ds")])
    (d / "ds" / "thesis.tex").write_text(THESIS)
    return ["export", str(sel), "--format", "hf", "--out", str(d / "ds")]


def _curated_parquet(d: Path) -> list[str]:
    import pyarrow.parquet as pq
    from click.testing import CliRunner

    from tapt.cli import cli

    sel = _selection_of(d, _index(d), "sel.jsonl")
    CliRunner().invoke(cli, ["-q", "export", str(sel), "--out", str(d / "train.parquet")])
    table = pq.read_table(d / "train.parquet")
    pq.write_table(table.slice(0, 1), d / "train.parquet")     # the user kept one row, and
    (d / "kept.parquet").write_bytes((d / "train.parquet").read_bytes())   # tapt's metadata
    return ["export", str(sel), "--out", str(d / "train.parquet")]


def _edited_selection(d: Path) -> list[str]:
    sel = _selection_of(d, _index(d), "sel.jsonl")
    sel.write_text(sel.read_text().splitlines(keepends=True)[0])    # the user kept one segment
    (d / "kept.jsonl").write_bytes(sel.read_bytes())
    return _sel("centroid", _index)(d)


def _same_bytes(path: str, copy: str) -> Callable[[Path], str | None]:
    return lambda d: None if (d / path).read_bytes() == (d / copy).read_bytes() else f"{path} lost"


def _fifo(d: Path) -> list[str]:
    os.mkfifo(d / "fifo")
    return _sel("centroid", _index, "--overwrite", out="fifo")(d)


def _grown(d: Path, name: str, text: str) -> Path:
    from tapt.indexer.building.add import add_to_index

    idx = _copy(d, name)
    more = d / f"{name}.jsonl"
    more.write_text(json.dumps({"text": text, "domain": "sea", "doc": name}) + "\n")
    add_to_index(idx, [more], TruncatingEncoder(), progress=False)
    more.unlink()
    return idx


def _eval_other_generation(d: Path) -> list[str]:
    sel = _selection_of(d, _copy(d), "sel-before.jsonl")
    grown = _grown(d, "grown", "Captain anchor harbour tide storm.")
    return ["eval", str(sel), "--index", str(grown), "--label", "medical"]


def _eval_after_reindex(d: Path) -> list[str]:
    from tapt.indexer.building.reindex import reindex

    idx = _copy(d)
    sel = _selection_of(d, idx, "sel-before.jsonl")
    reindex(idx, "hnsw", progress=False)
    return ["eval", str(sel), "--index", str(idx), "--label", "medical"]


def _train_diverged(d: Path) -> list[str]:
    a = _selection_of(d, _grown(d, "copy-a", "Captain anchor harbour tide."), "a.jsonl")
    b = _selection_of(d, _grown(d, "copy-b", "Clause licence warranty court."), "b.jsonl")
    return ["train", "--selection", str(a), "--selection", str(b), "--steps", "1",
            "--out", str(d / "model")]


def _train_into(where: Callable[[Path], Path]) -> Callable[[Path], list[str]]:
    def argv(d: Path) -> list[str]:
        sel = _selection_of(d, _copy(d), "sel-before.jsonl")
        return ["train", "--selection", str(sel), "--steps", "1", "--out", str(where(d))]
    return argv


def _on_full_disk(argv: Callable[[Path, Path], list[str]], size: str = "64k",
                  fill_it: bool = True) -> Callable[[Path], list[str] | None]:
    def make(d: Path) -> list[str] | None:
        from faultfs import fill, mount_full

        _index(d)
        disk = d / "disk"
        if not mount_full(disk, size):
            return None
        out = argv(d, disk)
        if fill_it:
            fill(disk)
        return out
    return make


def _on_read_only(argv: Callable[[Path, Path], list[str]],
                  prepare: Callable[[Path], None] | None = None
                  ) -> Callable[[Path], list[str] | None]:
    def make(d: Path) -> list[str] | None:
        from faultfs import mount_read_only

        _index(d)
        ro = d / "ro"
        ro.mkdir(exist_ok=True)
        if prepare is not None:
            prepare(ro)
        out = argv(d, ro)
        return out if mount_read_only(ro) else None
    return make


def _faiss_write_full(d: Path) -> list[str]:
    """Every write of index.faiss refuses its bytes, as on a disk that fills up right then."""
    import contextlib
    import errno

    import tapt.indexer.ann.faiss_index as faiss_index

    real = faiss_index.atomic_write

    @contextlib.contextmanager
    def full(path, mode="w", encoding="utf-8"):
        with real(path, mode, encoding):
            class Full:
                def write(self, data):
                    raise OSError(errno.ENOSPC, "No space left on device")
            yield Full()

    faiss_index.atomic_write = full
    _RESTORE.append(lambda: setattr(faiss_index, "atomic_write", real))
    write_labelled_corpus(d / "pool.jsonl", docs_per_topic=2)
    return ["index", "build", str(d / "pool.jsonl"), "--out", str(d / "idx")]


_RESTORE: list[Callable[[], None]] = []


class OtherPooling(TruncatingEncoder):
    """The same weights as the index's model, configured to pool another way."""

    fingerprint = "0" * 64
    model_config = {"modules": [{"type": "Pooling", "config": {"pooling_mode": "cls"}}]}


def _add_variant(transform: Callable[[str], str]) -> Callable[[Path], list[str]]:
    """`index add` of the index's first document, every sentence transformed."""
    def argv(d: Path) -> list[str]:
        from tapt.indexer.index import Index

        idx = _copy(d)
        ix = Index(idx)
        first = ix.store.records(range(int(ix.doc_offsets[0]), int(ix.doc_offsets[1])))
        more = d / "variant.jsonl"
        more.write_text("".join(json.dumps({"text": transform(r["text"]), "doc": "v"}) + "\n"
                                for r in first), encoding="utf-8")
        return ["index", "add", str(idx), str(more)]
    return argv


def _nfd(text: str) -> str:
    import unicodedata

    return unicodedata.normalize("NFD", text.replace("e", "\u00e9"))


def _nfc(text: str) -> str:
    return text.replace("e", "\u00e9")


def _add_first(d: Path, transform: Callable[[str], str]) -> None:
    """Add the index's first document, transformed, as a new document (NFC accents)."""
    from click.testing import CliRunner

    from tapt.cli import cli

    CliRunner().invoke(cli, ["-q", *_add_variant(transform)(d)])


def _damaged_cache_entry(d: Path) -> list[str]:
    """A selection fills the task cache; one byte of its entry is flipped; the same selection
    again must recompute the entry (with a warning) and select the same segments."""
    from click.testing import CliRunner

    from tapt.cli import cli

    argv = _sel("centroid", _index)(d)
    CliRunner().invoke(cli, ["-q", *argv[:-1], str(d / "first.jsonl")])
    (entry,) = (d / "cache").rglob("*.npy")
    _flip(entry, 100)
    return argv


def _same_as_first(d: Path) -> str | None:
    first, again = d / "first.jsonl", d / "sel.jsonl"
    if not again.is_file() or first.read_bytes() != again.read_bytes():
        return "the selection differs from the one made with a sound cache"
    return None


SAFETY_CASES = [
    # -- nothing a user owns is destroyed
    Case("build --overwrite onto a folder of user files",
         lambda d: ["index", "build", str(_file("pool.txt", "One.\n")(d)), "--out",
                    str(_papers(d)), "--overwrite"],
         "error: never replaced", "user files", protect=_thesis_kept("papers/thesis.tex")),
    Case("build --out = the corpus file itself",
         lambda d: ["index", "build", str(_corpus(d) / "a.txt"), "--out",
                    str(d / "corpus" / "a.txt"), "--overwrite"],
         "error: also an input", "user files", protect=_thesis_kept("corpus/a.txt")),
    Case("build --out = the folder holding the corpus",
         lambda d: ["index", "build", str(_corpus(d) / "a.txt"), "--out", str(d / "corpus"),
                    "--overwrite"],
         "error: contains the input", "user files", protect=_thesis_kept("corpus/a.txt")),
    Case("build --out inside the corpus folder",
         lambda d: ["index", "build", str(_corpus(d)), "--out", str(d / "corpus" / "idx")],
         "error: lies inside the input", "user files", protect=_thesis_kept("corpus/a.txt")),
    Case("build --overwrite onto a tapt index holding a user file",
         lambda d: (_copy(d), (d / "idx" / "thesis.tex").write_text(THESIS),
                    ["index", "build", str(_corpus(d)), "--out", str(d / "idx"),
                     "--overwrite"])[-1],
         "error: also holds files tapt did not write", "user files",
         protect=_thesis_kept("idx/thesis.tex")),
    Case("build --out inside an index",
         lambda d: ["index", "build", str(_corpus(d)), "--out", str(_copy(d) / "sub")],
         "error: inside the tapt index", "user files"),
    Case("build reading a file inside an index as corpus",
         lambda d: ["index", "build", str(_copy(d) / "manifest.json"), "--out", str(d / "x")],
         "error: lies inside the tapt index", "user files"),
    Case("add with an input inside the index",
         lambda d: ["index", "add", str(_copy(d)), str(d / "idx" / "manifest.json")],
         "error: lies inside the tapt index", "user files"),
    Case("add with a corpus folder that contains the index",
         lambda d: ["index", "add", str(_copy(d)), str(d)],
         "error: lies inside the input", "user files"),
    Case("reindex beside someone's folder named like its work directory",
         lambda d: (_copy(d), (d / ".idx.reindexing").mkdir(),
                    (d / ".idx.reindexing" / "thesis.tex").write_text(THESIS),
                    ["index", "reindex", str(d / "idx"), "--index", "hnsw"])[-1],
         "error: does not look like tapt's work directory", "user files",
         protect=_thesis_kept(".idx.reindexing/thesis.tex")),
    Case("plot --out onto a user's file",
         lambda d: ["plot", "domains", str(_index(d)), "--out", str(_papers(d) / "thesis.tex"),
                    "--sample", "50"],
         "error: never replaces a file it did not write", "user files",
         protect=_thesis_kept("papers/thesis.tex")),
    Case("select --out onto a user's file, with --overwrite",
         lambda d: _sel("centroid", _index, "--overwrite", out="papers/thesis.tex")(
             (_papers(d), d)[1]),
         "error: never replaces a file it did not write", "user files",
         protect=_thesis_kept("papers/thesis.tex")),
    Case("export hf over tapt's own export folder that now holds a user's file",
         _hf_export_with_a_user_file, "error: never replaced", "user files",
         protect=_thesis_kept("ds/thesis.tex")),
    Case("export over a parquet the user filtered from an export (tapt's metadata kept)",
         _curated_parquet, "error: pass --overwrite", "user files",
         protect=_same_bytes("train.parquet", "kept.parquet")),
    Case("select over a selection the user edited",
         _edited_selection, "error: pass --overwrite", "user files",
         protect=_same_bytes("sel.jsonl", "kept.jsonl")),
    Case("select --overwrite beside a user's file at the manifest's path",
         lambda d: (_file("s.jsonl.manifest.json", THESIS)(d),
                    _sel("centroid", _index, "--overwrite", out="s.jsonl")(d))[-1],
         "error: never replaced", "user files",
         protect=_thesis_kept("s.jsonl.manifest.json")),
    Case("select --out a named pipe, with --overwrite", _fifo, "error: not a regular file",
         "user files",
         protect=lambda d: None if (d / "fifo").is_fifo() else "the pipe was replaced"),
    Case("plot --out inside an index",
         lambda d: ["plot", "domains", str(_copy(d)), "--out", str(d / "idx" / "map.png")],
         "error: lies inside", "user files"),
    Case("bench recall --out onto a folder of user files",
         lambda d: ["bench", "recall", "--index", str(_index(d)), "--seeds", str(_corpus(d)),
                    "--out", str(_papers(d)), "--cache", str(d / "cache")],
         "error: never replaced", "user files", protect=_thesis_kept("papers/thesis.tex")),
    Case("bench recall --cache inside the index",
         lambda d: ["bench", "recall", "--index", str(_copy(d)), "--seeds", str(_corpus(d)),
                    "--out", str(d / "results"), "--cache", str(d / "idx" / "cache")],
         "error: lies inside", "user files"),
    Case("train --out onto a folder of user files", _train_into(_papers),
         "error: never replaced", "user files", protect=_thesis_kept("papers/thesis.tex")),
    Case("train --out = the folder holding the task text",
         lambda d: [*_train_into(lambda d: d / "corpus")(d), "--task",
                    str(_corpus(d) / "a.txt")],
         "error: contains the input", "user files", protect=_thesis_kept("corpus/a.txt")),
    Case("train --out inside an index", _train_into(lambda d: d / "idx" / "model"),
         "error: inside the tapt index", "user files"),
    # -- a damaged index fails loudly, never answers wrong
    Case("truncated text.lmdb/data.mdb: select (fresh process)",
         _sel("centroid", _damaged(_truncate("text.lmdb/data.mdb"))),
         "error: damaged", "damaged index", subprocess=True),
    Case("truncated text.lmdb/data.mdb, hashing off: select (fresh process)",
         _sel("centroid", _damaged(_truncate("text.lmdb/data.mdb"))),
         "error: the file was cut short", "damaged index", subprocess=True,
         env={"TAPT_HASH_ON_OPEN": "0"}),
    Case("truncated text.lmdb/data.mdb: verify (fresh process)",
         lambda d: ["index", "verify", str(_damaged(_truncate("text.lmdb/data.mdb"))(d))],
         "error: cut short", "damaged index", subprocess=True, report=True),
    Case("truncated text.lmdb/data.mdb: repair (fresh process)",
         lambda d: ["index", "repair", str(_damaged(_truncate("text.lmdb/data.mdb"))(d))],
         "error: cannot repair", "damaged index", subprocess=True),
    Case("deleted text.lmdb/data.mdb: select",
         _sel("centroid", _damaged(lambda i: _at(i, "text.lmdb/data.mdb").unlink())),
         "error: missing", "damaged index"),
    Case("flipped byte in a text record: select fused",
         _sel("fused", _damaged(_record_flip)), "error: does not match the checksum",
         "damaged index"),
    Case("flipped byte in a text record, hashing off: select every segment",
         _sel_all(_damaged(_record_flip)), "error: text record 5 fails its checksum",
         "damaged index", env={"TAPT_HASH_ON_OPEN": "0"}),
    Case("text record that is not JSON (valid CRC), hashing off: select every segment",
         _sel_all(_damaged(_record_not_json)), "error: text record 3 is not valid JSON",
         "damaged index", env={"TAPT_HASH_ON_OPEN": "0"}),
    Case("lexical ids out of range, checksum forged: moore-lewis",
         _sel("moore-lewis", _damaged(_lexical_out_of_range)),
         "error: lexical.npy names bigrams that do not exist", "damaged index"),
    Case("flipped byte in lexical.npy: fused",
         _sel("fused", _damaged(lambda i: _flip(_at(i, "lexical.npy"), 200))),
         "error: lexical.npy does not match the checksum", "damaged index"),
    Case("flipped exponent byte in embeddings.npy: select centroid",
         _sel("centroid", _damaged(_exponent)), "error: embeddings.npy does not match",
         "damaged index"),
    *[Case(f"flipped exponent byte in embeddings.npy, hashing off: select {m}",
           _sel(m, _damaged(_exponent)), "error: embeddings.npy row 7", "damaged index",
           env={"TAPT_HASH_ON_OPEN": "0"})
      for m in ("centroid", "knn", "density", "distance", "classifier", "iforest")],
    Case("NaN in embeddings.npy, hashing off: select centroid",
         _sel("centroid", _damaged(_nan_row)), "error: row 11", "damaged index",
         env={"TAPT_HASH_ON_OPEN": "0"}),
    Case("truncated embeddings.npy: select",
         _sel("centroid", _damaged(_truncate("embeddings.npy", 0.7))), "error: embeddings.npy",
         "damaged index"),
    Case("truncated index.faiss: select knn", _sel("knn", _damaged(_truncate("index.faiss"))),
         "error: index.faiss is", "damaged index"),
    Case("garbage index.faiss: select knn",
         _sel("knn", _damaged(lambda i: _at(i, "index.faiss").write_bytes(b"junk" * 5000))),
         "error: index.faiss", "damaged index"),
    Case("flipped byte in index.faiss: select knn",
         _sel("knn", _damaged(lambda i: _flip(_at(i, "index.faiss"), 3000))),
         "error: index.faiss does not match the checksum", "damaged index"),
    Case("flipped byte in a returned FAISS row, hashing off: select knn",
         _sel("knn", _damaged(_faiss_row_flip)), "error: disagree", "damaged index",
         env={"TAPT_HASH_ON_OPEN": "0"}),
    Case("deleted index.faiss: select knn",
         _sel("knn", _damaged(lambda i: _at(i, "index.faiss").unlink())),
         "error: tapt index repair", "damaged index"),
    Case("deleted index.faiss: select centroid (a damaged index never answers)",
         _sel("centroid", _damaged(lambda i: _at(i, "index.faiss").unlink())),
         "error: tapt index repair", "damaged index"),
    Case("deleted index.faiss: repair, then select knn",
         lambda d: (_damaged(lambda i: _at(i, "index.faiss").unlink())(d),
                    _repaired(d), _sel("knn", lambda d: d / "idx")(d))[-1],
         "ok: knn: selected", "damaged index"),
    Case("docs.npy edited, still a valid array: select",
         _sel("centroid", _damaged(_edit_docs(False))), "error: docs.npy does not match",
         "damaged index"),
    Case("docs.npy edited and its checksum forged: select",
         _sel("centroid", _damaged(_edit_docs(True))), "error: document 3 has 0 sentences",
         "damaged index"),
    Case("tokens.npy edited, still a valid array: select",
         _sel("centroid", _damaged(_edit_tokens)), "error: tokens.npy does not match",
         "damaged index"),
    Case("manifest.json edited (segment size): select",
         _sel("centroid", _damaged(_edit_manifest)), "error: does not match its own checksum",
         "damaged index"),
    Case("manifest.json truncated: select",
         _sel("centroid", _damaged(_truncate("manifest.json"))), "error: manifest", "damaged index"),
    *[Case(f"index of format {v}: select", _sel("centroid", _damaged(_legacy(v))),
           "error: tapt index upgrade", "damaged index") for v in (1, 2)],
    *[Case(f"index of format {v}: upgrade",
           lambda d, v=v: ["index", "upgrade", str(_damaged(_legacy(v))(d))],
           f"ok: format {v} -> 3", "damaged index") for v in (1, 2)],
    Case("eval of a selection from another generation (after add)", _eval_other_generation,
         "error: another generation", "damaged index"),
    Case("eval of a selection made before a reindex", _eval_after_reindex,
         "ok: sel-before.jsonl", "damaged index"),
    Case("train on selections from two copies that grew apart", _train_diverged,
         "error: different generations", "damaged index"),
    # -- caches
    Case("TAPT_CACHE_DIR is a file", _sel("centroid", _index),
         "ok: centroid: selected 3 segments", "caches", env={"TAPT_CACHE_DIR": "{d}/task.txt"}),
    Case("TAPT_CACHE_DIR read-only", _on_read_only(lambda d, ro: _sel("centroid", _index)(d)),
         "ok: centroid: selected 3 segments", "caches", env={"TAPT_CACHE_DIR": "{d}/ro"}),
    Case("every per-row array on scratch files", _sel("fused", _index),
         "ok: fused: selected 3 segments", "caches",
         env={"TAPT_SPILL_BYTES": "0", "TAPT_SCRATCH_DIR": "{d}"}),
    Case("TAPT_SCRATCH_DIR is a file (arrays kept in memory)", _sel("centroid", _index),
         "ok: centroid: selected 3 segments", "caches",
         env={"TAPT_SPILL_BYTES": "0", "TAPT_SCRATCH_DIR": "{d}/task.txt"}),
    Case("TAPT_SPILL_BYTES not a size", _sel("centroid", _index), "error: TAPT_SPILL_BYTES",
         "caches", env={"TAPT_SPILL_BYTES": "lots"}),
    Case("damaged task-embedding cache entry", _damaged_cache_entry,
         "ok: centroid: selected 3 segments", "caches", env={"TAPT_CACHE_DIR": "{d}/cache"},
         protect=_same_as_first),
    Case("model with the index's weights but another pooling", _sel("centroid", _index),
         "error: is not the model", "caches", encoder=OtherPooling),
    # -- every failure is one Error line: full and read-only disks
    Case("disk full during the FAISS write of a build", _faiss_write_full,
         "error: disk full", "disks", keeps=(".idx.building",)),
    Case("a build larger than its free disk (tmpfs): refused before it prepares",
         _on_full_disk(lambda d, disk: ["index", "build", str(_file("p.jsonl", "".join(
             json.dumps({"text": f"Sentence number {i} about ships."}) + "\n"
             for i in range(400)))(d)), "--out", str(disk / "idx"), "--no-split"], "96k",
             fill_it=False),
         "error: nothing was prepared", "disks"),
    Case("disk full while writing a selection (tmpfs)",
         _on_full_disk(lambda d, disk: _sel("centroid", _index, out="disk/s.jsonl")(d)),
         "error: disk full", "disks"),
    Case("select --out on a read-only filesystem",
         _on_read_only(lambda d, ro: _sel("centroid", _index, out="ro/s.jsonl")(d)),
         "error: read-only", "disks"),
    Case("select --out into a new folder on a read-only filesystem",
         _on_read_only(lambda d, ro: _sel("centroid", _index, out="ro/new/s.jsonl")(d)),
         "error: read-only", "disks"),
    Case("index add on a full disk (tmpfs)",
         _on_full_disk(lambda d, disk: (shutil.copytree(_index(d), disk / "idx"),
                                        _file("more.txt", "Ships and storms.\n" * 40)(d),
                                        ["index", "add", str(disk / "idx"),
                                         str(d / "more.txt")])[-1], "700k"),
         "error: disk full", "disks"),
    Case("index reindex of a read-only index",
         _on_read_only(lambda d, ro: ["index", "reindex", str(ro / "idx"), "--index", "hnsw"],
                       lambda ro: shutil.copytree(_index(ro.parent), ro / "idx")),
         "error: read-only", "disks"),
    Case("train --out on a read-only filesystem",
         _on_read_only(lambda d, ro: _train_into(lambda d: ro / "model")(d)),
         "error: not writable", "disks"),
    # -- near-duplicates
    Case("index add of a document, then its NFD variant",
         lambda d: (_add_first(d, _nfc), _add_variant(_nfd)(d))[-1],
         "ok: 1 duplicate documents skipped", "near-duplicates"),
    Case("index add of a variant with zero-width characters",
         _add_variant(lambda t: "\u200b" + t.replace(" ", " \u2060", 1) + "\ufeff"),
         "ok: 1 duplicate documents skipped", "near-duplicates"),
]

# Issue 27's classes, one list per group of classes (kept apart so they can be edited apart).
def _more(d: Path) -> Path:
    """A second corpus for `index add`."""
    path = d / "more.jsonl"
    if not path.exists():
        write_labelled_corpus(path, docs_per_topic=3, seed=9)
    return path


def _restored_over_newer(d: Path) -> list[str]:
    """`cp -a backup/. idx/` after an add: the newer generation's shard stays behind."""
    from tapt.indexer.building.add import add_to_index

    idx = _copy(d)
    backup = d / "backup"
    shutil.copytree(idx, backup)
    add_to_index(idx, [_more(d)], TruncatingEncoder(), progress=False)
    shutil.copytree(backup, idx, dirs_exist_ok=True)
    write_labelled_corpus(d / "third.jsonl", docs_per_topic=3, seed=11)
    return ["index", "add", str(idx), str(d / "third.jsonl")]


def _shard_copied_next(d: Path) -> list[str]:
    idx = _copy(d)
    shutil.copytree(idx / "shards" / "000000", idx / "shards" / "000001")
    return ["index", "add", str(idx), str(_more(d))]


_USER_ENTRIES = {".notes": "why\n", ".git/HEAD": "ref: refs/heads/main\n",
                 "shards/000000/README": "shard notes\n", "NOTES.md": "notes\n"}


def _with_user_entries(command: str) -> Callable[[Path], list[str]]:
    """An index holding a user's hidden file and folder, a note in a shard folder and a link,
    then one command that replaces its generation."""
    def argv(d: Path) -> list[str]:
        idx = _copy(d)
        for rel, text in _USER_ENTRIES.items():
            (idx / rel).parent.mkdir(parents=True, exist_ok=True)
            (idx / rel).write_text(text)
        os.symlink("../papers/thesis.tex", idx / "thesis-link")
        if command == "add":
            return ["index", "add", str(idx), str(_more(d))]
        if command == "repair":
            _truncate("index.faiss")(idx)
            return ["index", "repair", str(idx)]
        return ["index", "reindex", str(idx), "--index", "hnsw"]
    return argv


def _user_entries_kept(d: Path) -> str | None:
    idx = d / "idx"
    for rel, text in _USER_ENTRIES.items():
        if not (idx / rel).is_file() or (idx / rel).read_text() != text:
            return f"idx/{rel} lost"
    if not (idx / "thesis-link").is_symlink():
        return "idx/thesis-link lost"
    return None


def _fifo_in_index(d: Path) -> list[str]:
    idx = _copy(d)
    os.mkfifo(idx / ".control")
    return ["index", "reindex", str(idx), "--index", "hnsw"]


GENERATION_CASES: list[Case] = [
    Case("index add after restoring an older copy over a newer index (cp -a backup/. idx/)",
         _restored_over_newer, "error: does not list", "index generations"),
    Case("index add with a shard folder copied to the next free number", _shard_copied_next,
         "error: neither reuses nor deletes", "index generations"),
    *[Case(f"index {c} of an index holding a user's hidden files, shard notes and a link",
           _with_user_entries(c), "ok: ", "index generations", protect=_user_entries_kept)
      for c in ("add", "reindex", "repair")],
    Case("index reindex of an index holding a named pipe", _fifo_in_index,
         "error: cannot keep", "index generations",
         protect=lambda d: None if (d / "idx" / ".control").exists() else "idx/.control lost"),
]
class FakeRay:
    """Just enough of Ray for `tapt.retriever.serving.actors.ShardServers`, in this process: each actor
    is created in another working directory (`where`), as a Ray actor is."""

    class exceptions:  # noqa: N801 - Ray's name
        GetTimeoutError = TimeoutError

    def __init__(self, where: Path) -> None:
        self.where = where

    def remote(self, **_options):
        where = self.where

        class Call:
            def __init__(self, method) -> None:
                self.remote = method

        class Handle:
            def __init__(self, obj) -> None:
                self.obj = obj

            def __getattr__(self, name):
                return Call(getattr(self.obj, name))

        class Remote:
            def __init__(self, cls) -> None:
                self.cls = cls

            def options(self, **_options):
                return self

            def remote(self, *args):
                back = os.getcwd()
                os.chdir(where)
                try:
                    return Handle(self.cls(*args))
                finally:
                    os.chdir(back)

        return Remote

    def cluster_resources(self):
        return {"CPU": 8.0}

    def nodes(self):
        return [{"Alive": True, "Resources": {"CPU": 8.0, "memory": float(1 << 40)}}]

    def get(self, refs, timeout=None):
        return refs

    def put(self, value):
        return value

    def kill(self, actor, no_restart=True):
        pass

    def is_initialized(self):
        return False


def _fake_ray(d: Path) -> None:
    """Serve an index through `FakeRay` (no Ray cluster needed), its actors in d/elsewhere."""
    from tapt.retriever.serving import actors as serve

    real = serve.import_ray, serve.connect
    (d / "elsewhere").mkdir(exist_ok=True)
    serve.import_ray = lambda *a, **k: FakeRay(d / "elsewhere")
    serve.connect = lambda address=None: False
    _RESTORE.append(lambda: (setattr(serve, "import_ray", real[0]),
                             setattr(serve, "connect", real[1])))


def _served(*argv: str) -> Callable[[Path], list[str]]:
    """A command run in the case's directory on its index and task by relative paths, through
    `FakeRay`; what follows `--` in `argv`: the requests, passed in a file with `--requests`,
    or `in:FOLDER`, a folder of the case's directory to run in instead."""
    def make(d: Path) -> list[str]:
        _index(d)
        _file("task.txt", "Patient fever therapy dose.\n")(d)
        _fake_ray(d)
        back = os.getcwd()
        os.chdir(d)
        _RESTORE.append(lambda: os.chdir(back))
        if "--" not in argv:
            return list(argv)
        cut = argv.index("--")
        if argv[cut + 1].startswith("in:"):         # run inside this folder of d
            os.chdir(d / argv[cut + 1][3:])
            return list(argv[:cut])
        (d / "requests.jsonl").write_text("".join(r + "\n" for r in argv[cut + 1:]))
        return [*argv[:cut], "--requests", "requests.jsonl"]
    return make


def _serve(*requests: str) -> Callable[[Path], list[str]]:
    return _served("index", "serve", "good-index", "--", *requests)


def _no_dash_file(d: Path) -> str | None:
    return "a file named - was written" if (d / "-").exists() else None


_REQUEST = '"method": "centroid", "task": "task.txt", "budget": "3"'
SERVE_CASES: list[Case] = [
    Case("serve-relative-index", _serve('{"id": 1, ' + _REQUEST + ', "out": "sel.jsonl"}'),
         'ok: "segments": 3', "relative paths"),
    Case("select-ray-relative-index", _served("select", "centroid", "good-index", "--task",
                                              "task.txt", "--budget", "3", "--out", "sel.jsonl",
                                              "--executor", "ray"),
         "ok: selected 3 segments", "relative paths"),
    Case("reindex-dot", _served("index", "reindex", ".", "--index", "flat", "--", "in:good-index"),
         "ok: -> Flat", "relative paths"),
    Case("serve-id-1e999", _serve('{"id": 1e999, ' + _REQUEST + "}"),
         "error: id: must be a string, a finite number or null, not Infinity", "serve answers",
         report=True),
    Case("serve-id-nan", _serve('{"id": NaN, ' + _REQUEST + "}"),
         "error: not NaN", "serve answers", report=True),
    Case("serve-infinite-param", _serve('{"id": 2, "method": "knn", "task": "task.txt", '
                                        '"params": {"k": -Infinity}}'),
         "error: params.k: -Infinity is not a finite number", "serve answers", report=True),
    Case("serve-budget-1e999", _serve('{"id": 3, "method": "centroid", "task": "task.txt", '
                                      '"budget": 1e999}'),
         "error: budget: Infinity is not a finite number", "serve answers", report=True),
    Case("serve-deep-request", _serve("[" * 100_000 + "]" * 100_000),
         "error: nested too deeply", "serve answers", report=True),
    Case("serve-out-dash", _serve('{"id": 4, ' + _REQUEST + ', "out": "-"}'),
         'ok: "selection": [{', "serve answers", protect=_no_dash_file),
]


def _tiny_training(d: Path) -> tuple[Path, Path]:
    """A tiny random BERT and a selection to train it on (seconds, no download)."""
    import random

    from tapt.retriever.selections.file_format import SelectedSegment, write_selection
    from tiny_model import write_tiny_bert

    rng = random.Random(0)
    words = "the cat dog bird sees likes chases a big small red old".split()
    texts = [" ".join(rng.choice(words) for _ in range(8)) + " ." for _ in range(60)]
    model = write_tiny_bert(d / "tiny-model", texts, hidden_size=32, layers=2, max_positions=64)
    segments = [SelectedSegment(i, i, 1.0, 1.0, "knn", i, (2 * i, 2 * i + 2),
                                f"{texts[2 * i]} {texts[2 * i + 1]}", texts[2 * i:2 * i + 2])
                for i in range(24)]
    sel = d / "tiny-sel.jsonl"
    write_selection(sel, segments, {"method": "knn", "params": {}, "counts": {"segments": 24},
                                    "index": {"path": "idx", "uuid": "u", "model": "tiny",
                                              "manifest_sha256": "0" * 64},
                                    "segment_size": 2})
    return model, sel


def _train_on_small_disk(size: str, *extra: str) -> Callable[[Path], list[str] | None]:
    """`tapt train` of the tiny model into a folder on a tmpfs of `size` (root only)."""
    def make(d: Path) -> list[str] | None:
        from faultfs import mount_full

        model, sel = _tiny_training(d)
        if not mount_full(d / "disk", size):
            return None
        return ["train", "--model", str(model), "--selection", str(sel), "--steps", "3",
                "--batch-size", "4", "--max-length", "32", *extra, "--out",
                str(d / "disk" / "model")]
    return make


def _train_tiny(*extra: str) -> Callable[[Path], list[str]]:
    def make(d: Path) -> list[str]:
        model, sel = _tiny_training(d)
        return ["train", "--model", str(model), "--selection", str(sel), "--steps", "2",
                "--batch-size", "4", "--max-length", "32", *extra, "--out", str(d / "model")]
    return make


TRAIN_CASES: list[Case] = [        # 5: train/eval-mlm failures, SIGTERM, usage, budgets
    Case("train whose first checkpoint fills the disk (tmpfs)",
         _train_on_small_disk("256k", "--save-every", "1"), "error: disk full", "disks"),
    Case("train whose final model fills the disk (tmpfs)",
         _train_on_small_disk("64k"), "error: disk full", "disks"),
    Case("train --lr nan", _train_tiny("--lr", "nan"), "error: --lr: must be a positive number",
         "training"),
    Case("train --warmup inf", _train_tiny("--warmup", "inf"), "error: --warmup: must be",
         "training"),
    Case("train --mlm-probability nan", _train_tiny("--mlm-probability", "nan"),
         "error: --mlm-probability: must be", "training"),
    Case("train --weight-decay -inf", _train_tiny("--weight-decay=-inf"),
         "error: --weight-decay: must be", "training"),
    Case("budget 1e400", _select("1e400"), "error: too large"),
    Case("budget 1e400sent", _select("1e400sent"), "error: too large"),
    Case("budget 1e400tok", _select("1e400tok"), "error: too large"),
    Case("budget of 401 digits", _select("1" + "0" * 400), "error: too large"),
    Case("budget 1e-400 (underflows to zero)", _select("1e-400"), "error: too small"),
    Case("index build --shard-size of 401 digits",
         _build(_file("c.txt", "One sentence here.\n"), "--shard-size", "1" + "0" * 400),
         "error: --shard-size: '1000", "overflow"),
]
def _cache_entries_become(kind: str) -> Callable[[Path], list[str]]:
    """A select run once (filling the task cache of `TAPT_CACHE_DIR={d}/cache`), then every
    cache entry replaced by a FIFO or a link to /dev/zero, then the same select again."""
    def argv(d: Path) -> list[str]:
        from click.testing import CliRunner

        from tapt.cli import cli

        first = _select("3")(d)
        CliRunner().invoke(cli, ["-q", *first[:-1], str(d / "first.jsonl")])
        for entry in sorted((d / "cache").glob("task-*/*")):
            entry.unlink()
            if kind == "fifo":
                os.mkfifo(entry)
            else:
                entry.symlink_to("/dev/zero")
        return first
    return argv


def _cache_entries_kept(d: Path) -> str | None:
    kept = [p for p in (d / "cache").glob("task-*/*") if p.is_fifo() or p.is_symlink()]
    return None if kept else "the cache entries that are not files were replaced"


def _index_file_becomes(rel: str, kind: str, method: str = "centroid"
                        ) -> Callable[[Path], list[str]]:
    def argv(d: Path) -> list[str]:
        path = _at(_copy(d), rel)
        path.unlink()
        if kind == "fifo":
            os.mkfifo(path)
        else:
            path.symlink_to("/dev/zero")
        return ["select", method, str(d / "idx"), "--task", str(_task(d)), "--budget", "3",
                "--out", str(d / "sel.jsonl")]
    return argv


_ARCHIVED = "an archived selection\n"


def _out_links_to_archive(command: str) -> Callable[[Path], list[str]]:
    """`--out latest...` where `latest...` is a symbolic link into an archive of earlier runs."""
    def argv(d: Path) -> list[str]:
        (d / "archive").mkdir(exist_ok=True)
        if command == "train":
            (d / "archive" / "run1").mkdir()
            (d / "archive" / "run1" / "notes.txt").write_text(_ARCHIVED)
            (d / "latest").symlink_to(d / "archive" / "run1", target_is_directory=True)
            sel = _selection_of(d, _copy(d), "sel-before.jsonl")
            return ["train", "--selection", str(sel), "--steps", "1", "--out", str(d / "latest")]
        (d / "archive" / "run1.jsonl").write_text(_ARCHIVED)
        (d / "latest.jsonl").symlink_to(d / "archive" / "run1.jsonl")
        if command == "export":
            sel = _selection_of(d, _copy(d), "sel-before.jsonl")
            return ["export", str(sel), "--out", str(d / "latest.jsonl"), "--overwrite"]
        return ["select", "centroid", str(_index(d)), "--task", str(_task(d)), "--budget", "3",
                "--out", str(d / "latest.jsonl"), "--overwrite"]
    return argv


def _archive_kept(d: Path) -> str | None:
    for path in (d / "archive").rglob("*"):
        if path.is_file() and path.read_text() != _ARCHIVED:
            return f"{path.relative_to(d)} was rewritten through the link"
    for link in ("latest.jsonl", "latest"):
        if os.path.lexists(d / link) and not (d / link).is_symlink():
            return f"the link {link} was replaced"
    return None


def _nul_corpus(fmt: str) -> Callable[[Path], Path]:
    def write(d: Path) -> Path:
        texts = ["Fine words about fever.", "Kidney\x00biopsy lesion.", "Harbour tide."]
        if fmt == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.table({"text": texts}), d / "nul.parquet")
            return d / "nul.parquet"
        return _file("nul.jsonl", "".join(json.dumps({"text": t}) + "\n" for t in texts))(d)
    return write


def _nul_task(d: Path) -> list[str]:
    task = _file("task.jsonl", json.dumps({"text": "Patient\x00fever therapy dose."}) + "\n")(d)
    return ["select", "centroid", str(_index(d)), "--task", str(task), "--budget", "3",
            "--out", str(d / "sel.jsonl")]


def _odd_suffix(command: str) -> Callable[[Path], list[str]]:
    def argv(d: Path) -> list[str]:
        task = _file("task.md", "Patient fever therapy dose.\n")(d)
        if command == "eval-mlm":
            return ["eval-mlm", "--model", str(d / "no-model"), "--text", str(task)]
        return ["select", "centroid", str(_index(d)), "--task", str(task), "--budget", "3",
                "--out", str(d / "sel.jsonl")]
    return argv


_SUFFIX_HINT = "give the file the suffix of its format, or give its text on standard input"
READ_CASES: list[Case] = [
    Case("task cache entries replaced by FIFOs", _cache_entries_become("fifo"),
         "ok: selected 3 segments", "caches and index files", env={"TAPT_CACHE_DIR": "{d}/cache"},
         protect=_cache_entries_kept),
    Case("task cache entries linked to /dev/zero", _cache_entries_become("zero"),
         "ok: selected 3 segments", "caches and index files", env={"TAPT_CACHE_DIR": "{d}/cache"},
         protect=_cache_entries_kept),
    Case("manifest.json replaced by a FIFO", _index_file_becomes("manifest.json", "fifo"),
         "error: manifest.json (is a FIFO (named pipe), not a regular file)",
         "caches and index files"),
    Case("shard.json replaced by a FIFO", _index_file_becomes("shard.json", "fifo"),
         "error: shard.json cannot be read (is a FIFO", "caches and index files"),
    Case("shard.json linked to /dev/zero", _index_file_becomes("shard.json", "zero"),
         "error: shard.json cannot be read (is a character device", "caches and index files"),
    Case("text store data.mdb replaced by a FIFO",
         _index_file_becomes("text.lmdb/data.mdb", "fifo"),
         "error: data.mdb cannot be read (is a FIFO", "caches and index files"),
    Case("shard vocab.npy replaced by a FIFO (moore-lewis)",
         _index_file_becomes("vocab.npy", "fifo", "moore-lewis"),
         "error: vocab.npy is a FIFO", "caches and index files"),
    *[Case(f"{c} --out through a symbolic link into an archive of earlier runs",
           _out_links_to_archive(c), "error: is a symbolic link", "symlinked outputs",
           protect=_archive_kept) for c in ("select", "export", "train")],
    Case("JSONL record whose text holds NUL (\\u0000)", _build(_nul_corpus("jsonl")),
         "error: nul.jsonl:2: contains NUL", "NUL in text"),
    Case("Parquet row whose text holds NUL", _build(_nul_corpus("parquet")),
         "error: nul.parquet:row 2: contains NUL", "NUL in text"),
    Case("JSONL record holding NUL, --invalid-utf8 replace",
         _build(_nul_corpus("jsonl"), "--invalid-utf8", "replace"), "ok: ", "NUL in text"),
    Case("task JSONL record holding NUL", _nul_task, "error: task.jsonl:1: contains NUL",
         "NUL in text"),
    Case("select with a task file of unknown suffix (.md)", _odd_suffix("select"),
         f"error: {_SUFFIX_HINT}", "hints"),
    Case("eval-mlm with held-out text of unknown suffix (.md)", _odd_suffix("eval-mlm"),
         f"error: {_SUFFIX_HINT}", "hints"),
]

CASES = (CASES + SAFETY_CASES + GENERATION_CASES + SERVE_CASES + TRAIN_CASES  # noqa: PLW0127
         + READ_CASES)


# ---------------------------------------------------------- first use: settings and empty paths


def _loop(d: Path, name: str = "loop") -> Path:
    """`name` -> `name`-b -> `name`: a loop of symbolic links."""
    os.symlink(d / f"{name}-b", d / name)
    os.symlink(d / name, d / f"{name}-b")
    return d / name


def _with_loop(argv: Callable[[Path], list[str]]) -> Callable[[Path], list[str]]:
    def make(d: Path) -> list[str]:
        _loop(d)
        return argv(d)
    return make


def _empty_path(command: str) -> Callable[[Path], list[str]]:
    """A command given "" where a path belongs (what `"$UNSET"` gives in a shell)."""
    def argv(d: Path) -> list[str]:
        if command == "build":
            return ["index", "build", "", "--out", str(d / "idx")]
        if command == "add":
            return ["index", "add", str(_copy(d)), ""]
        if command == "model":
            return [*_select("3")(d), "--model", ""]
        if command == "train-task":
            return ["train", "--selection", str(_selection_of(d, _copy(d), "s.jsonl")),
                    "--task", "", "--steps", "1", "--out", str(d / "model")]
        return ["select", "centroid", str(_index(d)), "--task", "", "--budget", "3",
                "--out", str(d / "sel.jsonl")]
    return argv


SETTINGS_CASES: list[Case] = [
    Case("TAPT_CACHE_DIR a loop of symbolic links", _with_loop(_select("3")),
         "ok: centroid: selected 3 segments", "settings", env={"TAPT_CACHE_DIR": "{d}/loop"}),
    Case("TAPT_CACHE_DIR inside a loop of symbolic links", _with_loop(_select("3")),
         "ok: centroid: selected 3 segments", "settings",
         env={"TAPT_CACHE_DIR": "{d}/loop/tapt"}),
    Case("TAPT_SCRATCH_DIR a loop of symbolic links (arrays kept in memory)",
         _with_loop(_select("3")), "ok: centroid: selected 3 segments", "settings",
         env={"TAPT_SCRATCH_DIR": "{d}/loop", "TAPT_SPILL_BYTES": "0"}),
    Case("select --out through a loop of symbolic links",
         _with_loop(lambda d: [*_select("3")(d)[:-1], str(d / "loop" / "s.jsonl")]),
         "error: --out:", "settings"),
    Case("index build --out a loop of symbolic links",
         _with_loop(lambda d: ["index", "build", str(_file("c.txt", "One sentence.\n")(d)),
                               "--out", str(d / "loop")]), "error: --out:", "settings"),
    Case('select --task "" (an unset shell variable)', _empty_path("select"),
         "error: --task: '' is an empty path", "empty paths"),
    Case('index build "" (an unset shell variable)', _empty_path("build"),
         "error: CORPUS: '' is an empty path", "empty paths"),
    Case('index add IDX "" (an unset shell variable)', _empty_path("add"),
         "error: CORPUS: '' is an empty path", "empty paths"),
    Case('select --model ""', _empty_path("model"), "error: --model: '' is an empty path",
         "empty paths"),
    Case('train --task ""', _empty_path("train-task"), "error: --task: '' is an empty path",
         "empty paths"),
]


def _serve_bytes(data: bytes) -> Callable[[Path], list[str]]:
    """`tapt index serve` of requests written as these bytes (not text)."""
    def make(d: Path) -> list[str]:
        argv = _serve('{"id": 0, "method": "random", "budget": "1"}')(d)
        (d / "requests.jsonl").write_bytes(data)
        return argv
    return make


def _serve_task_url(d: Path) -> list[str]:
    argv = _serve("")(d)
    (d / "requests.jsonl").write_text(json.dumps({"id": 1, "method": "centroid", "budget": "3",
                                                  "task": (d / "task.txt").as_uri()}) + "\n")
    return argv


SERVE_MORE_CASES: list[Case] = [
    Case("serve request line that is not UTF-8, then a good one",
         _serve_bytes(b'{"id": "caf\xe9"}\n{"id": 2, ' + _REQUEST.encode() + b"}\n"),
         "error: request: not valid UTF-8 (byte 12)", "serve answers", report=True),
    Case("serve request split by a bare carriage return",
         _serve_bytes(b'{"id": 2,\r' + _REQUEST.encode() + b"}\n"),
         'ok: "segments": 3', "serve answers"),
    Case("serve request with the task as a file:// URL", _serve_task_url,
         'ok: "segments": 3', "serve answers"),
    Case('serve request with "task": ""', _serve('{"id": 1, "method": "centroid", "task": "", '
                                                 '"budget": "3"}'),
         "error: task: '' is an empty path", "serve answers", report=True),
    Case("serve request with seed inside params",
         _serve('{"id": 1, ' + _REQUEST + ', "params": {"seed": 3}}'),
         "error: params.seed: seed is a key of the request", "serve answers", report=True),
    Case("serve request holding a lone surrogate",
         _serve('{"id": 1, ' + _REQUEST + ', "out": "s\\ud800.jsonl"}'),
         "error: out: holds a lone surrogate", "serve answers", report=True),
    Case('serve request with "out": "$HOME/s.jsonl"',
         _serve('{"id": 1, ' + _REQUEST + ', "out": "$HOME/s.jsonl"}'),
         "error: are used as written, never expanded", "serve answers", report=True,
         protect=lambda d: "a folder named $HOME was made" if (d / "$HOME").exists() else None),
]


def _mode_000(rel: str) -> Callable[[Path], Path]:
    """A copy of the index with one file of its shard made unreadable (mode 000)."""
    return _damaged(lambda idx: os.chmod(_at(idx, rel), 0))


def _read_only_index(d: Path) -> Path:
    idx = _copy(d)
    for folder, dirs, files in os.walk(idx):
        for name in [*dirs, *files]:
            os.chmod(os.path.join(folder, name), 0o555 if name in dirs else 0o444)
    os.chmod(idx, 0o555)
    return idx


def _still_read_only(d: Path) -> str | None:
    mode = (d / "idx").stat().st_mode & 0o777
    left = [p.name for p in d.iterdir() if p.name.startswith(".idx.")]
    if mode != 0o555:
        return f"idx was replaced: its folder is now {oct(mode)}"
    return f"left {left}" if left else None


def _unreadable_work(d: Path) -> list[str]:
    idx = _copy(d)
    work = d / ".idx.adding"
    work.mkdir()
    (work / "plan.json").write_text("{}")
    os.chmod(work / "plan.json", 0)
    return ["index", "add", str(idx), str(_more(d)), "--restart"]


def _own_mount_point(command: str) -> Callable[[Path], list[str] | None]:
    def make(d: Path) -> list[str] | None:
        from faultfs import mount_full

        if not mount_full(d / "idx", "64m"):
            return None
        for item in _index(d).iterdir():
            (shutil.copytree if item.is_dir() else shutil.copy2)(item, d / "idx" / item.name)
        if command == "add":
            return ["index", "add", str(d / "idx"), str(_more(d))]
        if command == "repair":             # something to repair: a cut FAISS part
            _truncate("index.faiss")(d / "idx")
            return ["index", "repair", str(d / "idx")]
        return ["index", "reindex", str(d / "idx"), "--index", "hnsw"]
    return make


def _nothing_beside(d: Path) -> str | None:
    left = [p.name for p in d.iterdir() if p.name.startswith(".idx.")]
    return f"left {left} on the parent file system" if left else None


def _huge_line_gz(d: Path) -> Path:
    """A 0.4 MB .txt.gz that expands to one line of 300 MB (over the 256 MiB a line may be)."""
    path = d / "huge.txt.gz"
    with gzip.open(path, "wb", compresslevel=9) as fh:
        chunk = b"word " * 200_000
        for _ in range(300):
            fh.write(chunk)
        fh.write(b"\n")
    return path


_KILL_AFTER_TRAIN = """
import os, sys
sys.path[:0] = [{support!r}, {tests!r}]
from hashing_cli import patch_encoder
patch_encoder()
import tapt.indexer.building.stages as stages
real = stages.train_shared
def train_then_killed(task):
    real(task)
    os._exit(137)                    # as a SIGKILL: no cleanup runs
stages.train_shared = train_then_killed
from tapt.cli import main
sys.argv = ["tapt", "-q", "index", "build", {corpus!r}, "--out", {out!r}]
main()
"""


def _killed_after_train(*extra: str) -> Callable[[Path], list[str]]:
    """A build killed (no cleanup) right after its FAISS train stage, then the build run again
    with `extra`."""
    def make(d: Path) -> list[str]:
        write_labelled_corpus(d / "pool.jsonl", docs_per_topic=12)
        here = Path(__file__).resolve().parent
        subprocess.run([sys.executable, "-c", _KILL_AFTER_TRAIN.format(
            support=str(here), tests=str(here.parent), corpus=str(d / "pool.jsonl"),
            out=str(d / "idx"))], capture_output=True)
        if not (d / ".idx.building" / "train.json").is_file():
            raise RuntimeError("the killed build left no train.json")
        return ["index", "build", str(d / "pool.jsonl"), "--out", str(d / "idx"), *extra]
    return make


def _with_unlisted_shard(d: Path) -> list[str]:
    idx = _copy(d)
    shutil.copytree(idx / "shards" / "000000", idx / "shards" / "000001")
    return ["index", "verify", str(idx)]


ACCESS_CASES: list[Case] = [
    Case("index build --restart after a build killed after its FAISS train stage",
         _killed_after_train("--restart"), "ok: indexed", "killed builds"),
    Case("index build again after a build killed after its FAISS train stage",
         _killed_after_train(), "ok: resumed", "killed builds"),
    Case("index verify of an index holding a shard folder its manifest does not list",
         _with_unlisted_shard, "error: failed 1 check(s): unlisted shards", "index generations",
         report=True),
    Case("select with the tapt cache on a full disk (tmpfs)",
         _on_full_disk(lambda d, disk: _sel("centroid", _index)(d)),
         "ok: centroid: selected 3 segments", "caches", env={"TAPT_CACHE_DIR": "{d}/disk/c"}),
    Case("a .gz of 0.4 MB that expands to one 300 MB line", _build(_huge_line_gz),
         "error: huge.txt.gz:1: a line longer than 256 MiB", "input"),
    *[Case(f"mode 000 on {rel}: index verify", lambda d, rel=rel: ["index", "verify", str(
        _mode_000(rel)(d))], f"error: access {rel}", "unreadable files", report=True,
        unprivileged=True) for rel in ("embeddings.npy", "index.faiss", "text.lmdb/data.mdb",
                                       "shard.json")],
    *[Case(f"mode 000 on {rel}: index repair", lambda d, rel=rel: ["index", "repair", str(
        _mode_000(rel)(d))], "error: cannot be read (Permission denied); give this user read "
        "access", "unreadable files", unprivileged=True)
      for rel in ("embeddings.npy", "index.faiss", "text.lmdb/data.mdb")],
    Case("mode 000 on embeddings.npy: select",
         _sel("centroid", _mode_000("embeddings.npy")),
         "error: it is not damaged, this user may not read it", "unreadable files",
         unprivileged=True),
    Case("index add --restart with an unreadable work folder", _unreadable_work,
         "error: cannot be used (Permission denied)", "unreadable files", unprivileged=True,
         keeps=(".idx.adding",)),
    Case("index add to a read-only index (chmod -R a-w)",
         lambda d: ["index", "add", str(_read_only_index(d)), str(_more(d))],
         "error: is read-only", "read-only index", protect=_still_read_only),
    Case("index reindex of a read-only index (chmod -R a-w)",
         lambda d: ["index", "reindex", str(_read_only_index(d)), "--index", "hnsw"],
         "error: is read-only", "read-only index", protect=_still_read_only),
    *[Case(f"index {c} of an index that is its own mount point", _own_mount_point(c),
           "error: is a mount point", "mount points", protect=_nothing_beside)
      for c in ("add", "reindex", "repair")],
]

CASES = CASES + SETTINGS_CASES + SERVE_MORE_CASES + ACCESS_CASES


def _unprivileged() -> list[str] | None:
    """The command prefix under which file modes bind this process: none for a normal user;
    for root, setpriv dropping the capabilities that override them (None: not available)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    drop = "-dac_override,-dac_read_search"
    return [setpriv, f"--inh-caps={drop}", f"--bounding-set={drop}"]


@dataclass
class Outcome:
    """What one case did."""

    code: int | None            # None: the case cannot be set up here (needs root)
    output: str
    left: list[str]             # files or folders a failed command left behind
    lost: str | None            # a user file lost or changed
    traceback: bool
    signal: bool


def run_case(case: Case, work: Path, monkeypatch_encoder: Callable[[type], None]) -> Outcome:
    """Make the case's situation under `work`, run its command, and record what happened."""
    from click.testing import CliRunner

    import faultfs
    from tapt.cli import cli

    monkeypatch_encoder(case.encoder or TruncatingEncoder)
    saved = {k: os.environ.get(k) for k in case.env}
    os.environ.update({k: v.format(d=work) for k, v in case.env.items()})
    try:
        argv = case.make(work)
        if argv is None:
            return Outcome(None, "", [], None, False, False)
        before = set(os.listdir(work))
        if case.subprocess or case.unprivileged:
            prefix = _unprivileged() if case.unprivileged else []
            if prefix is None:
                return Outcome(None, "", [], None, False, False)
            proc = subprocess.run([*prefix, sys.executable,
                                   str(Path(__file__).parent / "hashing_cli.py"), "-q", *argv],
                                  capture_output=True, text=True)
            code, output, crashed = proc.returncode, (proc.stdout + proc.stderr).strip(), False
        else:
            result = CliRunner().invoke(cli, ["-q", *argv])
            code, output = result.exit_code, result.output.strip()
            crashed = result.exception is not None and not isinstance(result.exception,
                                                                      SystemExit)
        left = sorted(set(os.listdir(work)) - before)
        lost = case.protect(work) if case.protect is not None else None
    finally:
        faultfs.release()
        while _RESTORE:
            _RESTORE.pop()()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return Outcome(code, output, left, lost, crashed or "Traceback" in output, code < 0)


def verdict(case: Case, outcome: Outcome) -> str:
    """`as documented`, `not run here`, or what went wrong: SIGNAL, TRACEBACK, LOST USER FILE,
    SILENT WRONG ANSWER, LEFT FILES BEHIND, UNEXPECTED."""
    if outcome.code is None:
        return "not run here"
    if outcome.signal:
        return "SIGNAL"
    if outcome.traceback:
        return "TRACEBACK"
    if outcome.lost:
        return "LOST USER FILE"
    kind, expected = case.expect.split(": ", 1)
    if kind == "ok":
        return "as documented" if outcome.code == 0 and expected in outcome.output \
            else "UNEXPECTED"
    if outcome.code == 0:
        return "SILENT WRONG ANSWER"
    lines = [line for line in outcome.output.splitlines()
             if line.strip() and not line.startswith("WARNING")]
    errors = [line for line in lines if line.startswith("Error: ")]
    one_line = len(errors) == 1 and lines[-1] == errors[0] and (case.report or len(lines) == 1)
    if outcome.code != 1 or not one_line or expected not in outcome.output:
        return "UNEXPECTED"
    left = [name for name in outcome.left if name not in case.keeps]
    return "LEFT FILES BEHIND" if left else "as documented"
