"""Large per-row arrays on scratch files (`tapt.util.spill`): plain writable arrays, nothing left
behind, and memory instead of a failure when no scratch file can be made."""

from __future__ import annotations

import errno
import logging
import mmap
import os
import pickle

import numpy as np
import pytest

from tapt.util import spill


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    monkeypatch.setenv("TAPT_SCRATCH_DIR", str(tmp_path))
    monkeypatch.setenv("TAPT_SPILL_BYTES", "1M")
    return tmp_path


def test_large_arrays_are_mapped_scratch_files_that_leave_nothing(scratch):
    before = spill.spilled_total()
    a = spill.empty(1 << 20, np.int32)              # 4 MiB >= 1 MiB
    assert isinstance(a.base, memoryview) or isinstance(a.base, mmap.mmap)
    assert type(a) is np.ndarray and a.flags.writeable and a.dtype == np.int32
    a[:] = np.arange(len(a), dtype=np.int32)
    assert int(a[[0, 7, len(a) - 1]].sum()) == 7 + len(a) - 1
    assert spill.spilled_total() - before == 4 << 20
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(a[:5])), np.arange(5))
    assert list(scratch.iterdir()) == []            # unlinked before use


def test_small_arrays_and_off_stay_in_memory(scratch, monkeypatch):
    assert spill.empty(10, np.float32).base is None
    assert spill.empty(0, np.int64).shape == (0,)
    monkeypatch.setenv("TAPT_SPILL_BYTES", "off")
    assert spill.empty(1 << 20, np.int64).base is None


def test_no_room_keeps_the_array_in_memory_with_a_warning(scratch, monkeypatch, caplog):
    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", full)
    monkeypatch.setattr(spill, "warn_once", lambda key, msg, *a: logging.getLogger(
        "tapt.util.spill").warning(msg, *a))
    with caplog.at_level(logging.WARNING):
        a = spill.empty(1 << 20, np.float32)
    assert a.base is None and a.shape == (1 << 20,)
    assert "no scratch file" in caplog.text and "TAPT_SCRATCH_DIR" in caplog.text
    assert list(scratch.iterdir()) == []


def test_without_posix_fallocate_the_blocks_are_written(scratch, monkeypatch):
    monkeypatch.delattr(os, "posix_fallocate")          # as on macOS
    a = spill.empty(1 << 20, np.int16)
    assert isinstance(a.base, (memoryview, mmap.mmap)) and a.flags.writeable
    a[:] = 5
    assert int(a.sum()) == 5 << 20 and list(scratch.iterdir()) == []


def test_a_missing_scratch_directory_keeps_the_array_in_memory(tmp_path, monkeypatch):
    monkeypatch.setenv("TAPT_SCRATCH_DIR", str(tmp_path / "absent"))
    monkeypatch.setenv("TAPT_SPILL_BYTES", "0")
    a = spill.empty(100, np.int64)
    a[:] = 3
    assert a.base is None and int(a.sum()) == 300
    assert not (tmp_path / "absent").exists()


def test_a_bad_threshold_is_an_input_error(monkeypatch):
    from tapt.errors import InputError

    monkeypatch.setenv("TAPT_SPILL_BYTES", "lots")
    with pytest.raises(InputError, match="TAPT_SPILL_BYTES='lots'"):
        spill.empty(10, np.int8)
