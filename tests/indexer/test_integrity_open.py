"""Every file an index records a checksum for is checked when the index is opened, not only the
files the command at hand reads: a cut or flipped `dochash.npy`, vocabulary or lexical-id file
stops `index info` and every `select` with one `Error:` line naming the file (not only
`moore-lewis` / `fused`, which read them, or `index verify` / `add`). A manifest that is not a tapt
index's says what to run. (`tapt export` reads only the selection file, never the index.)"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from conftest import shard_file
from hashing_cli import idx, one_error, run  # noqa: F401 - fixtures

# (path inside the index, name in the error)
LAZY_FILES = [(f"shards/000000/{name}", f"shards/000000/{name}")
              for name in ("dochash.npy", "vocab.npy", "bigrams.npy", "lexical.npy",
                           "lexical_offsets.npy")] + [("vocab.npy", "vocab.npy")]
IDS = [path.replace("shards/000000/", "shard-") for path, _ in LAZY_FILES]


def truncate(path: Path) -> None:
    os.truncate(path, path.stat().st_size - 100)


def flip(path: Path) -> None:
    """Flip 4 bytes past the header (the length, dtype and shape stay as they were)."""
    data = bytearray(path.read_bytes())
    at = 128 + (len(data) - 128) // 2
    for i in range(4):
        data[at + i] ^= 0xFF
    path.write_bytes(bytes(data))


def commands(idx: Path, task: Path) -> list[list]:
    out = idx.parent / "out"
    return [["index", "info", idx],
            ["select", "centroid", idx, "--task", task, "--budget", "3", "--out", out / "c.jsonl"],
            ["select", "knn", idx, "--task", task, "--k", "3", "--out", out / "k.jsonl"],
            ["select", "random", idx, "--budget", "3", "--out", out / "r.jsonl"],
            ["select", "moore-lewis", idx, "--task", task, "--budget", "3",
             "--out", out / "m.jsonl"]]


@pytest.mark.parametrize("damage", [truncate, flip], ids=["truncated", "flipped"])
@pytest.mark.parametrize("path,name", LAZY_FILES, ids=IDS)
def test_damaged_lazily_read_file_stops_every_command(idx, run, medical_task, path, name,
                                                      damage):
    damage(idx / path)
    for argv in commands(idx, medical_task):
        line = one_error(run(*argv), name, f"run tapt index verify {idx}")
        assert "damaged" in line, (argv, line)
        if damage is flip:
            assert "does not match the checksum" in line, (argv, line)
    assert not (idx.parent / "out").exists()


@pytest.mark.parametrize("path,name", LAZY_FILES, ids=IDS)
def test_cut_file_is_refused_by_its_length_without_hashing(idx, run, medical_task, path, name,
                                                           monkeypatch):
    """Files larger than the hashing limit (here: every file) are still held to the length
    their header names."""
    monkeypatch.setenv("TAPT_HASH_ON_OPEN", "0")
    truncate(idx / path)
    for argv in commands(idx, medical_task):
        one_error(run(*argv), name, "bytes", "expected", "tapt index verify")


def test_recorded_file_that_is_missing_is_refused_on_open(idx, run):
    shard_file(idx, "dochash.npy").unlink()
    one_error(run("index", "info", idx), "incomplete", "shards/000000/dochash.npy is missing",
              "tapt index verify")


def test_header_that_lies_about_the_shape_is_refused(idx, run, monkeypatch):
    import numpy as np

    monkeypatch.setenv("TAPT_HASH_ON_OPEN", "0")
    offsets = np.load(shard_file(idx, "lexical_offsets.npy"))
    np.save(shard_file(idx, "lexical_offsets.npy"), offsets[:-1])     # one sentence short
    one_error(run("index", "info", idx), "lexical_offsets.npy holds int64",
              "tapt index verify")


@pytest.mark.parametrize("content", ["{}", '{"format": "something-else"}', '{"format": '],
                         ids=["empty", "foreign", "not-json"])
def test_manifest_that_is_not_an_index_manifest_says_what_to_run(idx, run, medical_task,
                                                                 content):
    (idx / "manifest.json").write_text(content)
    out = idx.parent / "sel.jsonl"
    for argv in (["select", "centroid", idx, "--task", medical_task, "--budget", "3",
                  "--out", out],
                 ["select", "random", idx, "--budget", "3", "--out", out],
                 ["index", "info", idx]):
        one_error(run(*argv), f"{idx}/manifest.json",
                  f"restore {idx}/manifest.json from a backup, or rebuild the index from its "
                  "corpus into a new folder (tapt index build ... --out NEW_FOLDER)")
    verify = run("index", "verify", idx)       # verify names the same fix, once
    assert verify.exit_code == 1 and verify.output.count("tapt index build") == 1, verify.output


def test_sound_index_still_opens_and_selects(idx, run, medical_task):
    for argv in commands(idx, medical_task):
        assert run(*argv).exit_code == 0
    shutil.rmtree(idx.parent / "out")
