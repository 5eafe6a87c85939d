#!/usr/bin/env python
"""The README's walk-through, run as pasted in a fresh copy of the repository: its command-line
block line by line, then its Python block, then the command-line block's training again with
`--resume` (it must find its own finished run: no later step may have replaced a file an
earlier one wrote). Each step's wall time is recorded with the machine's load, for the times
the README states.

    python -m benchmarks.readme_walkthrough          # -> benchmarks/results/readme_walkthrough.md
    python -m benchmarks.readme_walkthrough --train-steps 5

The fresh copy holds the repository's tracked files only (no .venv, no .cache); `tapt` and
`python` are this environment's. `--train-steps N` runs the command-line block's `tapt train`
with N steps instead of its own (the README states the time per step, measured here), and the
Python block as pasted. Exits 1 when a step fails.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "support"))

from readme import README, readme_section  # noqa: E402

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def cli_block() -> list[str]:
    """The commands of the README's "From the command line" block, in order."""
    part = README.split("## From the command line", 1)[1]
    block = part.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


def python_block() -> str:
    section = readme_section("python")
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def fresh_copy(to: Path) -> None:
    """The repository's tracked files, as a clone has them."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        source = REPO / name
        if source.is_file():
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, to / name)


def _load() -> float:
    return os.getloadavg()[0]


def run(step: str, argv: list[str], cwd: Path, rows: list[dict]) -> str:
    load = _load()
    t0 = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=ENV, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    last = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    rows.append({"step": step, "exit": done.returncode, "seconds": round(seconds, 1),
                 "load": round((load + _load()) / 2, 1),
                 "last": (last[-1] if last else "")[:160]})
    print(rows[-1], flush=True)
    if done.returncode != 0:
        raise SystemExit(f"{step} failed:\n{(done.stdout + done.stderr)[-2000:]}")
    return done.stdout


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--train-steps", type=int, default=None,
                   help="steps of the command-line block's tapt train (default: as pasted)")
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" /
                   "readme_walkthrough.md")
    args = p.parse_args()
    tapt = str(Path(sys.executable).parent / "tapt")
    rows: list[dict] = []
    started = time.strftime("%Y-%m-%d %H:%M")
    steps_run = None
    with tempfile.TemporaryDirectory(prefix="tapt-readme-") as tmp, \
            tempfile.TemporaryDirectory(prefix="tapt-readme-cache-") as cache:
        ENV["TAPT_CACHE_DIR"] = cache          # a first run: nothing cached
        clone = Path(tmp)
        fresh_copy(clone)
        commands = cli_block()
        train_line = ""
        for line in commands:
            argv = line.split()
            if argv[:2] == ["tapt", "train"]:
                train_line = line
                if args.train_steps is not None:
                    argv[argv.index("--steps") + 1] = str(args.train_steps)
                steps_run = int(argv[argv.index("--steps") + 1])
            run(" ".join(argv), [tapt, *argv[1:]], clone, rows)
        before = {name: (clone / name).read_bytes() for name in ("sel.jsonl",
                                                                    "sel.jsonl.manifest.json")}
        run("the Python block, as pasted", [sys.executable, "-c", python_block()], clone, rows)
        for name, data in before.items():
            if (clone / name).read_bytes() != data:
                raise SystemExit(f"the Python block replaced {name}, which the command-line "
                                 "block wrote")
        resume = train_line.split()
        if args.train_steps is not None:
            resume[resume.index("--steps") + 1] = str(args.train_steps)
        out = run(" ".join(resume) + " --resume (again, after the Python block)",
                  [tapt, *resume[1:], "--resume"], clone, rows)
        del out
    train = next(r for r in rows if r["step"].startswith("tapt train"))
    per_step = train["seconds"] / steps_run if steps_run else None
    pasted = re.search(r"--steps (\d+)", train_line)
    machine = (f"{os.cpu_count()} CPU cores shared with other work (load = the 1-minute "
               "load average during the step), no GPU")
    md = ["# The README's walk-through (`benchmarks/readme_walkthrough.py`)", "",
          f"Run on {started} in a fresh copy of the repository ({machine}), the task-embedding "
          "cache empty, every step as the README gives it"
          + (f", except that `tapt train` ran {steps_run} steps instead of the README's "
             f"{pasted.group(1) if pasted else '?'}" if args.train_steps else "")
          + ". Then the command-line block's `tapt train` again with `--resume`: it found its "
          "finished run (no step replaced what another wrote).", "",
          "| step | exit | seconds | load |", "|---|---:|---:|---:|"]
    md += [f"| `{r['step']}` | {r['exit']} | {r['seconds']:.1f} | {r['load']:.1f} |"
           for r in rows]
    if per_step:
        md += ["", f"`tapt train`: {per_step:.1f} s a step (batch 16, 128 tokens, CPU; "
                   "loading the model and tokenising included)."]
    args.out.write_text("\n".join(md) + "\n", encoding="utf-8")
    args.out.with_suffix(".json").write_text(json.dumps(
        {"started": started, "machine": machine, "train_steps": steps_run,
         "seconds_per_step": per_step, "rows": rows}, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
