"""MkDocs hook: the benchmark results' pictures and JSON are part of the site, and the site
builds from any working directory.

Every `.png` and `.json` under `benchmarks/results/` is published at the same path
(`benchmarks/results/...`), so the results pages (which include the results' Markdown with
`--8<--`) show the plots and link the raw numbers without a copy in `docs/`. The snippets'
`base_path` (the repository root, where README.md and benchmarks/ are) is taken relative to
mkdocs.yml, not to the working directory: `mkdocs build -f /path/to/tapt/mkdocs.yml` works from
anywhere.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

RESULTS = "benchmarks/results"
SUFFIXES = (".png", ".json")


def on_config(config):
    root = Path(config["config_file_path"]).parent
    snippets = config["mdx_configs"].get("pymdownx.snippets")
    if snippets is not None:
        bases = snippets.get("base_path", ["."])
        bases = [bases] if isinstance(bases, str) else bases
        snippets["base_path"] = [str(root / base) for base in bases]
    return config


def on_files(files, config):
    root = Path(config["config_file_path"]).parent
    for path in sorted((root / RESULTS).rglob("*")):
        if path.is_file() and path.suffix in SUFFIXES:
            files.append(File.generated(config, path.relative_to(root).as_posix(),
                                        abs_src_path=str(path)))
    return files
