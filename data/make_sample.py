"""Rebuild the bundled sample from ../shared/data/multidomain (run from the repository root).

The pool's documents are shuffled with a fixed seed, so a prefix of the file is a fair sample of
every domain: the sample is the first whole documents holding SAMPLE_SENTENCES sentences.
Seed files are copied byte for byte.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

SAMPLE_SENTENCES = 20_000


def main(shared: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    kept, last_doc = 0, None
    with gzip.open(shared / "pool.jsonl.gz", "rt", encoding="utf-8") as src, \
            gzip.GzipFile(out / "pool.jsonl.gz", "wb", mtime=0) as raw:
        for line in src:
            doc = json.loads(line)["doc"]
            if kept >= SAMPLE_SENTENCES and doc != last_doc:
                break
            raw.write(line.encode("utf-8"))
            kept, last_doc = kept + 1, doc
    (out / "seeds").mkdir(exist_ok=True)
    for seed in sorted((shared / "seeds").glob("*.jsonl.gz")):
        shutil.copyfile(seed, out / "seeds" / seed.name)


if __name__ == "__main__":
    shared = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("../shared/data/multidomain")
    main(shared, Path("data/sample"))
