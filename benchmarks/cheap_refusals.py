#!/usr/bin/env python
"""How fast the refusals that need no model answer: each case runs the `tapt` command line in a
fresh process, as a user would (the real packaged model, nothing replaced), on a mistake that can
be refused from files, manifests and options alone (model identity from the model folder's files,
index compatibility, selection files, fields, labels, option values), and records its exit
status, its one `Error:` line and its wall time beside the machine's load.

    python -m benchmarks.cheap_refusals                  # -> benchmarks/results/cheap_refusals.md
    python -m benchmarks.cheap_refusals --repeats 3 --limit 3

Every case must exit non-zero with exactly one `Error:` line (the expected words in it) within
`--limit` seconds (the median of `--repeats` runs); the script exits 1 otherwise. The setup (a
200-sentence index built with the packaged model, a copy of it built from a copy of the model
folder that is then moved away, a tiny BERT of another architecture, selections) is made once
under a temporary folder and is not timed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "data" / "sample"
sys.path.insert(0, str(REPO / "tests" / "support"))     # the tests' tiny model (tiny_model.py)
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


@dataclass
class Refusal:
    group: str
    name: str
    argv: Callable[[Path], list[str]]
    expect: str


def _tapt() -> list[str]:
    found = shutil.which("tapt", path=str(Path(sys.executable).parent))
    return [found] if found else [sys.executable, "-m", "tapt.cli"]


def _run(argv: list[str], cwd: Path) -> tuple[int, str, float]:
    t0 = time.perf_counter()
    done = subprocess.run([*_tapt(), *argv], cwd=cwd, env=ENV, capture_output=True, text=True)
    return done.returncode, (done.stdout + done.stderr).strip(), time.perf_counter() - t0


def _load() -> float:
    return os.getloadavg()[0]


def setup(work: Path) -> None:
    """The inputs every case reads (not timed)."""
    import tapt
    from tiny_model import write_tiny_bert

    with gzip.open(SAMPLE / "pool.jsonl.gz", "rt", encoding="utf-8") as src:
        lines = [next(src) for _ in range(200)]
    (work / "pool.jsonl").write_text("".join(lines), encoding="utf-8")
    with gzip.open(SAMPLE / "seeds" / "medical.jsonl.gz", "rt", encoding="utf-8") as src:
        (work / "task.jsonl").write_text("".join(next(src) for _ in range(30)), encoding="utf-8")
    (work / "other-task.txt").write_text("A task sentence never embedded before.\n")
    (work / "fields.jsonl").write_text('{"text": "Fine."}\n{"body": "x", "title": "y"}\n')
    (work / "task.md").write_text("Patient fever therapy dose.\n")
    common = ["--no-split", "--backend", "torch"]
    _check(_run(["-q", "index", "build", "pool.jsonl", "--out", "idx", *common], work))
    shutil.copytree(tapt.model_path(), work / "model-copy")
    _check(_run(["-q", "index", "build", "pool.jsonl", "--out", "idx-moved", "--model",
                 str(work / "model-copy"), *common], work))
    _check(_run(["-q", "select", "centroid", "idx-moved", "--task", "task.jsonl", "--budget",
                 "10", "--out", "moved.jsonl"], work))
    (work / "model-copy").rename(work / "model-moved-away")
    shutil.copytree(work / "idx", work / "idx-grown")
    more = work / "more.jsonl"
    more.write_text(json.dumps({"text": "Captain anchor harbour tide storm.", "doc": "m"}) + "\n")
    for name, task in (("sel.jsonl", "task.jsonl"), ("old.jsonl", "task.jsonl")):
        _check(_run(["-q", "select", "centroid", "idx", "--task", task, "--budget", "10",
                     "--out", name], work))
    _check(_run(["-q", "select", "centroid", "idx-grown", "--task", "task.jsonl", "--budget",
                 "10", "--out", "grown.jsonl"], work))
    _check(_run(["-q", "index", "add", "idx-grown", "more.jsonl"], work))
    _check(_run(["-q", "select", "centroid", "idx-grown", "--task", "task.jsonl", "--budget",
                 "10", "--out", "grown-after.jsonl"], work))
    _check(_run(["-q", "export", "sel.jsonl", "--out", "train.parquet"], work))
    shutil.copy(work / "sel.jsonl", work / "edited.jsonl")
    shutil.copy(work / "sel.jsonl.manifest.json", work / "edited.jsonl.manifest.json")
    with open(work / "edited.jsonl", "a", encoding="utf-8") as fh:
        fh.write("\n")
    shutil.copytree(work / "idx", work / "idx-newer")
    manifest = json.loads((work / "idx-newer" / "manifest.json").read_text())
    manifest["format_version"] = 99
    (work / "idx-newer" / "manifest.json").write_text(json.dumps(manifest))
    write_tiny_bert(work / "tiny-bert", ["the cat sat on the mat ."] * 10, hidden_size=32,
                    layers=2, max_positions=64)
    tapt.Index.open(work / "idx")        # the index opens: the cases are about the mistakes


def _check(result: tuple[int, str, float]) -> None:
    if result[0] != 0:
        raise SystemExit(f"setup failed: {result[1][-500:]}")


SELECT = ["select", "centroid", "idx", "--task", "other-task.txt", "--budget", "3",
          "--out", "s.jsonl"]
CASES = [
    Refusal("model identity", "select --model: a model of another architecture",
            lambda d: [*SELECT, "--model", "tiny-bert"], "is not the model"),
    Refusal("model identity", "select --model: a folder that does not exist",
            lambda d: [*SELECT, "--model", str(d / "no-such-model")], "no-such-model"),
    Refusal("model identity", "select on an index whose model folder was moved",
            lambda d: ["select", "centroid", "idx-moved", "--task", "other-task.txt",
                       "--budget", "3", "--out", "s.jsonl"], "model-copy"),
    Refusal("index compatibility", "select on an index of a newer format",
            lambda d: ["select", "centroid", "idx-newer", "--task", "task.jsonl", "--budget",
                       "3", "--out", "s.jsonl"], "upgrade tapt"),
    Refusal("index compatibility", "eval of a selection from another generation",
            lambda d: ["eval", "grown.jsonl", "--index", "idx-grown", "--label", "medical"],
            "another generation"),
    Refusal("selection files", "train on selections of two generations",
            lambda d: ["train", "--selection", "grown.jsonl", "--selection", "grown-after.jsonl",
                       "--steps", "1", "--out", "m"], "different generations"),
    Refusal("selection files", "train on selections of two indexes",
            lambda d: ["train", "--selection", "sel.jsonl", "--selection", "moved.jsonl",
                       "--steps", "1", "--out", "m"], "different indexes"),
    Refusal("selection files", "train --selection a Parquet export",
            lambda d: ["train", "--selection", "train.parquet", "--steps", "1", "--out", "m"],
            "a Parquet file"),
    Refusal("selection files", "export of an edited selection",
            lambda d: ["export", "edited.jsonl", "--out", "x.parquet"],
            "does not match its manifest"),
    Refusal("fields", "index build: a record without the text field",
            lambda d: ["index", "build", "fields.jsonl", "--out", "idx-fields"],
            "the record's fields: 'body', 'title'"),
    Refusal("fields", "select: a task file of an unknown format",
            lambda d: ["select", "centroid", "idx", "--task", "task.md", "--budget", "3",
                       "--out", "s.jsonl"], "unknown format"),
    Refusal("labels", "eval --label that does not occur",
            lambda d: ["eval", "sel.jsonl", "--index", "idx", "--label", "medicall"],
            "did you mean 'medical'"),
    Refusal("options", "select --budget 0",
            lambda d: [*SELECT[:-4], "--budget", "0", "--out", "s.jsonl"], "must be positive"),
    Refusal("options", "select knn --k 0",
            lambda d: ["select", "knn", "idx", "--task", "task.jsonl", "--k", "0", "--out",
                       "s.jsonl"], "--k: must be in the range"),
    Refusal("options", "select --task \"\" (an unset variable)",
            lambda d: ["select", "centroid", "idx", "--task", "", "--budget", "3", "--out",
                       "s.jsonl"], "empty path"),
    Refusal("options", "train --lr nan",
            lambda d: ["train", "--selection", "sel.jsonl", "--lr", "nan", "--steps", "1",
                       "--out", "m"], "--lr"),
    Refusal("options", "index build --segment-size 0",
            lambda d: ["index", "build", "pool.jsonl", "--out", "idx2", "--segment-size", "0"],
            "--segment-size"),
]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3, help="runs per case (the median counts)")
    p.add_argument("--limit", type=float, default=3.0, help="seconds a refusal may take")
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" /
                   "cheap_refusals.md")
    args = p.parse_args()
    rows, failed, started = [], [], time.strftime("%Y-%m-%d %H:%M")
    with tempfile.TemporaryDirectory(prefix="tapt-refusals-") as tmp, \
            tempfile.TemporaryDirectory(prefix="tapt-refusals-cache-") as cache:
        ENV["TAPT_CACHE_DIR"] = cache        # never the user's cache; every task embedded anew
        work = Path(tmp)
        t0 = time.perf_counter()
        setup(work)
        setup_s = time.perf_counter() - t0
        for case in CASES:
            runs, loads = [], []
            for _ in range(args.repeats):
                loads.append(_load())
                code, output, seconds = _run(["-q", *case.argv(work)], work)
                runs.append(seconds)
            lines = [line for line in output.splitlines() if line.strip()
                     and not line.startswith("WARNING")]
            one = len(lines) == 1 and lines[0].startswith("Error: ") and case.expect in output
            median = statistics.median(runs)
            ok = code != 0 and one and median <= args.limit
            if not ok:
                failed.append(case.name)
            shown = (lines[-1] if lines else "").replace(str(work), "TMP").replace("|", "\\|")
            rows.append({"group": case.group, "case": case.name, "exit": code,
                         "median_s": round(median, 2), "max_s": round(max(runs), 2),
                         "load": round(statistics.mean(loads), 1), "line": shown[:200],
                         "ok": ok})
            print(rows[-1], flush=True)
    total = sum(r["median_s"] for r in rows)
    machine = (f"{os.cpu_count()} CPU cores, Python {sys.version.split()[0]}, "
               f"{'root' if os.geteuid() == 0 else 'a normal user'}")
    md = ["# Cheap refusals (`benchmarks/cheap_refusals.py`)", "",
          "Every mistake that can be refused without loading a model, run through the `tapt` "
          "command line in a fresh process with the real packaged model (nothing replaced): "
          "the time is the whole command, interpreter start and imports included, the median "
          f"of {args.repeats} runs. The limit is {args.limit:g} s per case.", "",
          f"Run on {started} ({machine}); setup {setup_s:.0f} s (not timed); the 1-minute load "
          "average (`uptime`) when each case started is in the table.", "",
          f"**{len(rows) - len(failed)} of {len(rows)} cases refused within {args.limit:g} s**; "
          f"slowest median {max(r['median_s'] for r in rows):.2f} s, all {total:.1f} s.", "",
          "| group | mistake | exit | median s | max s | load | error line |",
          "|---|---|---:|---:|---:|---:|---|"]
    md += [f"| {r['group']} | {r['case']} | {r['exit']} | {r['median_s']:.2f} | "
           f"{r['max_s']:.2f} | {r['load']:.1f} | `{r['line']}` |" for r in rows]
    args.out.write_text("\n".join(md) + "\n", encoding="utf-8")
    args.out.with_suffix(".json").write_text(json.dumps(
        {"started": started, "machine": machine, "limit_s": args.limit,
         "repeats": args.repeats, "rows": rows}, indent=1) + "\n", encoding="utf-8")
    if failed:
        raise SystemExit(f"not refused as promised: {failed}")


if __name__ == "__main__":
    main()
