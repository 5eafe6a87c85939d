"""The Python API refuses what it cannot use with a TaptError naming the argument, never a raw
TypeError or FileNotFoundError from deep inside: arguments of the wrong type, empty paths, a
misspelt keyword (named, with the closest real one), an index deleted after it was opened."""

from __future__ import annotations

import shutil

import pytest

import tapt
from tapt.errors import IndexFormatError, InputError, TaptError

TASK = ["Patient fever therapy dose.", "Kidney biopsy lesion."]


@pytest.fixture()
def ix(fake_index):
    return tapt.Index.open(fake_index)


@pytest.fixture()
def selection(ix, tmp_path):
    return ix.select("centroid", task=TASK, budget="3",
                     out=tmp_path / "sel.jsonl")


@pytest.mark.parametrize("call,param", [
    (lambda sel, ix, d: tapt.export(3, d / "x.parquet"), "selection"),
    (lambda sel, ix, d: tapt.export(sel.path, 5), "out"),
    (lambda sel, ix, d: tapt.export(sel.path, d / "y.parquet", format=3), "format"),
    (lambda sel, ix, d: tapt.export(sel.path, d / "y.parquet", overwrite="yes"), "overwrite"),
    (lambda sel, ix, d: tapt.evaluate(3, ix, label="medical"), "selections"),
    (lambda sel, ix, d: tapt.evaluate(sel.path, ix, label=3), "label"),
    (lambda sel, ix, d: tapt.Selection.read(3), "path"),
    (lambda sel, ix, d: ix.embed(3), "texts"),
    (lambda sel, ix, d: ix.recall(queries="x"), "queries"),
    (lambda sel, ix, d: tapt.Index.build(3, d / "o"), "corpus"),
    (lambda sel, ix, d: tapt.Index.build([sel.path], 3), "out"),
    (lambda sel, ix, d: ix.add(3), "corpus"),
    (lambda sel, ix, d: tapt.Index.open(""), "path"),
    (lambda sel, ix, d: ix.select("centroid", task="", budget="3"), "task"),
    (lambda sel, ix, d: tapt.Index.build([""], d / "o"), "corpus"),
])
def test_a_wrong_argument_is_a_tapt_error_naming_it(call, param, selection, ix, tmp_path):
    with pytest.raises(TaptError) as caught:
        call(selection, ix, tmp_path)
    assert caught.value.param == param, caught.value


@pytest.mark.parametrize("keywords,message", [
    ({"budjet": "3"}, "centroid has no parameter `budjet`: did you mean `budget`?"),
    ({"budget": "3", "segmnt_size": 2}, "no parameter `segmnt_size`: did you mean "
                                        "`segment_size`?"),
    ({"budget": "3", "rescor": 2}, "no parameter `rescor`: did you mean `rescore`?"),
    ({"budget": "3", "k": 2}, "centroid has no parameter `k` (its parameters are"),
])
def test_a_misspelt_keyword_is_named_with_the_closest(ix, keywords, message):
    with pytest.raises(InputError) as caught:
        ix.select("centroid", task=TASK, **keywords)
    assert message in str(caught.value)
    assert "needs a budget" not in str(caught.value)


def test_a_misspelt_build_or_train_keyword_is_named_with_the_closest(tmp_path, selection):
    with pytest.raises(InputError, match="unknown keyword `segmnt_size`: did you mean "
                                         "`segment_size`"):
        tapt.Index.build([selection.path], tmp_path / "o", segmnt_size=3)
    with pytest.raises(InputError, match="unknown keyword `stps`: did you mean `steps`"):
        tapt.train(selection.path, tmp_path / "m", stps=3)


def test_select_keywords_are_those_of_index_select():
    import inspect

    from tapt.api.options import settings_keywords
    from tapt.retriever.selections.make import SELECT_KEYWORDS

    names = [n for n, p in inspect.signature(tapt.Index.select).parameters.items()
             if p.kind is p.KEYWORD_ONLY or n in ("task", "budget")]
    assert sorted(SELECT_KEYWORDS) == sorted({*names, *settings_keywords("select")})


def test_info_of_an_index_deleted_after_it_was_opened(fake_index, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(fake_index, copy)
    opened = tapt.Index.open(copy)
    shutil.rmtree(copy)
    with pytest.raises(IndexFormatError, match="cannot be listed any more .*open it again"):
        opened.info()
