#!/usr/bin/env python
"""Try every hostile input of tests/hostile_cases.py through the CLI; write what happened.

    python benchmarks/hostile_input.py      # -> benchmarks/results/hostile_input.md

The model is replaced by the deterministic hashing encoder (reading at most 64 words of a
sentence), so the run is fast and the outcomes are about input handling, not the model.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

import tapt.indexer.encoder  # noqa: E402
from hostile_cases import CASES, run_case  # noqa: E402


def main() -> None:
    out = REPO / "benchmarks" / "results" / "hostile_input.md"
    rows, failures = [], 0

    def patch(cls):
        tapt.indexer.encoder.load_encoder = lambda spec=None, device="auto", backend="auto", threads=None: cls()

    for case in CASES:
        with tempfile.TemporaryDirectory(prefix="tapt-hostile-") as tmp:
            t0 = time.perf_counter()
            code, output, left = run_case(case, Path(tmp), patch)
            seconds = time.perf_counter() - t0
        kind, expected = case.expect.split(": ", 1)
        good = expected in output and (code == 0) == (kind == "ok") and (kind == "ok" or not left)
        failures += not good
        shown = output.replace(tmp, "TMP").replace("|", "\\|").splitlines()[0][:220]
        rows.append(f"| {case.name} | {code} | `{shown}` | {(', '.join(left) or 'none') if kind == 'error' else '-'}"
                    f" | {seconds:.1f} | {'as documented' if good else 'UNEXPECTED'} |")
        print(rows[-1], flush=True)
    lines = ["# Hostile input (`benchmarks/hostile_input.py`)", "",
             "Each input was made on purpose and run through the `tapt` CLI (hashing encoder in "
             "place of the model). Exit 1 = one `Error:` line; \"left behind\" lists any file or "
             "directory a failed command created (must be none).", "",
             "| input | exit | output (first line) | left behind | s | verdict |",
             "|---|---:|---|---|---:|---|", *rows, "",
             f"{len(CASES) - failures} of {len(CASES)} as documented.", ""]
    out.write_text("\n".join(lines))
    if failures:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
