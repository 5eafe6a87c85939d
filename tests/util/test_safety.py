"""`tapt.util.safety.check_output`: outputs never replace inputs or files tapt did not make."""

from __future__ import annotations

import json

import pytest

from tapt.errors import OutputError
from tapt.util.safety import check_output, enclosing_index


def _index(path):
    path.mkdir()
    (path / "manifest.json").write_text(json.dumps({"format": "tapt-index"}))
    return path


def test_an_output_is_never_an_input(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("x")
    for out in (corpus / "a.txt", corpus / "idx", corpus, tmp_path):
        with pytest.raises(OutputError):
            check_output(out, what="index", inputs=[corpus], directory=True, overwrite=True)


def test_nothing_inside_an_index_is_written(tmp_path):
    idx = _index(tmp_path / "idx")
    assert enclosing_index(idx / "manifest.json") == idx.resolve()
    for out in (idx / "manifest.json", idx / "sel.jsonl"):
        with pytest.raises(OutputError, match="inside the tapt index"):
            check_output(out, what="selection", overwrite=True)


def test_foreign_files_and_directories_are_never_replaced(tmp_path):
    """Whatever the flags: `overwrite` replaces only a file tapt made that changed since."""
    thesis = tmp_path / "thesis.tex"
    thesis.write_text("years of work")
    for overwrite in (False, True):
        with pytest.raises(OutputError, match="never replaces a file it did not write"):
            check_output(thesis, what="selection", overwrite=overwrite)
    with pytest.raises(OutputError, match="may have been changed since; pass `overwrite`"):
        check_output(thesis, what="selection", made=lambda p: True)
    assert check_output(thesis, what="selection", overwrite=True,
                        made=lambda p: True) == thesis.resolve()
    folder = tmp_path / "papers"
    folder.mkdir()
    (folder / "thesis.tex").write_text("years of work")
    with pytest.raises(OutputError, match="never replaced"):
        check_output(folder, what="index", directory=True, overwrite=True)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert check_output(empty, what="index", directory=True) == empty.resolve()


def test_our_own_artefacts_are_replaced(tmp_path):
    idx = _index(tmp_path / "idx")
    with pytest.raises(OutputError, match="already holds"):
        check_output(idx, what="index", directory=True, ours=lambda p: True,
                     ours_needs_overwrite=True)
    assert check_output(idx, what="index", directory=True, ours=lambda p: True,
                        ours_needs_overwrite=True, overwrite=True) == idx.resolve()


def test_cli_wording_names_flags():
    err = OutputError("x exists; pass `overwrite` to replace it", param="out")
    assert str(err) == "out: x exists; pass `overwrite` to replace it"
    assert err.render(lambda n: "--" + n) == "--out: x exists; pass --overwrite to replace it"


def test_paths_the_system_cannot_use_are_one_error(fake_index, medical_task, tmp_path):
    from click.testing import CliRunner

    from tapt.cli import cli

    long = str(tmp_path / ("x" * 300))
    runner = CliRunner()
    cases = [
        (["select", "centroid", str(fake_index), "--task", long, "--budget", "0.1", "--out",
          str(tmp_path / "s.jsonl")], "cannot be opened (File name too long)"),
        (["select", "centroid", str(fake_index), "--task", str(medical_task), "--budget", "0.1",
          "--out", long], "cannot be used (File name too long)"),
        (["index", "build", str(medical_task), "--out", long],
         "cannot be used (File name too long)"),
        (["index", "build", long, "--out", str(tmp_path / "idx")],
         "cannot be opened (File name too long)"),
    ]
    for args, message in cases:
        result = runner.invoke(cli, ["-q", *args], obj={"progress": False})
        lines = result.output.strip().splitlines()
        assert result.exit_code != 0 and len(lines) == 1 and lines[0].startswith("Error:"), args
        assert message in lines[0] and "internal error" not in lines[0], lines[0]
    assert not (tmp_path / "s.jsonl").exists() and not (tmp_path / "idx").exists()
