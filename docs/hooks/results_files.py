"""MkDocs hook: the benchmark results' pictures and JSON are part of the site.

Every `.png` and `.json` under `benchmarks/results/` is published at the same path
(`benchmarks/results/...`), so the results pages (which include the results' Markdown with
`--8<--`) show the plots and link the raw numbers without a copy in `docs/`.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

RESULTS = "benchmarks/results"
SUFFIXES = (".png", ".json")


def on_files(files, config):
    root = Path(config["config_file_path"]).parent
    for path in sorted((root / RESULTS).rglob("*")):
        if path.is_file() and path.suffix in SUFFIXES:
            files.append(File.generated(config, path.relative_to(root).as_posix(),
                                        abs_src_path=str(path)))
    return files
