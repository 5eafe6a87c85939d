"""What lies inside and beside an index: shard folders its manifest does not list are never taken
for an add's own work, and whatever a user put into an index survives every command that
replaces its generation (add, reindex, repair, upgrade), or the command refuses before it
changes anything."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import HashingEncoder, make_legacy, shard_file, write_labelled_corpus
from tapt.errors import InputError, OutputError, TaptError
from tapt.indexer.building import checkpoint, stages
from tapt.indexer.building.add import add_to_index
from tapt.indexer.building.pipeline import BuildConfig, build_index
from tapt.indexer.building.reindex import reindex
from tapt.indexer.building.repair import repair_index
from tapt.indexer.building.upgrade import upgrade_index
from tapt.indexer.building.verify import verify_index
from tapt.indexer.index import Index


def _config(**kw) -> BuildConfig:
    return BuildConfig(**{"segment_size": 4, "split": False, "progress": False, "part_size": 32,
                          "batch_size": 32, **kw})


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> list[Path]:
    base = tmp_path_factory.mktemp("gen")
    out = []
    for i, seed in enumerate((4, 5, 6)):
        path = base / f"part{i}.jsonl"
        write_labelled_corpus(path, docs_per_topic=4, seed=seed)
        out.append(path)
    return out


def _texts(index_dir: Path) -> list[str]:
    index = Index(index_dir)
    return index.store.texts(range(index.n_sentences))


def _corpus_texts(path: Path) -> list[str]:
    return [json.loads(line)["text"] for line in path.read_text().splitlines() if line.strip()]


# ------------------------------------------------------------------ class 1: unlisted shards


def test_restored_backup_leaves_a_newer_shard_that_add_never_reuses(corpora, tmp_path):
    idx = tmp_path / "idx"
    build_index([corpora[0]], idx, HashingEncoder(), _config())
    backup = tmp_path / "backup"
    shutil.copytree(idx, backup)
    add_to_index(idx, [corpora[1]], HashingEncoder(), progress=False)   # generation 2
    assert (idx / "shards" / "000001").is_dir()
    shutil.copytree(backup, idx, dirs_exist_ok=True)       # `cp -a backup/. idx/`
    stray = idx / "shards" / "000001"
    before = sorted(p.relative_to(stray).as_posix() for p in stray.rglob("*"))
    with pytest.raises(InputError, match=r"shards/000001.*does not list.*neither reuses nor "
                                         r"deletes"):
        add_to_index(idx, [corpora[2]], HashingEncoder(), progress=False)
    assert sorted(p.relative_to(stray).as_posix() for p in stray.rglob("*")) == before
    assert Index(idx).n_sentences == len(_texts(backup))   # the index is the restored one
    assert not checkpoint.work_dir_for(idx, "adding").exists()
    shutil.move(str(stray), tmp_path / "moved-away")
    add_to_index(idx, [corpora[2]], HashingEncoder(), progress=False)
    texts = _texts(idx)
    assert set(_corpus_texts(corpora[2])) <= set(texts)       # the new corpus is in the index
    assert not set(_corpus_texts(corpora[1])) & set(texts) - set(_corpus_texts(corpora[0]))


def test_a_shard_copied_to_the_next_number_is_not_this_adds_work(corpora, tmp_path):
    idx = tmp_path / "idx"
    build_index([corpora[0]], idx, HashingEncoder(), _config())
    shutil.copytree(idx / "shards" / "000000", idx / "shards" / "000001")
    with pytest.raises(InputError, match="shards/000001"):
        add_to_index(idx, [corpora[1]], HashingEncoder(), progress=False)
    assert (idx / "shards" / "000001" / "shard.json").is_file()     # left alone


def test_a_completion_record_of_another_run_is_refused_in_the_work_directory(corpora, tmp_path):
    """A shard folder copied into an interrupted build's work directory is neither reused nor
    deleted: only records naming this run's fingerprint count as done."""
    other = tmp_path / "other"
    build_index([corpora[1]], other, HashingEncoder(), _config())
    idx = tmp_path / "idx"
    work = checkpoint.work_dir_for(idx)
    (work / "shards").mkdir(parents=True)
    shutil.copytree(other / "shards" / "000000", work / "shards" / "000000")
    checkpoint.write_plan(work, checkpoint.Plan("not-this-build", []))
    with pytest.raises(TaptError, match="interrupted build"):
        build_index([corpora[0]], idx, HashingEncoder(), _config())
    # with the plan of this very build, the copied shard's records still name another run
    checkpoint.write_plan(work, checkpoint.Plan("x", []))
    plan = checkpoint.read_plan(work)
    assert plan is not None
    with pytest.raises(stages.ForeignRecord, match="was not written by this build"):
        stages.prepared_record(work, "000000", "this-run")
    assert stages.prepared_record(work, "000000", "") is not None   # reindex: no resume
    assert (work / "shards" / "000000" / "shard.json").is_file()
    assert checkpoint.committed_rows(work) == 0       # another run's rows are not this one's


def test_records_name_their_run(corpora, tmp_path):
    idx = tmp_path / "idx"
    build_index([corpora[0]], idx, HashingEncoder(), _config())
    prepared = json.loads((idx / "shards" / "000000" / "prepared.json").read_text())
    embedded = json.loads((idx / "shards" / "000000" / "embedded.json").read_text())
    assert prepared["run"] and prepared["run"] == embedded["run"]


# ------------------------------------------------------------------ class 2: user entries


def _plant(idx: Path) -> dict[str, bytes | str]:
    """A user's things inside an index: hidden files and folders, a file inside a shard
    folder, symbolic links (to a file outside, and a dangling one)."""
    (idx / ".notes").write_text("why this index exists\n")
    (idx / ".git" / "objects").mkdir(parents=True)
    (idx / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (idx / ".git" / "objects" / "ab").write_bytes(b"\x00\x01blob")
    (idx / "NOTES.md").write_text("visible notes\n")
    (idx / "shards" / "000000" / "README").write_text("shard notes\n")
    (idx / "shards" / "000000" / ".hidden").write_text("hidden in a shard\n")
    outside = idx.parent / "elsewhere.txt"
    outside.write_text("outside\n")
    os.symlink(outside, idx / "latest-notes")
    os.symlink("nowhere", idx / "shards" / "000000" / "dangling")
    return _snapshot(idx)


def _snapshot(idx: Path) -> dict[str, bytes | str]:
    names = (".notes", ".git/HEAD", ".git/objects/ab", "NOTES.md", "shards/000000/README",
             "shards/000000/.hidden", "latest-notes", "shards/000000/dangling")
    out: dict[str, bytes | str] = {}
    for name in names:
        path = idx / name
        if path.is_symlink():
            out[name] = "-> " + os.readlink(path)
        elif path.is_file():
            out[name] = path.read_bytes()
    return out


@pytest.mark.parametrize("command", ["add", "reindex", "repair"])
def test_user_entries_survive_every_new_generation(command, corpora, tmp_path):
    idx = tmp_path / "idx"
    build_index([corpora[0]], idx, HashingEncoder(), _config())
    planted = _plant(idx)
    if command == "add":
        add_to_index(idx, [corpora[1]], HashingEncoder(), progress=False)
    elif command == "reindex":
        reindex(idx, index_type="hnsw", progress=False)
    else:
        faiss_file = shard_file(idx, "index.faiss")
        faiss_file.write_bytes(faiss_file.read_bytes()[:100])
        repair_index(idx, progress=False)
    assert _snapshot(idx) == planted
    assert Index(idx).n_sentences > 0
    assert all(f.ok for f in verify_index(idx, progress=False).findings)


def test_user_entries_survive_an_upgrade(corpora, tmp_path):
    idx = tmp_path / "idx"
    build_index([corpora[0]], idx, HashingEncoder(), _config())
    make_legacy(idx, 2)
    (idx / ".notes").write_text("kept\n")
    (idx / "text.lmdb" / "README").write_text("store notes\n")
    os.symlink("nowhere", idx / "link")
    manifest, changed = upgrade_index(idx, progress=False)
    assert changed
    assert (idx / ".notes").read_text() == "kept\n"
    assert (idx / "text.lmdb" / "README").read_text() == "store notes\n"
    assert os.readlink(idx / "link") == "nowhere"


def test_an_entry_that_cannot_be_carried_is_refused_before_any_change(corpora, tmp_path):
    idx = tmp_path / "idx"
    build_index([corpora[0]], idx, HashingEncoder(), _config())
    os.mkfifo(idx / ".control")
    manifest = (idx / "manifest.json").read_bytes()
    with pytest.raises(OutputError, match=r"\.control"):
        reindex(idx, index_type="hnsw", progress=False)
    with pytest.raises(OutputError, match=r"\.control"):
        add_to_index(idx, [corpora[1]], HashingEncoder(), progress=False)
    assert (idx / "manifest.json").read_bytes() == manifest
    assert (idx / ".control").exists()
    assert not any(p.name.startswith(".idx.") for p in tmp_path.iterdir())


def test_build_overwrite_refuses_an_index_holding_an_unlisted_shard(corpora, tmp_path):
    idx = tmp_path / "idx"
    build_index([corpora[0]], idx, HashingEncoder(), _config())
    shutil.copytree(idx / "shards" / "000000", idx / "shards" / "000007")
    with pytest.raises(OutputError, match="000007"):
        build_index([corpora[1]], idx, HashingEncoder(), _config(overwrite=True))
    assert (idx / "shards" / "000007").is_dir()


def test_user_entries_survive_a_resumed_add(corpora, tmp_path, monkeypatch):
    idx = tmp_path / "idx"
    build_index([corpora[0]], idx, HashingEncoder(), _config())
    (idx / ".notes").write_text("first\n")

    class Boom(HashingEncoder):
        calls = 0

        def encode(self, texts, batch_size=64):
            Boom.calls += 1
            if Boom.calls > 1:
                raise KeyboardInterrupt
            return super().encode(texts, batch_size)

    with pytest.raises(KeyboardInterrupt):
        add_to_index(idx, [corpora[1]], Boom(), batch_size=8, progress=False)
    assert checkpoint.work_dir_for(idx, "adding").is_dir()     # kept to resume
    (idx / "later.txt").write_text("added between the two sessions\n")
    add_to_index(idx, [corpora[1]], HashingEncoder(), batch_size=8, progress=False)
    assert (idx / ".notes").read_text() == "first\n"
    assert (idx / "later.txt").read_text() == "added between the two sessions\n"
    assert np.isfinite(Index(idx).embeddings[0]).all()


# ------------------------------------------------------------------ class 5: concurrent add


def test_a_select_that_opened_a_generation_answers_from_it_after_an_add(corpora, tmp_path):
    """Every method (finetune and perplexity aside: minutes a task) answers from the generation it opened,
    after a concurrent add swapped in a new one and removed the old one's files."""
    import tapt
    from tapt.retriever.methods.registry import method_names

    idx = tmp_path / "idx"
    build_index([corpora[0]], idx, HashingEncoder(), _config(segment_size=1))
    task = [t for t in _corpus_texts(corpora[0])][:60]
    opened = tapt.Index.open(idx)             # nothing read yet but what opening reads
    reference = tapt.Index.open(idx)
    before = {m: reference.select(m, task=task, budget="10sent").rows.tolist()
              for m in ("centroid", "moore-lewis", "fused")}
    add_to_index(idx, [corpora[1]], HashingEncoder(), progress=False)
    for method in method_names():
        if method in ("finetune", "perplexity", "task-model"):     # task-model: needs a model
            continue
        sel = opened.select(method, task=task, budget="10sent")
        assert len(sel) > 0, method
        if method in before:
            assert sel.rows.tolist() == before[method], method


def test_an_add_that_waited_while_another_add_completed_says_so(corpora, tmp_path, monkeypatch):
    """An add that opened generation 1 and took the lock only after another add swapped in
    generation 2 refuses with a message about the other add (no /proc/self/fd path)."""
    from tapt.indexer.building import add as add_module

    idx = tmp_path / "idx"
    build_index([corpora[0]], idx, HashingEncoder(), _config())
    real_lock = checkpoint.BuildLock
    state = {"done": False}

    class Paused(real_lock):
        def __enter__(self):
            if not state["done"]:
                state["done"] = True
                add_to_index(idx, [corpora[1]], HashingEncoder(), progress=False)
            return super().__enter__()

    monkeypatch.setattr(add_module.checkpoint, "BuildLock", Paused)
    with pytest.raises(InputError) as info:
        add_to_index(idx, [corpora[2]], HashingEncoder(), progress=False)
    assert "changed while this command was starting" in str(info.value)
    assert "/proc/self/fd" not in str(info.value)
    monkeypatch.setattr(add_module.checkpoint, "BuildLock", real_lock)
    add_to_index(idx, [corpora[2]], HashingEncoder(), progress=False)
    assert set(_corpus_texts(corpora[2])) <= set(_texts(idx))
