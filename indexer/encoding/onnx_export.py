"""Export a sentence-transformers model to ONNX (fp32, fused fp32, or int8 by dynamic
quantisation), cached.

The whole module pipeline (transformer, pooling, normalisation, any dense layers) is traced into one
graph, so the ONNX model returns the same sentence embedding as `SentenceTransformer.encode`. The
`onnx-fused` variant is traced with eager attention (whose pattern ONNX Runtime's transformer
optimizer recognises; the SDPA trace it does not) and rewritten by that optimizer into fused
operators (Attention with the QKV projections in one matrix product and a per-row length mask,
EmbedLayerNormalization, SkipLayerNormalization, BiasGelu). The
export is checked against torch on probe sentences before it is cached, and cached under the user
cache directory by the model's full fingerprint (weights, module configs, tokenizer, maximum
length), so it happens once per model and machine, never per run. Each entry records its size and
SHA-256, checked before use: a truncated or damaged export is made again, never loaded.
"""

from __future__ import annotations

import atexit
import errno
import json
import logging
import os
import shutil
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

import numpy as np

from tapt.errors import TaptError
from tapt.util.cache import readable_cache, warn_once, writable_cache
from tapt.util.files import read_regular, sha256_file, write_json_atomic

log = logging.getLogger(__name__)

EXPORT_VERSION = 2  # 2: keyed by the full model fingerprint, size and SHA-256 recorded
OPSET = 17
# int8 dynamic quantisation changes embeddings a little (mean cosine ~0.99 to fp32); anything far
# below that means the quantised graph is broken, not merely approximate. Fusion only reorders
# fp32 arithmetic, so the fused graph must agree with torch as closely as the plain one.
MIN_COSINE = {"onnx": 0.9999, "onnx-fused": 0.9999, "onnx-int8": 0.95}
_PROBES = [
    "The patient was given 5 mg of the drug twice a day.",
    "Section 2(b) of the Act applies to every contract signed after 1 January.",
    "Short.",
    "A rather longer sentence that goes on for a while, with commas, clauses and a few numbers "
    "like 3.14 and 2,000, to exercise positions well beyond the first few tokens of the model.",
]


class _Pipeline:
    """Wraps the ST model so tracing sees positional tensors and returns the sentence embedding."""

    def __new__(cls, model, names: list[str]):
        import torch

        class Pipeline(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, *tensors):
                return self.model(dict(zip(names, tensors)))["sentence_embedding"]

        return Pipeline().eval()


def export_dir(fingerprint: str, variant: str, root: Path | None = None) -> Path | None:
    """The cache entry of a model's export: keyed by its full fingerprint (weights, modules,
    tokenizer, maximum length), the variant and the export format."""
    root = root if root is not None else readable_cache("onnx")
    if root is None:
        return None
    return root / f"{fingerprint[:32]}-{variant}-v{EXPORT_VERSION}"


def export_ready(fingerprint: str, variant: str) -> bool:
    """Whether a sound export of this model and variant is in the cache."""
    target = export_dir(fingerprint, variant)
    return target is not None and target.exists() and entry_problem(target) is None


def entry_problem(target: Path) -> str | None:
    """Why a cached export cannot be used (None when its size and SHA-256 hold)."""
    try:
        info = json.loads(read_regular(target / "export.json", 1 << 20))
        size = (target / "model.onnx").stat().st_size
    except FileNotFoundError:
        return "incomplete"
    except (OSError, ValueError) as exc:
        return f"unreadable ({exc})"
    if not isinstance(info, dict) or info.get("export_version") != EXPORT_VERSION:
        return "of another export version"
    if size != info.get("bytes"):
        return f"model.onnx is {size:,} bytes, {info.get('bytes')} recorded"
    if sha256_file(target / "model.onnx") != info.get("sha256"):
        return "model.onnx does not match its recorded checksum"
    return None


def ensure_onnx(load_model: Callable[[], Any], fingerprint: str, variant: str) -> Path:
    """Path of the cached ONNX file of a model for `variant` (`onnx`, `onnx-fused` or
    `onnx-int8`), made if missing; a damaged entry is exported again (with a warning). Without
    a writable cache the export is kept in a temporary directory for this process only.
    `load_model` returns the sentence-transformers model; it is called only when there is
    something to export."""
    if variant not in MIN_COSINE:
        raise ValueError(f"unknown ONNX variant {variant!r}")
    target = export_dir(fingerprint, variant)
    if target is not None and target.exists():
        problem = entry_problem(target)
        if problem is None:
            return target / "model.onnx"
        if problem != "incomplete":
            log.warning("the cached ONNX export %s is damaged (%s); exporting the model again",
                        target, problem)
    root = writable_cache("onnx")
    if root is not None:
        try:
            return _exported(load_model, variant, root, export_dir(fingerprint, variant, root))
        except (TaptError, OSError) as exc:
            full = _storage_cause(exc)
            if full is None:
                raise
            # a full (or refusing) cache only costs time: the export is kept for this process
            warn_once(f"onnx-cache:{root}", "the ONNX export cannot be kept in the tapt cache %s "
                      "(%s); it is made for this process only (free space there, or set "
                      "TAPT_CACHE_DIR)", root, full.strerror or full)
    return _exported(load_model, variant, Path(tempfile.gettempdir()), None)


def _storage_cause(exc: BaseException) -> OSError | None:
    """The OSError of a full, read-only or refusing disk behind `exc`, if that is its cause."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in _STORAGE_ERRNOS:
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


_STORAGE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM,
                   errno.EFBIG, errno.EIO)


def _exported(load_model: Callable[[], Any], variant: str, parent: Path,
              target: Path | None) -> Path:
    """Export into a new folder under `parent`, then install it at `target` (None: keep it
    there for this process only, removed at exit)."""
    work = Path(tempfile.mkdtemp(prefix=".export-", dir=parent))
    try:
        info = _export(load_model(), work, variant)
        info["bytes"] = (work / "model.onnx").stat().st_size
        info["sha256"] = sha256_file(work / "model.onnx")
        write_json_atomic(work / "export.json", info)
        if target is None:  # no usable cache: keep the export for this process only
            atexit.register(shutil.rmtree, work, True)
            return work / "model.onnx"
        _install(work, target)
        return target / "model.onnx"
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def _install(work: Path, target: Path) -> None:
    """Move a finished export into place, replacing a damaged entry; if another process
    installed a sound one first, keep that."""
    if target.exists():
        if entry_problem(target) is None:
            shutil.rmtree(work, ignore_errors=True)
            return
        aside = target.with_name(f".{target.name}.damaged-{os.getpid()}")
        os.replace(target, aside)
        shutil.rmtree(aside, ignore_errors=True)
    try:
        os.rename(work, target)
    except OSError:
        if entry_problem(target) is not None:
            raise
        shutil.rmtree(work, ignore_errors=True)


def _export(model, work: Path, variant: str) -> dict[str, Any]:
    import torch

    log.info("exporting the model to ONNX (%s), once per model; cached in %s", variant, work.parent)
    model = model.to("cpu").float().eval()
    features = model.tokenizer(_PROBES, padding=True, truncation=True, return_tensors="pt")
    names = list(features.keys())
    fp32 = work / "model-fp32.onnx"
    fused = variant == "onnx-fused"
    dynamic = {n: {0: "batch", 1: "tokens"} for n in names}
    dynamic["sentence_embedding"] = {0: "batch"}
    try:
        with torch.no_grad(), warnings.catch_warnings(), _attention(model, fused):
            warnings.simplefilter("ignore")  # tracer warnings about shape-dependent Python branches
            torch.onnx.export(_Pipeline(model, names), tuple(features[n] for n in names), str(fp32),
                              input_names=names, output_names=["sentence_embedding"],
                              dynamic_axes=dynamic, opset_version=OPSET, dynamo=False)
    except Exception as exc:  # noqa: BLE001 - any exporter failure means "this model cannot go to ONNX"
        raise TaptError(f"cannot export this model to ONNX ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0][:200] if str(exc) else ''}); use `backend` torch"
                        ) from exc
    out = work / "model.onnx"
    if variant == "onnx-int8":
        from onnxruntime.quantization import QuantType, quantize_dynamic

        # Per-channel weight scales keep cosine to fp32 near 0.99; per-tensor gave ~0.93 here.
        root = logging.getLogger()
        level = root.level
        root.setLevel(logging.ERROR)  # the quantiser logs one INFO line per tensor to the root logger
        try:
            quantize_dynamic(str(fp32), str(out), weight_type=QuantType.QInt8, per_channel=True)
        finally:
            root.setLevel(level)
        fp32.unlink()
    elif fused:
        fusion = _fuse(model, fp32, out)
        fp32.unlink()
    else:
        fp32.rename(out)
    cosine = _check(model, out, names)
    if cosine < MIN_COSINE[variant]:
        raise TaptError(f"the {variant} export disagrees with torch (mean cosine {cosine:.4f} < "
                        f"{MIN_COSINE[variant]}); use `backend` torch")
    import onnxruntime

    from tapt.util.versions import library_versions

    return {"variant": variant, "opset": OPSET, "inputs": names, "probe_cosine_to_torch": cosine,
            **({"fused_operators": fusion} if fused else {}),
            "export_version": EXPORT_VERSION, "onnxruntime": onnxruntime.__version__,
            "versions": library_versions()}


@contextmanager
def _attention(model, eager: bool):
    """Trace with eager attention when `eager` (the pattern ONNX Runtime's fusion recognises),
    restoring the model's own implementation afterwards."""
    auto = getattr(model[0], "auto_model", None) if eager and len(model) else None
    before = getattr(getattr(auto, "config", None), "_attn_implementation", None)
    if auto is None or before in (None, "eager") or not hasattr(auto, "set_attn_implementation"):
        yield
        return
    auto.set_attn_implementation("eager")
    try:
        yield
    finally:
        auto.set_attn_implementation(before)


def _fuse(model, source: Path, out: Path) -> dict[str, int]:
    """Rewrite `source` into `out` with ONNX Runtime's transformer fusions; returns the count of
    each fused operator (empty when the optimizer cannot handle this architecture, in which case
    `out` is the plain graph: correct, only not faster)."""
    config = getattr(getattr(model[0], "auto_model", None), "config", None) if len(model) else None
    heads = getattr(config, "num_attention_heads", 0) or 0
    hidden = getattr(config, "hidden_size", 0) or 0
    try:
        from onnxruntime.transformers.optimizer import optimize_model

        before = logging.root.manager.disable
        logging.disable(logging.WARNING)  # the optimizer logs every fusion pass at INFO
        try:
            optimized = optimize_model(str(source), model_type="bert", num_heads=int(heads),
                                       hidden_size=int(hidden), opt_level=0)
            counts = {k: int(v) for k, v in optimized.get_fused_operator_statistics().items()
                      if v}
            optimized.save_model_to_file(str(out))
        finally:
            logging.disable(before)
        return counts
    except Exception as exc:  # noqa: BLE001 - an architecture the optimizer does not know
        log.info("ONNX Runtime's transformer optimizer cannot fuse this model (%s: %s); "
                 "using the plain graph", type(exc).__name__, str(exc).splitlines()[0][:200]
                 if str(exc) else "")
        shutil.copyfile(source, out)
        return {}


def _check(model, path: Path, names: list[str]) -> float:
    """Mean cosine between the ONNX graph and torch on the probe sentences, odd batch shapes included."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ref = model.encode(_PROBES, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
    got = []
    for batch in (_PROBES[:1], _PROBES[1:]):  # different batch sizes and padded lengths than traced
        features = model.tokenizer(batch, padding=True, truncation=True, return_tensors="np")
        got.append(session.run(None, {n: features[n].astype(np.int64) for n in names})[0])
    emb = np.concatenate(got).astype(np.float32)
    emb /= np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
    return float((emb * ref).sum(axis=1).mean())
