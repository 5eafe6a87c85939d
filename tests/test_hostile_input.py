"""Every hostile input of tests/hostile_cases.py gets its stated outcome: one clear error line,
a non-zero exit and nothing written, or a documented success."""

from __future__ import annotations

import pytest

import tapt.indexer.encoder
from hostile_cases import CASES, run_case


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_input(case, tmp_path, monkeypatch):
    def patch(encoder_cls):
        monkeypatch.setattr(tapt.indexer.encoder, "load_encoder",
                            lambda spec=None, device="auto", backend="auto", threads=None: encoder_cls())

    code, output, left = run_case(case, tmp_path, patch)
    kind, expected = case.expect.split(": ", 1)
    assert expected in output, output
    if kind == "error":
        assert code == 1, output
        assert output.startswith("Error: ") and "\n" not in output, output
        assert left == [], f"a failed command left {left}"
    else:
        assert code == 0, output
