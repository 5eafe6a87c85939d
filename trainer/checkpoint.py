"""Checkpoints `OUT/checkpoints/step-N/`: model and optimizer/scheduler state, the RNG states of python,
numpy and torch, and the run state (step, data position, config hash, loss curve). Each is written to
a temporary directory and renamed into place, so a checkpoint directory is always complete."""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tapt.errors import InputError
from tapt.trainer.storage import torch_save, writing
from tapt.util.files import sha256_file

logger = logging.getLogger(__name__)

CHECKPOINTS = "checkpoints"
STATE = "state.json"
_CHECKSUMMED = ("model.pt", "optimizer.pt", "rng.pt", "rng.json")   # recorded in STATE


def checkpoint_dirs(out: str | Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    root = Path(out) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = []
    for d in root.iterdir():
        if d.is_dir() and d.name.startswith("step-") and d.name[5:].isdigit() and (d / STATE).is_file():
            found.append((int(d.name[5:]), d))
    return [d for _, d in sorted(found)]


def _rng_state() -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    py = random.getstate()
    np_state = np.random.get_state()
    plain = {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]),
                  float(np_state[4])],
    }
    tensors = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"cuda{i}"] = s
    return plain, tensors


def _set_rng_state(plain: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
    py = plain["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    n = plain["numpy"]
    np.random.set_state((n[0], np.array(n[1], dtype=np.uint32), n[2], n[3], n[4]))
    torch.set_rng_state(tensors["torch"])
    cuda = [tensors[k] for k in sorted(k for k in tensors if k.startswith("cuda"))]
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)


def save_checkpoint(
    out: str | Path, step: int, model: Any, optimizer: Any, scheduler: Any, state: dict[str, Any],
    keep: int = 2,
) -> Path:
    """Write checkpoint `step-<step>` atomically, then keep only the `keep` newest.

    Raises:
        StorageError: the disk is full or refuses the write; the earlier checkpoints are kept
            and nothing of this one remains.
    """
    root = Path(out) / CHECKPOINTS
    final = root / f"step-{step}"
    tmp = root / f".tmp-step-{step}-{os.getpid()}"
    made_root = not root.exists()
    try:
        with writing(final):
            root.mkdir(parents=True, exist_ok=True)
            if tmp.exists():
                shutil.rmtree(tmp)
            tmp.mkdir()
            plain, tensors = _rng_state()
            torch_save(model.state_dict(), tmp / "model.pt")
            torch_save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()},
                       tmp / "optimizer.pt")
            torch_save(tensors, tmp / "rng.pt")
            _write_text(tmp / "rng.json", json.dumps(plain))
            sums = {name: sha256_file(tmp / name) for name in _CHECKSUMMED}
            _write_text(tmp / STATE, json.dumps(dict(state, step=step, checksums=sums), indent=1))
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
    except BaseException:
        if made_root and not checkpoint_dirs(out):
            shutil.rmtree(root, ignore_errors=True)
        raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    for old in checkpoint_dirs(out)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    logger.info("saved checkpoint %s", final)
    return final


def _write_text(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


def read_state(path: str | Path) -> dict[str, Any]:
    """The run state (step, config hash, losses...) of a checkpoint."""
    try:
        return json.loads((Path(path) / STATE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"checkpoint {path} is damaged: {exc}") from exc


def load_checkpoint(path: str | Path, model: Any, optimizer: Any, scheduler: Any, device: str) -> dict:
    """Restore model, optimizer, scheduler and RNG states; returns the run state. Files whose
    checksums the state records must match them (a damaged checkpoint never resumes)."""
    path = Path(path)
    state = read_state(path)
    for name, expected in (state.get("checksums") or {}).items():
        try:
            actual = sha256_file(path / name)
        except OSError as exc:
            raise InputError(f"checkpoint {path} is damaged: {name} cannot be read "
                             f"({exc.strerror or exc})") from exc
        if actual != expected:
            raise InputError(f"checkpoint {path} is damaged: {name} does not match its recorded "
                             "checksum; move this checkpoint aside to resume from an earlier "
                             "one, or start again")
    try:
        model.load_state_dict(torch.load(path / "model.pt", map_location=device, weights_only=True))
        opt = torch.load(path / "optimizer.pt", map_location=device, weights_only=True)
        optimizer.load_state_dict(opt["optimizer"])
        scheduler.load_state_dict(opt["scheduler"])
        tensors = torch.load(path / "rng.pt", map_location="cpu", weights_only=True)
        plain = json.loads((path / "rng.json").read_text(encoding="utf-8"))
    except (OSError, RuntimeError, KeyError, ValueError, json.JSONDecodeError) as exc:
        raise InputError(f"checkpoint {path} cannot be loaded: {str(exc).splitlines()[0]}") from exc
    _set_rng_state(plain, tensors)
    return state
