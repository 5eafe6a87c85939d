"""The Python API: `import tapt` is cheap; Index, select, Selection, exports, train, evaluate_mlm."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tapt
from conftest import SAMPLE, HashingEncoder, write_labelled_corpus
from tapt.errors import BudgetError, IndexFormatError, InputError, OutputError
from tapt.retriever.selections.file_format import manifest_path

HEAVY = ("torch", "faiss", "transformers", "sentence_transformers", "sklearn", "onnxruntime",
         "pandas", "pyarrow", "datasets")


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", f"import sys\n{code}\n"
                          "print(' '.join(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True, cwd="/")
    return set(out.stdout.split())


def test_import_tapt_is_cheap():
    loaded = _modules_after("import tapt")
    assert not {m for m in loaded if m.split(".")[0] in HEAVY}, loaded & set(HEAVY)
    assert not {m for m in loaded if m.split(".")[0] == "numpy"}
    opened = _modules_after("import tapt; tapt.Index; tapt.Selection; tapt.method_names()")
    assert not {m for m in opened if m.split(".")[0] in HEAVY}


def test_public_names():
    assert set(tapt.__all__) >= {"Index", "Selection", "train", "evaluate_mlm", "method_names",
                                 "TaptError", "InputError", "__version__"}
    for name in tapt.__all__:
        assert getattr(tapt, name) is not None
    with pytest.raises(AttributeError):
        tapt.no_such_name  # noqa: B018
    assert tapt.method_names()[:3] == ("centroid", "knn", "iforest")
    described = {m["name"]: m for m in tapt.describe_methods()}
    assert described["knn"]["params"]["k"] == 50 and described["fused"]["needs_text"]


@pytest.fixture(scope="module")
def ix(fake_index):
    return tapt.Index.open(fake_index)


@pytest.fixture(scope="module")
def task_lines(medical_task):
    return medical_task.read_text().splitlines()


@pytest.fixture(scope="module")
def fused(ix, task_lines):
    return ix.select("fused", task=task_lines, budget="60sent")


def test_select_with_every_kind_of_task(ix, medical_task, task_lines):
    enc = HashingEncoder()
    by_file = ix.select("centroid", task=medical_task, budget="0.2")
    by_paths = ix.select("centroid", task=[Path(medical_task)], budget="0.2")
    by_str_paths = ix.select("centroid", task=[str(medical_task)], budget="0.2")
    by_texts = ix.select("centroid", task=task_lines, budget="0.2")
    by_emb = ix.select("centroid", task=enc.encode(task_lines), budget="0.2")
    by_array = ix.select("centroid", task=np.array(task_lines), budget="0.2")
    pd = pytest.importorskip("pandas")
    by_series = ix.select("centroid", task=pd.Series(task_lines), budget="0.2")
    ids = by_file.ids.tolist()
    for other in (by_paths, by_str_paths, by_texts, by_emb, by_array, by_series):
        assert other.ids.tolist() == ids
    assert by_file.manifest["task"]["kind"] == "files"
    assert by_texts.manifest["task"]["kind"] == "texts" and by_emb.manifest["task"]["files"] == []
    with pytest.raises(InputError, match="needs the task's text") as err:
        ix.select("fused", task=enc.encode(task_lines), budget="50sent")
    assert err.value.param == "task"
    with pytest.raises(InputError, match="no such file"):
        ix.select("centroid", task=["missing.txt", "other.jsonl"], budget="5")
    with pytest.raises(InputError, match="not a file, folder or URL: pass the task's text as a "
                                         "list of strings") as err:
        ix.select("centroid", task="Fever and a cough.", budget="5")
    assert err.value.param == "task"
    with pytest.raises(InputError, match="L2-normalised"):
        ix.select("centroid", task=2 * enc.encode(task_lines), budget="5")
    with pytest.raises(InputError, match=r"\(n, 64\)"):
        ix.select("centroid", task=np.ones((3, 5), np.float32), budget="5")
    with pytest.raises(InputError, match="has no parameter `k`"):
        ix.select("centroid", task=task_lines, budget="5", k=3)
    with pytest.raises(InputError, match="unknown method 'magic'"):
        ix.select("magic", task=task_lines, budget="5")
    random_sel = ix.select("random", budget="5", seed=2)
    assert len(random_sel) == 5 and random_sel.manifest["task"] is None


def test_selection_holds_text_metadata_and_scores(ix, fused):
    assert len(fused) == fused.counts["segments"] and fused.method == "fused"
    first = fused[0]
    records = ix.store.records(range(*first.rows))
    assert first.sentences == [r["text"] for r in records]
    assert first.doc_key == records[0]["doc_key"] and first.source.endswith("pool.jsonl")
    # the corpus's fields: shared ones in `meta`, the differing position per sentence
    assert first.meta == {"domain": "medical", "doc": first.doc_key}
    assert first.sentence_meta == [{"pos": r["meta"]["pos"]} for r in records]
    assert fused.rows.shape == (len(fused), 2) and fused.scores[0] >= fused.scores[-1]
    assert fused.sentence_rows.tolist() == [r for lo, hi in fused.rows for r in range(lo, hi)]
    assert fused.weights.tolist() == [1.0] * len(fused) and fused.texts[0] == first.text
    assert [s.rank for s in fused] == list(range(len(fused)))


def test_arguments_of_the_wrong_type_are_tapt_errors(ix, fused, fake_index, tmp_path):
    cases = [
        (lambda: tapt.Index.open(None), InputError, "path"),
        (lambda: fused.write(None), OutputError, "out"),
        (lambda: fused.export(5), OutputError, "out"),
        (lambda: ix.select("centroid", task=["Fever."], budget="3", device="tpu"),
         InputError, "device"),
        (lambda: ix.select("centroid", task=["Fever."], budget="3", batch_size=0), InputError, "batch_size"),
        (lambda: ix.verify(sample=-1), InputError, "sample"),
        (lambda: tapt.Index.build([fake_index], tmp_path / "x", segment_size="5"), InputError, "segment_size"),
    ]
    for call, kind, param in cases:
        with pytest.raises(kind) as err:
            call()
        assert err.value.param == param, (param, err.value)


def test_an_empty_selection_says_so(ix, caplog):
    task = ["zyxq wvut " * 3 + str(i) for i in range(20)]     # words no corpus sentence has
    with caplog.at_level("WARNING", logger="tapt.retriever.selections.make"):
        sel = ix.select("classifier", task=task)
    assert len(sel) == 0 and sel.warnings and "selected nothing" in sel.warnings[0]
    assert "give a budget" in caplog.text


def test_store_rows_out_of_range_are_misuse_not_damage(ix):
    for row in (ix.n_sentences, -1):
        with pytest.raises(InputError, match=f"row {row} is out of range") as err:
            ix.store.texts([row])
        assert err.value.param == "ids"
    assert len(ix.store.texts([ix.n_sentences - 1])) == 1


def test_to_pandas_arrow_and_hf_dataset(fused):
    df = fused.to_pandas()
    assert list(df["text"]) == fused.texts and df["domain"][0] == "medical"
    table = fused.to_arrow()
    assert table.num_rows == len(fused) and table["domain"][0].as_py() == "medical"
    ds = fused.to_hf_dataset()
    assert ds.num_rows == len(fused) and ds[0]["tapt_doc_key"] == fused[0].doc_key


def test_missing_optional_package_names_the_install(fused, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(InputError, match=r"pip install 'tapt\[hf\]'"):
        fused.to_pandas()


def test_write_read_round_trip_and_version_1(fused, tmp_path):
    path = fused.write(tmp_path / "sel.jsonl")
    back = tapt.Selection.read(path)
    assert back.ids.tolist() == fused.ids.tolist() and back[0].meta == fused[0].meta
    assert back.manifest["format_version"] == 2 and back.manifest["index"]["rows"] == 380
    # a version 1 file (no doc_key / source / meta) is still read
    v1 = tmp_path / "v1.jsonl"
    lines = [{k: v for k, v in json.loads(line).items()
              if k not in ("doc_key", "source", "meta", "sentence_meta")}
             for line in path.read_text().splitlines()]
    v1.write_text("".join(json.dumps(x) + "\n" for x in lines))
    manifest = json.loads(manifest_path(path).read_text())
    manifest.update(format_version=1, selection_sha256=None)
    manifest_path(v1).write_text(json.dumps(manifest))
    old = tapt.Selection.read(v1)
    assert old.ids.tolist() == fused.ids.tolist() and old[0].meta == {} and old[0].doc_key is None


def test_write_never_destroys_inputs_or_foreign_files(ix, fused, medical_task, tmp_path):
    before = medical_task.read_bytes()
    sel = ix.select("centroid", task=medical_task, budget="3")
    with pytest.raises(OutputError, match="also an input"):
        sel.write(medical_task)
    assert medical_task.read_bytes() == before
    with pytest.raises(OutputError, match="inside the input"):
        sel.write(Path(ix.path) / "manifest.json")
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    for overwrite in (False, True):
        with pytest.raises(OutputError, match="never replaces a file it did not write"):
            sel.write(notes, overwrite=overwrite)
    assert notes.read_text() == "mine"
    first = sel.write(tmp_path / "s.jsonl")
    fused.write(first)                                  # an existing selection is replaced
    assert tapt.Selection.read(first).method == "fused"


def test_export_rerun_needs_no_overwrite_and_a_changed_text_export_is_kept(fused, tmp_path):
    for name in ("t.txt", "t.jsonl"):
        path = fused.export(tmp_path / name)
        before = path.stat().st_mtime_ns
        assert fused.export(tmp_path / name) == path       # a notebook cell run again
        assert path.stat().st_mtime_ns == before
    edited = tmp_path / "t.txt"
    edited.write_text(edited.read_text() + "my own line\n")
    for overwrite in (False, True):
        with pytest.raises(OutputError, match="carries no mark of tapt"):
            fused.export(edited, overwrite=overwrite)
    assert edited.read_text().endswith("my own line\n")
    (tmp_path / "t.jsonl").write_text("{}\n")
    with pytest.raises(OutputError, match="never replaces a file it did not write"):
        fused.export(tmp_path / "t.jsonl", overwrite=True)


def test_exports_load_with_pandas_and_datasets(fused, tmp_path):
    import datasets
    import pandas as pd

    fused.write(tmp_path / "sel.jsonl")
    parquet = fused.export(tmp_path / "train.parquet")
    df = pd.read_parquet(parquet)
    assert list(df["text"]) == fused.texts and list(df["weight"]) == fused.weights.tolist()
    assert {"score", "tapt_rank", "tapt_id", "tapt_doc_key", "tapt_source"} <= set(df.columns)
    hf = fused.export(tmp_path / "train-ds", format="hf")
    ds = datasets.load_from_disk(str(hf))
    assert ds["text"] == fused.texts and {k: ds[0][k] for k in fused[0].meta} == fused[0].meta
    lines = fused.export(tmp_path / "train.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    assert {k: first[k] for k in fused[0].meta} == fused[0].meta and len(lines) == len(fused)
    txt = fused.export(tmp_path / "train.txt").read_text().splitlines()
    assert txt == [" ".join(t.split()) for t in fused.texts]
    # a second export replaces tapt's own parquet and hf outputs, not a foreign file
    fused.export(parquet)
    fused.export(hf, format="hf")
    assert datasets.load_from_disk(str(hf)).num_rows == len(fused)
    fused.export(tmp_path / "train.jsonl")          # unchanged: nothing to replace
    with open(tmp_path / "train.jsonl", "a") as fh:
        fh.write(lines[0] + "\n")                     # changed since: only with `overwrite`
    with pytest.raises(OutputError, match="pass `overwrite`"):
        fused.export(tmp_path / "train.jsonl")
    with pytest.raises(OutputError, match="also an input"):
        fused.export(tmp_path / "sel.jsonl", format="jsonl", overwrite=True)
    with pytest.raises(InputError, match="cannot tell the format") as err:
        fused.export(tmp_path / "train.bin")
    assert err.value.param == "format"
    assert not list(tmp_path.glob(".*"))                 # no temporary left behind


def test_index_build_add_verify_repair_reindex_info(tmp_path, medical_task):
    corpus = tmp_path / "pool.jsonl"
    records = write_labelled_corpus(corpus, docs_per_topic=4, seed=3)
    ix = tapt.Index.build(corpus, tmp_path / "idx", model="hashing-test", segment_size=4,
                          split=False, progress=False)
    assert ix.n_sentences == len(records) and ix.info()["counts"]["sentences"] == len(records)
    more = tmp_path / "more.jsonl"
    added = write_labelled_corpus(more, docs_per_topic=2, seed=11)
    record = ix.add(more, progress=False)
    assert record["sentences"] == len(added) and ix.n_sentences == len(records) + len(added)
    assert ix.verify(progress=False).ok
    (ix.path / "shards" / "000000" / "index.faiss").unlink()
    assert not ix.verify(progress=False).ok
    with pytest.raises(IndexFormatError, match="index.faiss is missing"):
        tapt.Index.open(ix.path)
    assert not tapt.Index.verify_path(ix.path, progress=False).ok
    assert tapt.Index.repair_path(ix.path, progress=False)
    assert tapt.Index.open(ix.path).verify(progress=False).ok
    (ix.path / "shards" / "000000" / "index.faiss").unlink()
    assert ix.repair(progress=False) and ix.verify(progress=False).ok
    assert ix.reindex("hnsw", progress=False)["kind"] == "hnsw"
    assert ix.select("knn", task=medical_task, k=3).counts["segments"] > 0
    with pytest.raises(IndexFormatError):
        tapt.Index.open(tmp_path)


def test_degenerate_tasks_are_refused_or_warned(ix, task_lines):
    for empty in ([], ()):
        with pytest.raises(InputError, match="the task is empty"):
            ix.select("centroid", task=empty, budget="0.2")
    with pytest.raises(InputError, match="iforest needs at least 2 task sentences") as err:
        ix.select("iforest", task=task_lines[:1], budget="0.2")
    assert err.value.param == "task"
    with pytest.raises(InputError, match="auto needs at least 4"):
        ix.select("auto", task=task_lines[:3], budget="0.2")
    with pytest.raises(InputError, match="at least 4"):
        ix.select("iforest", task=task_lines[:3], budget="0.2", detector="auto")
    with pytest.raises(InputError, match="classifier needs at least 2"):
        ix.select("classifier", task=task_lines[:1])
    few = ix.select("classifier", task=task_lines[:2], budget="0.2")
    assert any("only 2 task sentence" in w for w in few.warnings)
    one = ix.select("centroid", task=task_lines[:1], budget="0.2")
    assert len(one) > 0 and not one.warnings
    for budget in ("0.0000001", "0.5sent", "0.4tok"):
        with pytest.raises(BudgetError) as err:
            ix.select("centroid", task=task_lines, budget=budget)
        assert err.value.param == "budget"


def test_the_same_task_file_twice_counts_once(ix, medical_task):
    twice = ix.select("centroid", task=[Path(medical_task), Path(medical_task)], budget="5")
    assert twice.manifest["task"]["sentences"] == 40


class _Tokenizer:
    """Word-level: known words -> ids, anything else -> [UNK] (id 1); zero-width -> nothing."""

    unk_token_id = 1

    def __call__(self, texts, add_special_tokens=False, truncation=False):
        ids = []
        for text in texts:
            words = text.replace("\u200b", " ").split()
            ids.append([2 if w.strip(".").isascii() else 1 for w in words])
        return {"input_ids": ids}


def test_task_tokens_screened_with_the_encoders_tokenizer():
    from tapt.retriever.tasks.forms import screen_tokens

    enc = HashingEncoder()
    enc.tokenizer = _Tokenizer()
    with pytest.raises(InputError, match="tokenise to nothing"):
        screen_tokens(enc, ["\U0001F600\U0001F680", "\u200b\u200b"])
    kept, warnings = screen_tokens(enc, ["A fever.", "\U0001F600", "Cough and ache."])
    assert kept == ["A fever.", "Cough and ache."] and "1 of 3" in warnings[0]
    _, warnings = screen_tokens(enc, ["fever \u00e9t\u00e9 \u00e0 \u00f4", "ok"])
    assert any("60% of the task's tokens are unknown" in w for w in warnings)
    assert screen_tokens(HashingEncoder(), ["\U0001F600"]) == (["\U0001F600"], [])


def test_train_and_evaluate_mlm(fused, tmp_path):
    pytest.importorskip("torch")
    from tiny_model import write_tiny_bert

    model = write_tiny_bert(tmp_path / "tiny", [t for t in fused.texts], hidden_size=32, layers=1,
                            max_positions=64)
    with pytest.raises(InputError, match="written first"):
        tapt.train(tapt.Selection(fused.segments, fused.manifest), tmp_path / "unwritten",
                   model=str(model), steps=1)
    sel = fused.write(tmp_path / "sel.jsonl")
    manifest = tapt.train(fused, tmp_path / "m", model=str(model), steps=2, batch_size=4,
                          max_length=32, progress=False)
    assert manifest["steps"] == 2 and manifest["selections"][0]["path"] == str(sel)
    heldout = tmp_path / "heldout.txt"
    heldout.write_text("\n".join(fused.texts[:4]) + "\n")
    report = tapt.evaluate_mlm(heldout, model=str(tmp_path / "m"), max_length=32)
    assert np.isfinite(report["loss"]) and report["tokens"] > 0
    with pytest.raises(InputError) as err:
        tapt.evaluate_mlm(heldout, model=str(model), mlm_probability=1.5)
    assert err.value.param == "mlm_probability"
    with pytest.raises(InputError) as err:
        tapt.train(sel, tmp_path / "x", model=str(model))
    assert "`steps` and `epochs`" in str(err.value)
    from click.testing import CliRunner

    from tapt.cli import cli

    result = CliRunner().invoke(cli, ["-q", "train", "--model", str(model), "--selection",
                                      str(sel), "--steps", "1", "--batch-size", "4",
                                      "--max-length", "32", "--out", str(tmp_path / "cli"),
                                      "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["steps"] == 1 and report["out"] == str(tmp_path / "cli")


# --- the README's example, with the real packaged model on a prefix of the bundled sample


@pytest.fixture(scope="module")
def sample_index(tmp_path_factory):
    base = tmp_path_factory.mktemp("sample")
    pool = base / "pool.jsonl"
    with gzip.open(SAMPLE / "pool.jsonl.gz", "rt", encoding="utf-8") as src, open(pool, "w") as out:
        for i, line in enumerate(src):
            if i >= 1200:
                break
            out.write(line)
    return tapt.Index.build(pool, base / "idx", split=False, segment_size=5, progress=False)


def docstring_example() -> str:
    """The example of `tapt.api`'s docstring: the indented block after its first line ending
    in a colon."""
    import tapt.api

    lines = tapt.api.__doc__.split(":\n\n", 1)[1].splitlines()
    block = []
    for line in lines:
        if line.strip() and not line.startswith("    "):
            break
        block.append(line[4:])
    return "\n".join(block).strip() + "\n"


def readme_example() -> str:
    """The README's Python example (its `python` section, which the docs site includes)."""
    from readme import readme_section

    section = readme_section("python")
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_readme_and_docstring_examples_are_the_same():
    assert readme_example() == docstring_example()


def test_readme_example_runs(sample_index, tmp_path, monkeypatch):
    # up to the training call (tiny-model training is tested above; the packaged model would
    # take minutes)
    code = readme_example().split("tapt.train(")[0]
    assert "tapt.Index.open" in code and 'ix.select("fused"' in code and "to_pandas" in code
    assert len(code.strip().splitlines()) <= 10
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(code.replace('"idx"', repr(str(sample_index.path))), "README", "exec"),
         namespace)
    sel = namespace["sel"]
    assert 500 <= sel.counts["sentences"] < 505 and not sel.warnings
    top = [m.get("domain") for m in sel.meta[:20]]
    assert top.count("medical") >= 15, top                # medical is ~14% of this sample
    import pandas as pd

    assert len(pd.read_parquet(tmp_path / "train-fever.parquet")) == len(sel)
    assert tapt.Selection.read(tmp_path / "sel-fever.jsonl").ids.tolist() == sel.ids.tolist()


def test_real_tokenizer_refuses_emoji_and_warns_on_unknown_script(sample_index):
    with pytest.raises(InputError, match="tokenise to nothing"):
        sample_index.select("centroid", task=["\U0001F600\U0001F525\U0001F680", "\u200b\u200b"],
                            budget="10")
    sel = sample_index.select("centroid", budget="10", task=[
        "The \u16a0\u16a2\u16a6 \u16a8\u16b1\u16b2 \u16b7\u16b9 patient", "A fever."])
    assert any("unknown to" in w for w in sel.warnings), sel.warnings
    dropped = sample_index.select("centroid", budget="10",
                                  task=["\U0001F600", "The patient has a fever."])
    assert dropped.manifest["task"]["sentences"] == 1 and "1 of 2" in dropped.warnings[0]


def test_docstring_examples(sample_index, tmp_path, monkeypatch):
    """The examples in the API's docstrings, run against a real-model index."""
    import doctest
    import importlib
    import pkgutil

    import tapt.api
    import tapt.retriever.methods
    import tapt.retriever.selections.selection

    monkeypatch.chdir(tmp_path)
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    extra = {"tapt": tapt, "idx": str(sample_index.path), "ix": sample_index}
    api_modules = [importlib.import_module(f"tapt.api.{m.name}")
                   for m in pkgutil.iter_modules(tapt.api.__path__)]
    for module in (tapt.api, *api_modules, tapt.retriever.selections.selection, tapt.retriever.methods):
        for test in finder.find(module, extraglobs=extra):
            runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0 and result.attempted >= 15, result


def test_embed_gives_the_task_array_select_takes(sample_index):
    """`Index.embed` embeds as a selection embeds its task: selecting with its array selects
    what selecting with the text selects (split off: one sentence per string)."""
    texts = ["The patient has a fever and a cough.", "Blood pressure was taken twice.",
             "The kidneys filter the blood."]
    emb = sample_index.embed(texts)
    assert emb.shape == (3, sample_index.dim) and emb.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    by_text = sample_index.select("centroid", task=texts, budget="40sent")
    by_array = sample_index.select("centroid", task=emb, budget="40sent")
    assert [s.id for s in by_text] == [s.id for s in by_array]
    with pytest.raises(InputError, match="list of strings"):
        sample_index.embed("one string")
