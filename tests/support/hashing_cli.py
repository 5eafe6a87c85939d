#!/usr/bin/env python
"""Run the `tapt` command line in a fresh process with tests/conftest.py's hashing encoder in
place of the model, as a user would run it (a signal kills only this process, and the caller
sees it as a negative exit status).

    python tests/support/hashing_cli.py select centroid IDX --task t.txt --budget 3 --out s.jsonl
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/: conftest
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the repository


def patch_encoder() -> None:
    """Every model the CLI loads becomes the deterministic hashing encoder."""
    import tapt.indexer.encoding.encoder
    from conftest import HashingEncoder

    tapt.indexer.encoding.encoder.load_encoder = (
        lambda spec=None, device="auto", backend="auto", threads=None, **_: HashingEncoder())


def main(argv: list[str]) -> None:
    sys.argv = ["tapt", *argv]      # as the console script: its signal handlers from the start
    from tapt.cli import main as tapt_main

    patch_encoder()
    tapt_main()


if __name__ == "__main__":
    main(sys.argv[1:])


# ----------------------------------------------------------------- helpers for the tests

def _fixtures():
    import shutil

    import pytest
    from click.testing import CliRunner

    @pytest.fixture()
    def run(monkeypatch):
        """Invoke the CLI in-process (quiet) with the hashing encoder; a traceback fails."""
        import tapt.indexer.encoding.encoder
        from conftest import HashingEncoder
        from tapt.cli import cli

        monkeypatch.setattr(tapt.indexer.encoding.encoder, "load_encoder",
                            lambda spec=None, device="auto", backend="auto", threads=None, **_:
                            HashingEncoder())

        def invoke(*argv):
            result = CliRunner().invoke(cli, ["-q", *map(str, argv)])
            assert result.exception is None or isinstance(result.exception, SystemExit), \
                result.output
            return result
        return invoke

    @pytest.fixture()
    def idx(fake_index, tmp_path):
        """A private copy of the session's fake index, to damage."""
        out = tmp_path / "idx"
        shutil.copytree(fake_index, out)
        return out

    return run, idx


run, idx = _fixtures()


def one_error(result, *expected: str) -> str:
    """The command failed with exit status 1 and exactly one `Error:` line (warnings aside)
    holding every `expected` text; returns that line."""
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.strip().splitlines()
             if not line.startswith("WARNING")]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]
