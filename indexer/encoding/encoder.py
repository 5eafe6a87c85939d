"""Sentence encoders: the `Encoder` protocol, the sentence-transformers (torch) implementation and
`load_encoder`, which picks a backend (torch, or an ONNX export run by ONNX Runtime)."""

from __future__ import annotations

import hashlib
import json
import logging
import re
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from tapt.errors import InputError
from tapt.indexer.encoding.models import (
    absolute_spec,
    display_name,
    load_failure,
    missing_model,
    resolve_model,
)
from tapt.indexer.encoding.registered import load_registered, registered

log = logging.getLogger(__name__)


class Encoder(Protocol):
    """What the indexer and retriever need from a model (a fake one serves the unit tests)."""

    name: str
    spec: str | None
    dim: int
    max_length: int
    device: str
    backend: str

    @property
    def weights_sha256(self) -> str: ...

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """L2-normalised float32 embeddings, one row per text, in input order."""
        ...

    def token_counts(self, texts: Sequence[str]) -> np.ndarray:
        """Tokens per text including special tokens, before truncation (int32)."""
        ...


REPORT_ROWS = 128   # texts between two progress reports of `encode_counted` (seconds on a CPU)


def encode_counted(encoder: Encoder, texts: Sequence[str], batch_size: int = 64,
                   on_rows: Callable[[int], None] | None = None
                   ) -> tuple[np.ndarray, np.ndarray]:
    """`encoder.encode(texts)` and `encoder.token_counts(texts)` together: tokenised once where
    the encoder can (its `encode_counted`; tapt's encoders recount only texts cut at their
    maximum length), else the two calls.

    Args:
        encoder: Any `Encoder`.
        texts: The texts.
        batch_size: Texts per batch.
        on_rows: Told how many texts were embedded, every whole number of batches of about
            REPORT_ROWS texts (a progress bar that moves by rows, not by calls): the texts are
            then embedded shortest first in such chunks, so each chunk's batches pad as
            little as one call's would, and returned in their own order. On CUDA, once for
            all the texts: a GPU embeds thousands a second, and chunks of one batch would make
            it wait for each chunk's tokenising (a build's parts in 1,024-text chunks ran at
            9,109 sentences/s on an H200, in one call each at 25,926).

    Returns:
        (embeddings, counts): as `encode` and `token_counts` return them.
    """
    chunk = max(batch_size, REPORT_ROWS // max(batch_size, 1) * batch_size)
    on_gpu = str(getattr(encoder, "device", "")).startswith("cuda")
    if on_rows is not None and len(texts) > chunk and not on_gpu:
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        parts = []
        for start in range(0, len(order), chunk):
            rows = order[start:start + chunk]
            parts.append(encode_counted(encoder, [texts[i] for i in rows], batch_size))
            on_rows(len(rows))
        embeddings = np.empty((len(texts), parts[0][0].shape[1]), dtype=parts[0][0].dtype)
        counts = np.empty(len(texts), dtype=np.int32)
        embeddings[order] = np.concatenate([p[0] for p in parts])
        counts[order] = np.concatenate([p[1] for p in parts])
        return embeddings, counts
    if on_rows is not None:
        out = encode_counted(encoder, texts, batch_size)
        on_rows(len(texts))
        return out
    both = getattr(encoder, "encode_counted", None)
    if both is not None:
        return both(texts, batch_size=batch_size)
    counts = np.asarray(encoder.token_counts(texts), dtype=np.int32)
    return encoder.encode(texts, batch_size=batch_size), counts


def tokenizing_of(encoder: Encoder) -> Any:
    """The encoder's tokenisation to run apart from its model (`batching.Tokenizing`: picklable,
    texts -> `Pretokenized`), where its model runs on pre-tokenised batches (`encode_tokens`):
    the ONNX backends, torch on CUDA; else None (the encoder tokenises itself).

    Args:
        encoder: Any `Encoder`.

    Returns:
        The `Tokenizing`, or None.
    """
    make = getattr(encoder, "tokenizing", None)
    return make() if make is not None and hasattr(encoder, "encode_tokens") else None


# Model-config keys that change what a transformer computes; stable across library versions
# (paths, versions and training-only settings are left out, so a moved or re-saved model matches).
_ARCHITECTURE_KEYS = ("model_type", "hidden_act", "layer_norm_eps", "position_embedding_type",
                      "num_hidden_layers", "num_attention_heads", "hidden_size",
                      "intermediate_size", "max_position_embeddings", "type_vocab_size",
                      "vocab_size")
_TOKENIZER_KEYS = ("do_lower_case", "lowercase", "strip_accents", "tokenize_chinese_chars",
                   "add_prefix_space", "do_basic_tokenize")


def _digest(obj: Any) -> str:
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def model_config(model) -> dict[str, Any]:
    """Everything besides the weights that decides a sentence-transformers model's embedding:
    each module's type and configuration, the transformer's architecture, the tokenizer's
    vocabulary and settings, the maximum length, prompts, truncation and normalisation."""
    modules = []
    for _, module in model.named_children():
        config = module.get_config_dict() if hasattr(module, "get_config_dict") else {}
        entry: dict[str, Any] = {"type": type(module).__name__,
                                 "config": json.loads(json.dumps(config, default=str))}
        auto = getattr(module, "auto_model", None)
        if auto is not None and getattr(auto, "config", None) is not None:
            arch = auto.config.to_dict()
            entry["architecture"] = {k: arch[k] for k in _ARCHITECTURE_KEYS if k in arch}
        modules.append(entry)
    tokenizer = getattr(model, "tokenizer", None)
    tok: dict[str, Any] = {}
    if tokenizer is not None:
        vocab = sorted(tokenizer.get_vocab().items())
        tok = {"vocab_sha256": _digest(vocab),
               **{k: tokenizer.init_kwargs[k] for k in _TOKENIZER_KEYS
                  if k in getattr(tokenizer, "init_kwargs", {})}}
    return {"modules": modules, "tokenizer": tok,
            "max_length": int(model.max_seq_length or 512), "normalize": True,
            "prompts": getattr(model, "prompts", None) or {},
            "default_prompt_name": getattr(model, "default_prompt_name", None),
            "truncate_dim": getattr(model, "truncate_dim", None)}


def model_fingerprint(encoder: Encoder) -> str:
    """SHA-256 of the weights and everything else that changes an embedding (`model_config`);
    an encoder without a config (a test double) is identified by weights, size and length."""
    fingerprint = getattr(encoder, "fingerprint", None)
    if fingerprint:
        return str(fingerprint)
    return _digest({"weights": encoder.weights_sha256, "dim": encoder.dim,
                    "max_length": encoder.max_length, "normalize": True})


def embedding_key(encoder: Encoder) -> str:
    """Key of a cached embedding: the model's fingerprint, the backend and the compute dtype."""
    return embedding_key_of(model_fingerprint(encoder), getattr(encoder, "backend", "torch"),
                            getattr(encoder, "dtype", "float32"))


def embedding_key_of(fingerprint: str, backend: str, dtype: str = "float32") -> str:
    """`embedding_key` of an encoder with this fingerprint, backend and dtype, without one."""
    return _digest({"model": fingerprint, "backend": backend, "dtype": dtype})


class LazyEncoder:
    """An encoder loaded on first use, whose cache keys are known before it is loaded.

    A task whose screening and embeddings are cached is served without loading the model at
    all (importing sentence-transformers and reading the weights takes seconds).

    Args:
        key: `embedding_key` of the encoder `load` returns (None: unknown until loaded).
        dim: Its embedding dimension.
        load: Loads (and checks) the encoder; called at most once.
        stamp: `models.model_files_stamp` of its directory: cached results are reused
            without loading only while the model's files are unchanged (None: never).
    """

    def __init__(self, key: str | None, dim: int, load: Callable[[], Encoder],
                 stamp: str | None = None) -> None:
        self.key, self.dim, self._load, self._stamp = key, dim, load, stamp
        self._encoder: Encoder | None = None

    @classmethod
    def of(cls, encoder: Encoder) -> "LazyEncoder":
        """An already loaded encoder."""
        lazy = cls(embedding_key(encoder), encoder.dim, lambda: encoder)
        lazy._encoder = encoder
        return lazy

    @property
    def reuse_key(self) -> str | None:
        """The key of results (such as a task's screening) made with this very encoder: its
        embedding key, and for one not yet loaded the stamp of its files; None if unknown."""
        if self.key is None:
            return None
        if self._stamp is not None:
            return _digest({"key": self.key, "files": self._stamp})
        return self.key if self._encoder is not None else None

    @property
    def loaded(self) -> Encoder | None:
        """The encoder if it has been loaded, else None."""
        return self._encoder

    def get(self) -> Encoder:
        """The encoder, loaded now if it was not yet."""
        if self._encoder is None:
            self._encoder = self._load()
        return self._encoder


def model_record(encoder: Encoder) -> dict[str, Any]:
    """The model block of an index manifest."""
    return {
        "name": encoder.name,
        "source": encoder.spec,
        "weights_sha256": encoder.weights_sha256,
        "fingerprint": model_fingerprint(encoder),
        "config": getattr(encoder, "model_config", None) or {},
        "dim": encoder.dim,
        "max_length": encoder.max_length,
        "normalized": True,
        "similarity": "cosine (inner product of L2-normalised embeddings)",
    }


def _config_differences(recorded: Any, given: Any, where: str = "") -> list[str]:
    if isinstance(recorded, dict) and isinstance(given, dict):
        out = []
        for k in sorted(set(recorded) | set(given), key=str):
            out += _config_differences(recorded.get(k), given.get(k), f"{where}.{k}" if where
                                       else str(k))
        return out
    if isinstance(recorded, list) and isinstance(given, list) and len(recorded) == len(given):
        out = []
        for i, (a, b) in enumerate(zip(recorded, given)):
            out += _config_differences(a, b, f"{where}[{i}]")
        return out
    return [] if recorded == given else [f"{where or 'config'} {given!r} (index: {recorded!r})"]


def model_differences(recorded: dict[str, Any], encoder: Encoder) -> list[str]:
    """How `encoder` differs from an index's recorded model; [] when it is the same model.

    Manifests with a fingerprint compare it; older ones compare what they recorded (weights,
    dimension, maximum length)."""
    diffs = []
    if encoder.dim != recorded.get("dim"):
        diffs.append(f"{encoder.dim}-dim embeddings (index: {recorded.get('dim')}-dim)")
    if encoder.weights_sha256 != recorded.get("weights_sha256"):
        diffs.append(f"other weights (index: weights sha256 "
                     f"{str(recorded.get('weights_sha256'))[:12]}...)")
    if recorded.get("max_length") is not None and encoder.max_length != recorded["max_length"]:
        diffs.append(f"max length {encoder.max_length} (index: {recorded['max_length']})")
    if diffs or not recorded.get("fingerprint"):
        return diffs
    if model_fingerprint(encoder) != recorded["fingerprint"]:
        given = getattr(encoder, "model_config", None) or {}
        found = _config_differences(recorded.get("config") or {}, given)
        diffs += found[:3] or ["another configuration (pooling, modules or tokenizer)"]
    return diffs


def file_differences(recorded: dict[str, Any], facts: dict[str, Any]) -> list[str]:
    """How a model folder's configuration files (`models.file_facts`) differ from an index's
    recorded model, before the model is loaded; [] when they agree or cannot tell (its weights
    are compared once it is loaded)."""
    diffs = []
    if facts.get("dim") is not None and facts["dim"] != recorded.get("dim"):
        diffs.append(f"{facts['dim']}-dim embeddings (index: {recorded.get('dim')}-dim)")
    if facts.get("max_length") is not None and recorded.get("max_length") is not None \
            and facts["max_length"] != recorded["max_length"]:
        diffs.append(f"max length {facts['max_length']} (index: {recorded['max_length']})")
    modules = (recorded.get("config") or {}).get("modules") or [{}]
    known = modules[0].get("architecture") or {}
    found = facts.get("architecture") or {}
    for key in _ARCHITECTURE_KEYS:
        if key in known and key in found and found[key] != known[key]:
            diffs.append(f"{key} {found[key]} (index: {known[key]})")
    return diffs


def _no_gpu_driver() -> bool:
    """True when this is a Linux machine without an NVIDIA, ROCm or WSL GPU device: torch could
    not see a GPU, so `auto` is the CPU without importing torch (about a second)."""
    import sys
    from pathlib import Path

    if not sys.platform.startswith("linux"):
        return False
    return not any(Path(p).exists() for p in ("/proc/driver/nvidia", "/dev/nvidiactl",
                                              "/dev/nvidia0", "/dev/kfd", "/dev/dxg"))


def pick_device(device: str) -> str:
    """`auto` -> cuda when torch sees a GPU, else cpu; `cuda` without a GPU is an error.

    Raises:
        InputError: a device other than auto, cpu, cuda, cuda:N or mps, or cuda where torch
            sees no GPU.
    """
    if not isinstance(device, str) or not re.fullmatch(r"auto|cpu|cuda(:\d+)?|mps", device):
        raise InputError(f"must be auto, cpu, cuda, cuda:N or mps, got {device!r}",
                         param="device")
    if device == "auto" and _no_gpu_driver():
        return "cpu"
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InputError("cuda was asked for, but torch sees no CUDA GPU", param="device")
    return device


BACKENDS = ("auto", "torch", "onnx", "onnx-int8")
# Measured on the 2-core CPUs (benchmarks/results/speed_encode.md, docs/performance-encoding.md):
# the fp32 ONNX export (run as the fused graph) embeds faster than torch with identical
# selections; int8 is faster still but its selections overlap fp32's only 0.93-0.98 at the oracle
# budget, so it is opt-in. On CUDA, torch in fp16 (`SentenceTransformerEncoder`, measured).
CPU_DEFAULT = "onnx"


def resolve_backend(backend: str, device: str) -> str:
    """`auto` -> the measured fastest safe backend for the device; ONNX on CUDA is refused."""
    if backend not in BACKENDS:
        raise InputError(f"unknown backend {backend!r} (choose from {', '.join(BACKENDS)})",
                         param="backend")
    if backend == "auto":
        return "torch" if device.startswith("cuda") else CPU_DEFAULT
    if backend.startswith("onnx") and device.startswith("cuda"):
        raise InputError(f"{backend} runs on the CPU only; use torch with `device` cuda",
                        param="backend")
    return backend


def load_encoder(spec: str | None = None, device: str = "auto", backend: str = "auto",
                 threads: int | None = None,
                 check: Callable[[Encoder], None] | None = None) -> "Encoder":
    """The encoder for a model argument, device and backend (`auto`: fastest safe for the device).

    `check` is called with the model as soon as its identity is known (its facts cached, or its
    weights loaded), before anything slow is made of it (an ONNX export): a wrong model is
    refused first. A model argument that names a local folder which is not there is refused
    before anything is imported (`models.missing_model`). A model name registered with
    `tapt.extend.register_encoder` makes that encoder.
    """
    if registered(spec):
        encoder = load_registered(spec, device, backend)
        (check or (lambda encoder: None))(encoder)
        return encoder
    missing = missing_model(spec)
    if missing:
        raise InputError(missing, param="model")
    spec = absolute_spec(spec)
    device = pick_device(device)
    backend = resolve_backend(backend, device)
    check = check or (lambda encoder: None)
    if backend == "torch":
        encoder = SentenceTransformerEncoder(spec, device=device)
        check(encoder)
        return encoder
    from tapt.indexer.encoding.model_facts import load_facts, record_facts
    from tapt.indexer.encoding.models import model_files_stamp
    from tapt.indexer.encoding.onnx_encoder import OnnxEncoder, graph_of
    from tapt.indexer.encoding.onnx_export import export_ready

    # An unchanged model directory seen before: its facts and tokenizer from the cache, and
    # its ONNX export, without importing sentence-transformers or reading the weights.
    stamp = model_files_stamp(spec)
    light = load_facts(stamp, lambda base_spec: SentenceTransformerEncoder(base_spec, device="cpu"))
    if light is not None:
        check(light)            # before its export is made or read
        if export_ready(light.fingerprint, graph_of(backend)):
            light.spec = spec   # this directory as given now, not as another run spelt it
            return OnnxEncoder(light, backend, threads=threads)
    base = SentenceTransformerEncoder(spec, device="cpu")
    check(base)                 # before the export: minutes for a model never exported
    record_facts(base, stamp)
    return OnnxEncoder(base, backend, threads=threads)


DTYPES = ("auto", "float32", "float16", "bfloat16")
CUDA_PAD_TO = 8  # batch widths on CUDA: tensor-core tiles, and a handful of shapes, not hundreds
# Texts per batch where none is given: on CUDA a forward pass of 64 short texts is over before
# the host has launched the next one (benchmarks/results/gpu_runs.md); 1024 keeps the GPU busy.
CUDA_BATCH_SIZE = 1024
CPU_BATCH_SIZE = 64


def preferred_batch_size(encoder: Encoder) -> int:
    """Texts per encoder batch when the caller names none: 1024 on CUDA, 64 elsewhere.

    Args:
        encoder: Any `Encoder`.

    Returns:
        The batch size.
    """
    device = str(getattr(encoder, "device", "cpu"))
    return CUDA_BATCH_SIZE if device.startswith("cuda") else CPU_BATCH_SIZE


class SentenceTransformerEncoder:
    """A sentence-transformers model; `spec` is a local directory, the packaged default or a hub name."""

    backend = "torch"
    dtype = "float32"

    def __init__(self, spec: str | None = None, device: str = "auto", dtype: str = "auto") -> None:
        """Load the model.

        Args:
            spec: Model directory or hub name (None: the packaged all-MiniLM-L6-v2).
            device: auto, cpu, cuda, cuda:N or mps.
            dtype: Compute precision on CUDA: auto (float16), float32, float16 or bfloat16; the
                CPU always computes in float32. float16 is the CUDA default by measurement: on
                an H200 it embedded 1.8x as fast as float32 at batch 1024, and its selections
                overlapped float32's 0.998 or more at the oracle budget; bfloat16's only
                0.989 (benchmarks/results/gpu_runs.md).

        Raises:
            InputError: the model cannot be loaded, or an unknown device or dtype.
        """
        if dtype not in DTYPES:
            raise InputError(f"must be one of {', '.join(DTYPES)}, got {dtype!r}", param="dtype")
        import transformers
        from sentence_transformers import SentenceTransformer

        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()
        self.device = pick_device(device)
        spec = absolute_spec(spec)
        self.name = display_name(spec)
        self.spec = spec
        source = resolve_model(spec)
        try:
            self.model = SentenceTransformer(source, device=self.device)
        except (OSError, ValueError, KeyError) as exc:
            raise InputError(load_failure(spec, "cannot load model", exc)) from exc
        dim = self.model.get_embedding_dimension() if hasattr(
            self.model, "get_embedding_dimension"
        ) else self.model.get_sentence_embedding_dimension()
        if not dim:
            raise InputError(f"model {spec!r} does not report an embedding dimension")
        self.dim = int(dim)
        self.max_length = int(self.model.max_seq_length or 512)
        # Hashed before any fp16 cast, so CPU- and GPU-built indexes of one model agree.
        self._hash = _state_sha256(self.model)
        self.model_config = model_config(self.model)
        self.fingerprint = _digest({"weights": self._hash, **self.model_config})
        if dtype == "auto":
            dtype = "float16"
        if self.device.startswith("cuda") and dtype != "float32":
            import torch

            self.model.to(getattr(torch, dtype))  # cosine to fp32: fp16 ~0.99995, bf16 ~0.9999
            self.dtype = dtype

    @property
    def weights_sha256(self) -> str:
        return self._hash

    @property
    def tokenizer(self) -> Any:
        """The model's Hugging Face tokenizer."""
        return self.model.tokenizer

    def encode_counted(self, texts: Sequence[str], batch_size: int = 64
                       ) -> tuple[np.ndarray, np.ndarray]:
        """`encode` and `token_counts` (see `encode_counted`); on CUDA tokenised once."""
        if self.device.startswith("cuda"):
            return self._encode_cuda(list(texts), batch_size, counted=True)
        counts = self.token_counts(texts)
        return self.encode(texts, batch_size=batch_size), counts

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        if self.device.startswith("cuda"):
            return self._encode_cuda(list(texts), batch_size)
        emb = self.model.encode(
            list(texts),
            batch_size=batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(emb, dtype=np.float32)

    def tokenizing(self) -> Any:
        """This encoder's tokenisation, to run apart from the model, where its model runs on
        pre-tokenised batches: on CUDA (`encode_tokens`).

        Returns:
            A picklable `batching.Tokenizing` (texts -> `Pretokenized`); None on the CPU, where
            sentence-transformers tokenises itself.
        """
        from tapt.indexer.encoding.batching import Tokenizing

        return Tokenizing(self.model.tokenizer, self.max_length) if self._own_batches else None

    @property
    def _own_batches(self) -> bool:
        return self.device.startswith("cuda")

    def encode_tokens(self, tokens: Any, batch_size: int = 64) -> tuple[np.ndarray, np.ndarray]:
        """`encode_counted` of texts tokenised already (by `tokenizing()`): the forward pass
        only, the same embeddings (CUDA only).

        Args:
            tokens: The texts' `batching.Pretokenized` tokens.
            batch_size: Most texts per batch.

        Returns:
            (embeddings, counts) in the texts' order.
        """
        if not self._own_batches:
            raise InputError("this encoder tokenises itself on the CPU: use encode_counted")
        return self._forward_cuda(tokens.tokens, len(tokens), batch_size), tokens.counts

    def _encode_cuda(self, texts: list[str], batch_size: int, counted: bool = False
                     ) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        """Tokenised once on every core (`batching.Tokenizing`), then `_forward_cuda`.
        `counted`: also the untruncated token counts, from the same tokenisation
        (`SortedBatches.full_lengths`)."""
        from tapt.indexer.encoding.batching import Tokenizing

        if not texts:
            empty = np.empty((0, self.dim), dtype=np.float32)
            return (empty, np.empty(0, dtype=np.int32)) if counted else empty
        names = ("input_ids", "attention_mask", "token_type_ids")
        if counted:
            done = Tokenizing(self.model.tokenizer, self.max_length, names)(texts)
            return self._forward_cuda(done.tokens, len(texts), batch_size), done.counts
        from tapt.indexer.encoding.batching import SortedBatches

        tokens = SortedBatches(self.model.tokenizer, texts, self.max_length, names)
        return self._forward_cuda(tokens, len(texts), batch_size)

    def _forward_cuda(self, tokens: Any, n: int, batch_size: int) -> np.ndarray:
        """The model on length-sorted batches of `tokens` (a `SortedBatches` of `n` texts),
        padded (to a multiple of CUDA_PAD_TO) one ahead on a thread into pinned memory, results
        kept on the GPU and copied back once: the GPU never waits on the host."""
        from concurrent.futures import ThreadPoolExecutor

        import torch

        batches = tokens.batches(batch_size)

        def prepare(rows: np.ndarray) -> dict:
            return {k: torch.from_numpy(v).pin_memory()
                    for k, v in tokens.features(rows, pad_to=CUDA_PAD_TO).items()}

        parts = []
        with ThreadPoolExecutor(max_workers=1) as pool, torch.inference_mode():
            ahead = pool.submit(prepare, batches[0])
            for b in range(len(batches)):
                features = {k: v.to(self.device, non_blocking=True) for k, v in ahead.result().items()}
                if b + 1 < len(batches):
                    ahead = pool.submit(prepare, batches[b + 1])
                parts.append(self.model(features)["sentence_embedding"].float())
            emb = torch.nn.functional.normalize(torch.cat(parts), dim=1)  # in fp32, not half
            out = np.empty((n, self.dim), dtype=np.float32)
            out[np.concatenate(batches)] = emb.cpu().numpy()
        return out

    def token_counts(self, texts: Sequence[str]) -> np.ndarray:
        from tapt.indexer.encoding.batching import token_lengths

        return token_lengths(self.model.tokenizer, texts)


def _state_sha256(model) -> str:
    """Hash of every parameter tensor (name and bytes): identifies the weights, not the files."""
    import torch

    h = hashlib.sha256()
    state = model.state_dict()
    for key in sorted(state):
        tensor = state[key].detach().cpu().contiguous()
        h.update(key.encode())
        h.update(str(tensor.dtype).encode())
        h.update(tensor.view(-1).view(dtype=torch.uint8).numpy().tobytes())
    return h.hexdigest()
