#!/usr/bin/env python
"""Seeded damage to a small two-shard index, then every command: each must answer exactly as on the sound
index or fail with exactly one `Error:` line; no signal, no traceback, no wrong answer.

A trial copies the index, flips random bytes of a random file or cuts it at a random length
(seeded), then runs info, verify, four selection methods, eval of a selection made before the
damage, repair, and a knn selection after the repair. The commands run in one worker process
(the CLI in-process, hashing encoder in place of the model) that reports each command before it
starts, so a command that kills the process by a signal is named and the remaining trials go on
in a new worker. Used by tests/indexer/test_fuzz.py and benchmarks/hostile_input.py.

    python tests/support/index_fuzz.py worker BASE SEED...   # one JSON line per command
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))          # tests/: conftest
sys.path.insert(0, str(HERE.parents[1]))      # the repository

SHARD_FILES = ("shard.json", "embeddings.npy", "tokens.npy", "docs.npy", "index.faiss",
               "text.lmdb/data.mdb", "lexical.npy", "lexical_offsets.npy", "bigrams.npy",
               "vocab.npy", "dochash.npy")
SHARDS = ("000000", "000001")
FILES = ("manifest.json", "vocab.npy",
         *(f"shards/{s}/{name}" for s in SHARDS for name in SHARD_FILES))
SELECT = {"centroid": ["--budget", "4"], "knn": ["--k", "3"], "fused": ["--budget", "4"],
          "iforest": ["--budget", "4"]}
_TIMING = re.compile(r" in \d+\.\d+ s|search seconds [\d.]+")


def commands(idx: Path, base: Path) -> list[tuple[str, list[str]]]:
    """(name, argv) of every command a trial runs, in order."""
    task, sel = base / "task.txt", base / "before.jsonl"
    out = [("info", ["index", "info", str(idx)]), ("verify", ["index", "verify", str(idx)])]
    for method, extra in SELECT.items():
        out.append((method, ["select", method, str(idx), "--task", str(task), *extra,
                             "--out", str(idx.parent / f"{method}.jsonl")]))
    out.append(("eval", ["eval", str(sel), "--index", str(idx), "--label", "medical"]))
    out.append(("repair", ["index", "repair", str(idx)]))
    out.append(("knn after repair", ["select", "knn", str(idx), "--task", str(task), "--k", "3",
                                     "--out", str(idx.parent / "after.jsonl")]))
    return out


def make_base(base: Path) -> None:
    """The sound index (two shards), its task and a selection made from it (built once)."""
    from conftest import HashingEncoder, write_split_corpus, write_task
    from tapt.indexer.building.pipeline import BuildConfig, build_index

    base.mkdir(parents=True, exist_ok=True)
    parts = write_split_corpus(base, parts=len(SHARDS), docs_per_topic=4)
    write_task(base / "task.txt", "medical", n=12)
    build_index(parts, base / "idx", HashingEncoder(),
                BuildConfig(split=False, progress=False, segment_size=4, shards=len(SHARDS),
                            embedding_dtype="float32"))
    _cli(["select", "centroid", str(base / "idx"), "--task", str(base / "task.txt"),
          "--budget", "6", "--out", str(base / "before.jsonl")])


def damage(idx: Path, rng: random.Random, files: tuple[str, ...] = FILES) -> str:
    """Flip 1-3 random bytes of a random file, cut it at a random length, or both."""
    name = rng.choice(files)
    path = idx / name
    data = bytearray(path.read_bytes())
    kind = rng.choice(("flip", "flip", "truncate", "flip+truncate"))
    done = []
    if "flip" in kind and data:
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(data))
            mask = rng.randint(1, 255)
            data[at] ^= mask
            done.append(f"byte {at} ^= 0x{mask:02x}")
    if "truncate" in kind:
        cut = rng.randrange(len(data))
        data = data[:cut]
        done.append(f"cut to {cut} of {path.stat().st_size} bytes")
    path.write_bytes(bytes(data))
    return f"{name}: {', '.join(done)}"


def _cli(argv: list[str]):
    from click.testing import CliRunner

    from tapt.cli import cli

    return CliRunner().invoke(cli, ["-q", *argv])


def _answer(name: str, output: str, idx: Path) -> str:
    """What a command answered, without what legitimately varies (timings, file sizes)."""
    lines = [line for line in output.splitlines() if not line.startswith("WARNING")]
    if name == "info":
        lines = [line for line in lines if not line.startswith("disk ")]
    text = _TIMING.sub("", "\n".join(lines)).replace(str(idx), "IDX")
    text = re.sub(r" -> \S+$", "", text, flags=re.MULTILINE)
    for method in (*SELECT, "after"):
        sel = idx.parent / f"{method}.jsonl"
        if name in (method, "knn after repair") and sel.is_file():
            text += "\n" + hashlib.sha256(sel.read_bytes()).hexdigest()
    return text


def worker(base: Path, seeds: list[int]) -> None:
    """Run every command of each trial, printing a JSON line before and after each; the files
    damaged are those named in `TAPT_FUZZ_FILES` (comma-separated; default: every file)."""
    from hashing_cli import patch_encoder

    patch_encoder()
    files = tuple(os.environ.get("TAPT_FUZZ_FILES", ",".join(FILES)).split(","))
    for seed in seeds:
        trial = base / f"trial-{seed}"
        shutil.rmtree(trial, ignore_errors=True)
        trial.mkdir()
        idx = trial / "idx"
        shutil.copytree(base / "idx", idx)
        what = damage(idx, random.Random(seed), files) if seed >= 0 else "none"
        for name, argv in commands(idx, base):
            print(json.dumps({"seed": seed, "command": name, "damage": what, "started": True}),
                  flush=True)
            result = _cli(argv)
            crashed = result.exception is not None and not isinstance(result.exception,
                                                                      SystemExit)
            print(json.dumps({"seed": seed, "command": name, "damage": what,
                              "exit": result.exit_code, "output": result.output,
                              "traceback": crashed, "answer": _answer(name, result.output, idx)}),
                  flush=True)
        shutil.rmtree(trial, ignore_errors=True)


@dataclass
class Outcome:
    seed: int
    command: str
    damage: str
    verdict: str  # "same", "repaired", "error"; failures: "WRONG", "TRACEBACK", "SIGNAL", "MESSY"
    detail: str


def _run_workers(base: Path, seeds: list[int], env: dict[str, str]) -> list[dict]:
    """Every record of the trials; a worker killed by a signal yields a record for the command
    it was running, and the next worker starts at the following trial."""
    records: list[dict] = []
    pending = list(seeds)
    while pending:
        proc = subprocess.run([sys.executable, str(Path(__file__)), "worker", str(base),
                               *map(str, pending)], capture_output=True, text=True,
                              env={**os.environ, **env})
        lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        done = [r for r in lines if not r.get("started")]
        records += done
        if proc.returncode == 0:
            break
        last = lines[-1] if lines else {"seed": pending[0], "command": "?", "damage": "?"}
        records.append({**last, "started": False, "exit": proc.returncode, "signal": True,
                        "output": proc.stderr[-500:], "traceback": False, "answer": ""})
        pending = pending[pending.index(last["seed"]) + 1:]
    return records


def judge(record: dict, baseline: dict[str, str]) -> Outcome:
    """The verdict on one command of one trial against the sound index's answers."""
    out = record["output"]
    errors = [line for line in out.splitlines() if line.startswith("Error:")]
    base = (record["seed"], record["command"], record["damage"])
    if record.get("signal"):
        return Outcome(*base, "SIGNAL", f"killed (status {record['exit']})")
    if record["traceback"] or "Traceback" in out:
        return Outcome(*base, "TRACEBACK", out[-300:])
    if record["exit"] == 0:
        expected = baseline["knn" if record["command"] == "knn after repair" else
                            record["command"]]
        if record["answer"].split("\n")[-1:] == expected.split("\n")[-1:] and (
                record["answer"] == expected or record["command"] == "knn after repair"):
            return Outcome(*base, "same", "")
        if record["command"] == "repair" and record["answer"].startswith("rebuilt index.faiss"):
            return Outcome(*base, "repaired", record["answer"][:300])
        return Outcome(*base, "WRONG", record["answer"][:300])
    others = [line for line in out.splitlines() if line.strip() and not line.startswith(
        ("Error:", "WARNING")) and record["command"] != "verify"]
    if record["exit"] == 1 and len(errors) == 1 and not others:
        return Outcome(*base, "error", errors[0][:300])
    return Outcome(*base, "MESSY", out[-300:])


def fuzz(base: Path, seeds: list[int], env: dict[str, str] | None = None,
         files: tuple[str, ...] = FILES) -> list[Outcome]:
    """Damage one of `files` in each of the `seeds` trials of the index under `base` (made if
    missing), run every command, judge each against the sound index's answers."""
    env = {**(env or {}), "TAPT_FUZZ_FILES": ",".join(files)}
    if not (base / "before.jsonl").is_file():
        proc = subprocess.run([sys.executable, str(Path(__file__)), "make", str(base)],
                              capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(proc.stderr)
    records = _run_workers(base, [-1, *seeds], env)  # trial -1: the sound index, no damage
    baseline = {r["command"]: r["answer"] for r in records if r["seed"] == -1}
    if len(baseline) != len(commands(base / "idx", base)) or any(
            r["exit"] for r in records if r["seed"] == -1):
        raise RuntimeError(f"the sound index does not answer every command: {records[:3]}")
    return [judge(r, baseline) for r in records if r["seed"] != -1]


if __name__ == "__main__":
    if sys.argv[1] == "make":
        from hashing_cli import patch_encoder

        patch_encoder()
        make_base(Path(sys.argv[2]))
    else:
        worker(Path(sys.argv[2]), [int(s) for s in sys.argv[3:]])
