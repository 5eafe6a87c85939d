"""States an index (or the process using it) can be left in, and what tapt makes of them: the
records a killed build leaves are known as tapt's own, `index verify` running while a new
generation is swapped in, shard folders the manifest does not list, a full cache, a process
forked after torch ran."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

import tapt
from tapt.errors import TaptError


def test_every_record_a_build_writes_is_known_as_tapts_own():
    """A build killed after a stage leaves its records in the work folder: each must be one
    tapt knows, or `--restart` (and the next build) takes the folder for someone else's."""
    from tapt.indexer.building import checkpoint, stages
    from tapt.indexer.store.manifest import INDEX_ENTRIES, SHARD_ENTRIES

    assert {stages.TRAINED, stages.TRAIN_RECORD, checkpoint.PLAN} <= INDEX_ENTRIES
    assert {stages.PREPARED, stages.EMBEDDED, stages.PARTS} <= SHARD_ENTRIES


def test_verify_while_a_new_generation_is_swapped_in_reports_the_sound_index(fake_index,
                                                                            tmp_path,
                                                                            monkeypatch):
    from tapt.indexer.building import verify
    from tapt.indexer.building.reindex import reindex

    idx = tmp_path / "idx"
    shutil.copytree(fake_index, idx)
    real, swapped = verify.read_shard_manifest, []

    def swap_midway(*args, **kwargs):
        if not swapped:         # the top manifest is read: now another command swaps
            swapped.append(True)
            reindex(idx, "hnsw", progress=False)
        return real(*args, **kwargs)

    monkeypatch.setattr(verify, "read_shard_manifest", swap_midway)
    report = verify.verify_index(idx)
    assert swapped and report.ok, [f for f in report.findings if not f.ok]


def test_verify_names_shard_folders_the_manifest_does_not_list(fake_index, tmp_path):
    idx = tmp_path / "idx"
    shutil.copytree(fake_index, idx)
    shutil.copytree(idx / "shards" / "000000", idx / "shards" / "000001")
    report = tapt.Index.verify_path(idx, progress=False)
    bad = [f for f in report.findings if not f.ok]
    assert [f.check for f in bad] == ["unlisted shards"], bad
    assert "000001" in bad[0].detail and "move 000001 out of" in bad[0].repair


def test_a_full_cache_keeps_the_onnx_export_for_the_process(tmp_path, monkeypatch, caplog):
    from tapt.indexer.encoding import onnx_export

    cache = tmp_path / "cache"
    monkeypatch.setenv("TAPT_CACHE_DIR", str(cache))

    def export(model, work, variant):
        if cache in work.parents:       # the cache's disk is full
            try:
                raise OSError(errno.ENOSPC, "No space left on device")
            except OSError as exc:
                raise TaptError("cannot export this model to ONNX (OSError)") from exc
        (work / "model.onnx").write_bytes(b"onnx")
        return {"variant": variant}

    monkeypatch.setattr(onnx_export, "_export", export)
    path = onnx_export.ensure_onnx(lambda: None, "f" * 64, "onnx")
    assert path.is_file() and cache not in path.parents
    assert "cannot be kept in the tapt cache" in caplog.text and "No space left" in caplog.text

    def broken(model, work, variant):
        raise TaptError("cannot export this model to ONNX (ValueError: unsupported)")

    monkeypatch.setattr(onnx_export, "_export", broken)
    with pytest.raises(TaptError, match="unsupported"):     # not a disk: still refused
        onnx_export.ensure_onnx(lambda: None, "e" * 64, "onnx")


def test_a_process_forked_after_torch_ran_can_use_torch(tmp_path):
    """GNU OpenMP's pool does not survive a fork: a child's first parallel region waited
    forever for the parent's threads (a select in a forked worker hung)."""
    pytest.importorskip("torch")
    script = textwrap.dedent("""
        import os, tapt, torch
        torch.set_num_threads(2)
        a = torch.ones(512, 512)
        (a @ a).sum()                       # the parent's OpenMP pool starts
        pid = os.fork()
        if pid == 0:
            (a @ a).sum()                   # the child's first parallel region
            os._exit(0)
        print(os.waitpid(pid, 0)[1])
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)     # the parent and its hung child
        proc.communicate()
        pytest.fail("the forked child hung in torch")
    assert proc.returncode == 0 and out.strip() == "0", err[-2000:]

