"""Labelled classification tasks for `tapt bench downstream`, made from the corpus's seed files.

The seed files (`<seeds>/<domain>.jsonl.gz`) are held out from the pool by document, so their
sentences are never in an index of the pool: a task made from them can be selected for without
its own examples being selectable, and the pool's rows of the same domain are its oracle
(`--oracle-field domain --oracle-value DOMAIN`). Labels come from the corpus fields:

- `quotes`: the fortune file a quotation comes from (`source` "fortunes:science" -> science);
- `it`: the manual section of a man page (`doc` "man:ioctl.2" -> 2).

The `classes` most frequent labels (by sentences) among those with at least `min_docs` documents
are kept; every row keeps its `doc`, so `--group-field doc` keeps each document on one side of
the train/test split.

    python benchmarks/downstream_tasks.py quotes --out quotes-labelled.jsonl
    python benchmarks/downstream_tasks.py it --classes 3 --seeds data/sample/seeds --out it.jsonl
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import sys
from pathlib import Path

DEFAULT_SEEDS = Path(__file__).resolve().parents[1] / "data" / "sample" / "seeds"


def label_of(domain: str, record: dict) -> str | None:
    """The label of one seed record for a task (None: not labelled)."""
    if domain == "quotes":
        source = str(record.get("source") or "")
        return source.split(":", 1)[1] if source.startswith("fortunes:") else None
    if domain == "it":
        doc = str(record.get("doc") or "")
        if doc.startswith("man:") and "." in doc:
            section = doc.rsplit(".", 1)[1]
            return section if section.isdigit() else None
        return None
    raise ValueError(f"no labelled task for domain {domain!r} (quotes or it)")


def make_task(domain: str, seeds: Path, classes: int, min_docs: int) -> list[dict]:
    """The labelled rows of a domain's seed file: text, label, doc, in file order."""
    path = seeds / f"{domain}.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh if line.strip()]
    rows = [{"text": r["text"], "label": label_of(domain, r), "doc": r["doc"]} for r in records]
    rows = [r for r in rows if r["label"] is not None]
    sentences = collections.Counter(r["label"] for r in rows)
    docs: dict[str, set] = collections.defaultdict(set)
    for r in rows:
        docs[r["label"]].add(r["doc"])
    eligible = [label for label, _ in sorted(sentences.items(), key=lambda kv: (-kv[1], kv[0]))
                if len(docs[label]) >= min_docs]
    keep = set(eligible[:classes])
    if len(keep) < 2:
        raise SystemExit(f"error: {domain} has fewer than two labels with {min_docs} documents")
    return [r for r in rows if r["label"] in keep]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("domain", choices=["quotes", "it"])
    parser.add_argument("--seeds", type=Path, default=DEFAULT_SEEDS,
                        help="Directory of <domain>.jsonl.gz seed files (default: the bundled "
                             "sample's, byte-identical to the corpus's).")
    parser.add_argument("--classes", type=int, default=4, help="Most frequent labels kept.")
    parser.add_argument("--min-docs", type=int, default=8,
                        help="Only labels with at least this many documents.")
    parser.add_argument("--out", type=Path, required=True, help="JSONL to write (new file).")
    args = parser.parse_args(argv)
    if args.out.exists():
        print(f"error: {args.out} exists; choose a new file", file=sys.stderr)
        return 1
    rows = make_task(args.domain, args.seeds, args.classes, args.min_docs)
    tmp = args.out.with_name(args.out.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    tmp.rename(args.out)
    counts = collections.Counter(r["label"] for r in rows)
    docs = {k: len({r["doc"] for r in rows if r["label"] == k}) for k in counts}
    print(f"{len(rows)} rows -> {args.out}: "
          + ", ".join(f"{k} {v} ({docs[k]} docs)" for k, v in counts.most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
