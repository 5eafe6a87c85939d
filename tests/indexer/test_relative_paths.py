"""Relative paths work everywhere (issue 27, class 4): an index, a model directory or a task
given relative to the working directory works in every command, also where the work runs in
another working directory (Ray actors and workers); two blocks naming an index are compared by
content (uuid, manifest hash, generation, rows), never by the spelling of its path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

import tapt
from conftest import HashingEncoder, write_split_corpus, write_task
from hostile_cases import FakeRay
from tapt.indexer.building.add import add_to_index
from tapt.indexer.building.executors import EncoderSpec, LocalExecutor
from tapt.indexer.building.pipeline import BuildConfig, build_index
from tapt.indexer.building.reindex import reindex
from tapt.indexer.encoding.models import display_name
from tapt.indexer.index import Index
from tapt.indexer.store.identity import same_snapshot

CONFIG = dict(segment_size=4, split=False, progress=False, part_size=16, batch_size=16)


@pytest.fixture()
def here(tmp_path, monkeypatch) -> Path:
    """A working directory holding a corpus (two files), a task, and an index `idx` of the
    first file, all named relative to it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus").mkdir()
    write_split_corpus(tmp_path / "corpus", parts=2, docs_per_topic=3)
    write_task(tmp_path / "task.txt", "sea", n=10)
    build_index(["corpus/part-0.jsonl"], "idx", HashingEncoder(),
                BuildConfig(**CONFIG))
    (tmp_path / "elsewhere").mkdir()
    return tmp_path


class Elsewhere(LocalExecutor):
    """Runs every task in another working directory, as a Ray worker does, and refuses a task
    that names a relative path."""

    def __init__(self, where: Path) -> None:
        super().__init__(progress=False)
        self.where, self.tasks = where, 0

    def map(self, stage, tasks, encoder=None):
        for task in tasks:
            for field in fields(task):
                value = getattr(task, field.name)
                if isinstance(value, str) and ("/" in value or field.name in ("work", "out")):
                    assert os.path.isabs(value), (stage.name, field.name, value)
                    # a path through this process's directory handle means nothing elsewhere
                    assert not value.startswith("/proc/self/"), (stage.name, field.name, value)
        self.tasks += len(tasks)
        back = os.getcwd()
        os.chdir(self.where)
        try:
            return super().map(stage, tasks, encoder)
        finally:
            os.chdir(back)


def test_index_blocks_are_compared_by_content_not_by_path(here):
    relative, absolute = Index("idx").identity(), Index(here / "idx").identity()
    assert os.path.isabs(relative["path"]) and relative == absolute
    assert same_snapshot({**relative, "path": "idx"}, {**absolute, "path": "/mnt/other/idx"})
    assert not same_snapshot(relative, {**absolute, "manifest_sha256": "0" * 64})
    assert not same_snapshot({}, {})


def test_a_selection_records_its_index_absolute(here):
    selection = tapt.Index.open("idx").select("centroid", Path("task.txt"), "3")
    assert selection.manifest["index"]["path"] == str(here / "idx")
    os.chdir(here / "elsewhere")
    tapt.Index.open("../idx").check_selection("sel", selection.manifest["index"])


def test_add_and_reindex_of_a_relative_index_run_their_stages_anywhere(here):
    runner = Elsewhere(here / "elsewhere")
    add_to_index("idx", ["corpus/part-1.jsonl"], HashingEncoder(), progress=False,
                 executor=runner)
    reindex("idx", "flat", progress=False, executor=runner)
    assert runner.tasks > 0 and not list((here / "elsewhere").iterdir())
    index = tapt.Index.open("idx")
    assert len(index.shards) == 2 and index.verify(progress=False).ok


def test_an_add_to_an_ivf_index_hands_its_template_task_the_index_path(tmp_path):
    """An IVF index's add extracts the index's template in a task, from the part's file by
    the index's own path (not this process's handle on it)."""
    corpus = write_split_corpus(tmp_path, parts=2, docs_per_topic=140, seed=1)
    build_index([str(corpus[0])], tmp_path / "idx", HashingEncoder(),
                BuildConfig(**{**CONFIG, "index": "ivfpq"}))
    runner = Elsewhere(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").mkdir()
    add_to_index(tmp_path / "idx", [str(corpus[1])], HashingEncoder(), progress=False,
                 executor=runner)
    index = tapt.Index.open(tmp_path / "idx")
    assert len(index.shards) == 2 and index.manifest["faiss"]["part_ids"] == "global"


def test_an_index_named_dot_or_dotdot_is_rewritten_in_place(here):
    os.chdir(here / "idx")
    reindex(".", "flat", progress=False)
    os.chdir(here / "idx" / "shards")           # inside the new generation
    reindex("..", "hnsw", progress=False)
    os.chdir(here)
    assert sorted(os.listdir(here)) == ["corpus", "elsewhere", "idx", "task.txt"]
    assert tapt.Index.open("idx").manifest["faiss"]["kind"] == "hnsw"
    assert sorted(p.name for p in (here / "idx").iterdir() if p.name.startswith(".")) == []


def test_a_relative_model_directory_is_handed_on_absolute(here, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)     # a hub name is taken as it is
    (here / "models" / "m").mkdir(parents=True)
    (here / "models" / "m" / "config.json").write_text("{}")
    os.chdir(here / "models")
    assert EncoderSpec("m").model == str(here / "models" / "m")
    assert EncoderSpec("./m/").model == str(here / "models" / "m")
    assert EncoderSpec("org/hub-name").model == "org/hub-name"
    assert EncoderSpec(None).model is None
    os.chdir(here / "models" / "m")
    # the same directory under every spelling has one name (recorded, and part of a training
    # run's identity)
    assert display_name(".") == display_name("../m") == display_name(str(here / "models/m")) == "m"


def test_serving_a_relative_index_opens_the_same_generation(here, monkeypatch):
    from tapt.retriever.serving import actors as serve

    monkeypatch.setattr(serve, "import_ray", lambda *a, **k: FakeRay(here / "elsewhere"))
    monkeypatch.setattr(serve, "connect", lambda address=None: False)
    want = tapt.Index.open("idx").select("centroid", Path("task.txt"), "4")
    with tapt.serve("idx", actors=2) as served:
        got = served.select("centroid", Path("task.txt"), "4")
        assert [s.id for s in got] == [s.id for s in want] and len(got) == 4
        assert got.manifest["index"] == want.manifest["index"]


def test_cli_serve_with_a_relative_index_on_ray(here):
    """`tapt index serve idx` (and so `select --executor ray`) on a real local Ray cluster."""
    pytest.importorskip("ray")
    request = {"id": 1, "method": "centroid", "task": "task.txt", "budget": "3",
               "out": "sel.jsonl"}
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    run = subprocess.run([sys.executable, str(Path(__file__).parents[1] / "support" / "hashing_cli.py"), "-q",
                          "index", "serve", "idx", "--actors", "1", "--cpus-per-actor", "0.5"],
                         input=json.dumps(request) + "\n", capture_output=True, text=True,
                         timeout=240, cwd=here, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    (answer,) = [json.loads(line) for line in run.stdout.splitlines()]
    assert answer["segments"] == 3 and (here / "sel.jsonl").is_file(), answer


def test_an_index_records_a_relative_model_directory_absolute(monkeypatch):
    from tapt.indexer.encoding.encoder import load_encoder, model_record
    from tapt.indexer.encoding.models import packaged_default_path

    model = packaged_default_path()
    monkeypatch.chdir(model.parent)
    encoder = load_encoder(f"./{model.name}/", device="cpu", backend="torch")
    assert encoder.spec == os.path.abspath(model) and encoder.name == model.name
    assert model_record(encoder)["source"] == os.path.abspath(model)
