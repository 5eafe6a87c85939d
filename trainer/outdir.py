"""The output directory of `tapt train`: marker file, refusal rules, atomic final model."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any, Sequence

from tapt.errors import InputError, OutputError
from tapt.trainer.manifest import (
    TRAINING_FORMAT,
    TRAINING_FORMAT_VERSION,
    TRAINING_MANIFEST,
    identity_differences,
    identity_hash,
)
from tapt.util.files import read_regular, storage_error, write_json_atomic
from tapt.util.safety import check_output as check_safe

logger = logging.getLogger(__name__)

MARKER = ".tapt-training.json"


def read_marker(out: Path) -> dict[str, Any] | None:
    """The marker of a tapt training directory, or None when `out` is not one."""
    try:
        marker = json.loads(read_regular(out / MARKER))
    except (OSError, json.JSONDecodeError):
        return None
    return marker if isinstance(marker, dict) and marker.get("format") == TRAINING_FORMAT else None


def _holds_run(out: Path) -> bool:
    """True when a tapt training directory has checkpoints or a finished model."""
    return (out / TRAINING_MANIFEST).exists() or (out / "checkpoints").is_dir()


def training_inputs(config: Any) -> list[Path]:
    """Every path a training run reads: selections and their manifests, task and eval text,
    and the model when it is a local directory."""
    from tapt.retriever.selections.file_format import manifest_path

    paths = [Path(p) for p in config.selections]
    paths += [manifest_path(p) for p in config.selections]
    paths += [Path(p) for p in (*config.task, *config.eval_text)]
    if config.model and Path(config.model).expanduser().exists():
        paths.append(Path(config.model).expanduser())
    return paths


def check_output(out: str | Path, identity: dict[str, Any] | None, resume: bool,
                 inputs: Sequence[str | Path] = ()) -> bool:
    """Check `out` without writing anything; returns True when it holds this run to resume.

    The one output rule (`tapt.util.safety.check_output`) first: `out` is not an input (a
    selection, its manifest, task or eval text, the model directory), not inside or around one,
    not inside a tapt index, and new, empty or a tapt training directory. Then: a training
    directory with checkpoints or a model needs `resume`, and `resume` needs the same
    configuration (checked only when `identity` is given).
    """
    out = Path(out)
    check_safe(out, what="training directory", inputs=inputs, directory=True,
               ours=lambda p: read_marker(p) is not None)
    if not out.exists():
        parent = out.parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not parent.is_dir():
            raise OutputError(f"cannot create {out}: {parent} is not a directory", param="out")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise OutputError(f"cannot create {out}: {parent} is not writable", param="out")
        return False
    if not os.access(out, os.W_OK | os.X_OK):
        raise OutputError(f"{out} is not writable", param="out")
    marker = read_marker(out)
    if marker is None or not _holds_run(out):
        return False
    if not resume:
        raise OutputError(
            f"{out} already holds a training run; pass `resume` to continue it, or choose "
            f"another directory", param="out")
    if identity is not None and marker.get("identity_sha256") != identity_hash(identity):
        diffs = identity_differences(marker.get("identity", {}), identity)
        raise InputError(
            f"cannot resume {out}: the run was started with another configuration ("
            + "; ".join(diffs or ["identity differs"]) + ")"
        )
    return True


def prepare_output(out: str | Path, identity: dict[str, Any], resume: bool,
                   inputs: Sequence[str | Path] = ()) -> bool:
    """Check `out` (see `check_output`), create it and write its marker; True when resuming."""
    out = Path(out)
    resuming = check_output(out, identity, resume, inputs)
    if resuming:
        return True
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(out / MARKER, {
            "format": TRAINING_FORMAT,
            "format_version": TRAINING_FORMAT_VERSION,
            "identity_sha256": identity_hash(identity),
            "identity": identity,
        })
        probe = out / f".write-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise storage_error(exc, out) from exc
    if resume:
        logger.info("resume: %s holds no run yet; starting from step 0", out)
    return False


def finished_manifest(out: str | Path) -> dict[str, Any] | None:
    """The training manifest of a completed run in `out`, if there is one."""
    try:
        return json.loads((Path(out) / TRAINING_MANIFEST).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def write_final_model(out: str | Path, model: Any, tokenizer: Any, manifest: dict[str, Any]) -> None:
    """Save model, tokenizer and training manifest into a temporary directory inside `out`,
    then move them into `out`, the manifest last: `out` holds a model exactly when the manifest
    exists, and a full disk fails before anything in `out` is replaced.

    Raises:
        StorageError: the disk is full or refuses the write (nothing in `out` was replaced).
    """
    out = Path(out)
    tmp = out / f".final-tmp-{os.getpid()}"
    from tapt.trainer.storage import writing
    from tapt.util.training import quiet_transformers

    try:
        with writing(out):
            if tmp.exists():
                shutil.rmtree(tmp)
            with quiet_transformers():
                model.save_pretrained(tmp)
                tokenizer.save_pretrained(tmp)
            write_json_atomic(tmp / TRAINING_MANIFEST, manifest)
            for item in sorted(tmp.iterdir(), key=lambda p: p.name == TRAINING_MANIFEST):
                target = out / item.name
                if target.is_dir():
                    shutil.rmtree(target)
                os.replace(item, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
