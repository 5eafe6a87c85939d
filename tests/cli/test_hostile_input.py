"""Every hostile input and fault of tests/support/hostile_cases.py gets its stated outcome: one clear
error line, a non-zero exit, nothing left behind and every user file kept, or a documented
success; never a signal, a traceback or a silent wrong answer."""

from __future__ import annotations

import pytest

import tapt.indexer.encoding.encoder
from hostile_cases import CASES, run_case, verdict


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_input(case, tmp_path, monkeypatch):
    def patch(encoder_cls):
        monkeypatch.setattr(tapt.indexer.encoding.encoder, "load_encoder",
                            lambda spec=None, device="auto", backend="auto", threads=None, **_: encoder_cls())

    outcome = run_case(case, tmp_path, patch)
    if outcome.code is None:
        pytest.skip("this fault needs root (a tmpfs or read-only mount) here")
    assert verdict(case, outcome) == "as documented", (outcome.code, outcome.output,
                                                         outcome.left, outcome.lost)
