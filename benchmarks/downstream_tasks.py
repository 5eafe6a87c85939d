"""Labelled classification tasks for `tapt bench downstream`, made from the corpus's seed files.

The seed files (`<seeds>/<domain>.jsonl.gz`) are held out from the pool by document, so their
sentences are never in an index of the pool: a task made from them can be selected for without
its own examples being selectable, and the pool's rows of the same domain are its oracle
(`--oracle-field domain --oracle-value DOMAIN`). Labels come from the corpus fields:

- `quotes`: the fortune file a quotation comes from (`source` "fortunes:science" -> science);
- `it`: the manual section of a man page (`doc` "man:ioctl.2" -> 2);
- `religion`: the part of the Bible a chapter belongs to (`doc` "kjv:Exo21" -> law): law (the
  five books of Moses), history, wisdom (Job to the Song of Solomon), prophets, and the New
  Testament - the usual division of the canon, fixed here before any run.

The `classes` most frequent labels (by sentences) among those with at least `min_docs` documents
are kept (by default 8 for quotes, every eligible one for it and religion); every row keeps its
`doc`, so `--group-field doc` keeps each document in one fold.

    python benchmarks/downstream_tasks.py quotes --out quotes-labelled.jsonl
    python benchmarks/downstream_tasks.py it --seeds data/sample/seeds --out it.jsonl
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import re
import sys
from pathlib import Path

DEFAULT_SEEDS = Path(__file__).resolve().parents[1] / "data" / "sample" / "seeds"
TASKS = ("quotes", "it", "religion")
CLASSES = {"quotes": 8, "it": 10, "religion": 10}     # the labels kept by default (at most)
BIBLE_PARTS = {
    "law": "Ge Exo Lev Num Deu",
    "history": "Josh Jdgs Ruth 1Sm 2Sm 1Ki 2Ki 1Chr 2Chr Ezra Neh Est",
    "wisdom": "Job Psa Prv Eccl SSol",
    "prophets": "Isa Jer Lam Eze Dan Hos Joel Amos Obad Jonah Mic Nahum Hab Zep Hag Zec Mal",
    "new-testament": "Mat Mark Luke John Acts Rom 1Cor 2Cor Gal Eph Phi Col 1Th 2Th 1Tim 2Tim "
                     "Titus Phmn Heb Jas 1Pet 2Pet 1Jn 2Jn 3Jn Jude Rev",
}
_PART_OF = {book: part for part, books in BIBLE_PARTS.items() for book in books.split()}


def label_of(domain: str, record: dict) -> str | None:
    """The label of one seed record for a task (None: not labelled)."""
    if domain == "quotes":
        source = str(record.get("source") or "")
        return source.split(":", 1)[1] if source.startswith("fortunes:") else None
    doc = str(record.get("doc") or "")
    if domain == "it":
        if doc.startswith("man:") and "." in doc:
            section = doc.rsplit(".", 1)[1]
            return section if section.isdigit() else None
        return None
    if domain == "religion":
        book = re.match(r"kjv:(\d?[A-Za-z]+)", doc)
        return _PART_OF.get(book.group(1)) if book else None
    raise ValueError(f"no labelled task for domain {domain!r} ({', '.join(TASKS)})")


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
    parser.add_argument("domain", choices=list(TASKS))
    parser.add_argument("--seeds", type=Path, default=DEFAULT_SEEDS,
                        help="Directory of <domain>.jsonl.gz seed files (default: the bundled "
                             "sample's, byte-identical to the corpus's).")
    parser.add_argument("--classes", type=int, default=None,
                        help="Most frequent labels kept [default: 8 for quotes, all for the "
                             "others].")
    parser.add_argument("--min-docs", type=int, default=8,
                        help="Only labels with at least this many documents.")
    parser.add_argument("--out", type=Path, required=True, help="JSONL to write (new file).")
    args = parser.parse_args(argv)
    if args.out.exists():
        print(f"error: {args.out} exists; choose a new file", file=sys.stderr)
        return 1
    rows = make_task(args.domain, args.seeds, args.classes or CLASSES[args.domain],
                     args.min_docs)
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
