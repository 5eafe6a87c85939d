"""An output path that is a symbolic link is refused, for files and directories alike: tapt
never writes through a link (`latest.jsonl` -> an archived run) nor replaces it; links among
the parent directories are fine (issue 27, class 6)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hashing_cli import idx, one_error, run  # noqa: F401 - fixtures
from tapt.errors import OutputError
from tapt.util.safety import check_output


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


@pytest.fixture()
def archive(run, fake_index, medical_task, tmp_path):
    """An archive of an earlier run's selection, and `latest.jsonl` linking to it."""
    folder = tmp_path / "archive"
    folder.mkdir()
    result = run("select", "centroid", fake_index, "--task", medical_task, "--budget", "5",
                 "--out", folder / "run1.jsonl")
    assert result.exit_code == 0, result.output
    (tmp_path / "latest.jsonl").symlink_to(folder / "run1.jsonl")
    return folder


def test_select_never_writes_through_a_link_to_an_archived_run(run, fake_index, medical_task,
                                                               tmp_path, archive):
    before = _snapshot(archive)
    for extra in ((), ("--overwrite",)):
        result = run("select", "centroid", fake_index, "--task", medical_task, "--budget", "9",
                     "--out", tmp_path / "latest.jsonl", *extra)
        line = one_error(result, "--out", "latest.jsonl is a symbolic link", "run1.jsonl")
        assert "remove the link yourself" in line
    assert _snapshot(archive) == before
    assert (tmp_path / "latest.jsonl").is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["archive", "latest.jsonl"]


def test_a_dangling_link_is_refused_and_nothing_is_created(run, fake_index, medical_task,
                                                           tmp_path):
    (tmp_path / "new.jsonl").symlink_to(tmp_path / "nowhere" / "x.jsonl")
    result = run("select", "centroid", fake_index, "--task", medical_task, "--budget", "5",
                 "--out", tmp_path / "new.jsonl")
    one_error(result, "symbolic link")
    assert not (tmp_path / "nowhere").exists()
    assert os.readlink(tmp_path / "new.jsonl") == str(tmp_path / "nowhere" / "x.jsonl")


def test_a_link_where_the_selection_manifest_goes_is_refused(run, fake_index, medical_task,
                                                             tmp_path, archive):
    before = _snapshot(archive)
    manifest = next(p for p in archive.iterdir() if p.name != "run1.jsonl")
    beside = tmp_path / manifest.name.replace("run1", "new")
    beside.symlink_to(manifest)
    result = run("select", "centroid", fake_index, "--task", medical_task, "--budget", "5",
                 "--out", tmp_path / "new.jsonl")
    one_error(result, "symbolic link")
    assert _snapshot(archive) == before and not (tmp_path / "new.jsonl").exists()


@pytest.mark.parametrize("fmt", ["jsonl", "txt", "parquet", "hf"])
def test_export_never_writes_through_a_link(run, tmp_path, archive, fmt):
    sel = archive / "run1.jsonl"
    old = tmp_path / f"old.{fmt}"
    result = run("export", sel, "--format", fmt, "--out", old)
    assert result.exit_code == 0, result.output
    link = tmp_path / f"last.{fmt}"
    link.symlink_to(old, target_is_directory=fmt == "hf")
    before = _snapshot(tmp_path)
    for extra in ((), ("--overwrite",)):
        one_error(run("export", sel, "--format", fmt, "--out", link, *extra), "symbolic link")
    assert _snapshot(tmp_path) == before and link.is_symlink()


def test_train_and_plot_refuse_a_linked_output(run, fake_index, tmp_path, archive):
    runs = tmp_path / "runs"
    (runs / "old").mkdir(parents=True)
    (runs / "old" / "notes.txt").write_text("an earlier run")
    (runs / "latest").symlink_to(runs / "old", target_is_directory=True)
    result = run("train", "--selection", archive / "run1.jsonl", "--steps", "1",
                 "--out", runs / "latest")
    one_error(result, "--out", "symbolic link")
    assert sorted(p.name for p in (runs / "old").iterdir()) == ["notes.txt"]
    png = tmp_path / "map.png"
    png.write_bytes(b"an earlier picture")
    (tmp_path / "latest.png").symlink_to(png)
    one_error(run("plot", "domains", fake_index, "--out", tmp_path / "latest.png"),
              "symbolic link")
    assert png.read_bytes() == b"an earlier picture"


def test_index_build_refuses_a_linked_output(run, labelled_corpus, tmp_path):
    (tmp_path / "old-index").mkdir()
    (tmp_path / "idx").symlink_to(tmp_path / "old-index", target_is_directory=True)
    for extra in ((), ("--overwrite",)):
        one_error(run("index", "build", labelled_corpus[0], "--out", tmp_path / "idx", *extra),
                  "symbolic link")
    assert list((tmp_path / "old-index").iterdir()) == []


def test_links_among_parent_directories_are_fine(run, fake_index, medical_task, tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "via").symlink_to(tmp_path / "real", target_is_directory=True)
    result = run("select", "centroid", fake_index, "--task", medical_task, "--budget", "5",
                 "--out", tmp_path / "via" / "sel.jsonl")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "real" / "sel.jsonl").is_file()


def test_check_output_refuses_links_to_files_and_directories(tmp_path):
    (tmp_path / "f").write_text("x")
    (tmp_path / "d").mkdir()
    (tmp_path / "lf").symlink_to(tmp_path / "f")
    (tmp_path / "ld").symlink_to(tmp_path / "d", target_is_directory=True)
    with pytest.raises(OutputError, match="symbolic link"):
        check_output(tmp_path / "lf", what="selection", overwrite=True)
    with pytest.raises(OutputError, match="symbolic link"):
        check_output(tmp_path / "ld", what="index", directory=True, overwrite=True)


@pytest.mark.parametrize("command", ["add", "reindex"])
def test_commands_that_rewrite_an_index_keep_a_link_to_it(run, idx, tmp_path, command):
    """IDX is the index itself, not an output path: the index it names is updated, and the
    link stays a link (swapping a generation in at the link's name would replace it)."""
    link = tmp_path / "current"
    link.symlink_to(idx, target_is_directory=True)
    if command == "add":
        more = tmp_path / "more.jsonl"
        more.write_text('{"text": "A new document about kidneys and fever."}\n')
        result = run("index", "add", link, more)
    else:
        result = run("index", "reindex", link, "--index", "flat")
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and os.readlink(link) == str(idx)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    if command == "add":
        assert (idx / "shards" / "000001").is_dir()       # the real index got the new shard
