#!/usr/bin/env python
"""Run the `tapt` command line in a fresh process with tests/conftest.py's hashing encoder in
place of the model, as a user would run it (a signal kills only this process, and the caller
sees it as a negative exit status).

    python tests/hashing_cli.py select centroid IDX --task t.txt --budget 3 --out s.jsonl
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def patch_encoder() -> None:
    """Every model the CLI loads becomes the deterministic hashing encoder."""
    import tapt.indexer.encoder
    from conftest import HashingEncoder

    tapt.indexer.encoder.load_encoder = (
        lambda spec=None, device="auto", backend="auto", threads=None: HashingEncoder())


def main(argv: list[str]) -> None:
    patch_encoder()
    from tapt.cli import cli

    cli.main(args=argv, prog_name="tapt")


if __name__ == "__main__":
    main(sys.argv[1:])
