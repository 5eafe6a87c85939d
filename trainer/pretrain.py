"""`tapt pretrain`: a general masked LM of a corpus, trained on a seeded random sample of an
index's own rows - Don't Stop Pretraining's starting point (a model of the general corpus) at a
size that trains where you are.

By default the model is new: a WordPiece vocabulary learnt from the sample (or the index
model's tokenizer) and a BERT of a named size (`tapt.modeling.scratch.PRESETS`); with `model`
an existing masked LM continues on the sample instead (it warms a newly initialised head, such
as the packaged model's, on general text). Either way the run is `tapt train`'s: the same loop,
checkpoints, resume, manifest and output directory (`trainer.loop.run`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from tapt.errors import InputError
from tapt.modeling.scratch import PRESETS
from tapt.trainer.config import MAX_COUNT, MAX_SEED, MLM_EVAL_BATCH, check_run_settings, run_setting
from tapt.util.checks import choice, path_text, whole_number

TOKENIZERS = ("wordpiece", "index")
_SHAPE = ("vocab_size", "hidden_size", "layers", "heads", "intermediate_size")
_PRESET_FIELDS = (*_SHAPE, "max_length", "sample", "steps", "batch_size", "lr")
# what defines the model a run makes (a cache of general models is keyed by it)
IDENTITY_FIELDS = ("preset", "model", "tokenizer", *_PRESET_FIELDS, "warmup", "weight_decay",
                   "max_grad_norm", "mlm_probability", "seed")


def _preset_help(name: str) -> str:
    values = ", ".join(f"{p} {PRESETS[p][name]:,}" if isinstance(PRESETS[p][name], int)
                       else f"{p} {PRESETS[p][name]:g}" for p in PRESETS)
    return f" [default: the preset's: {values}]"


@dataclass(frozen=True)
class PretrainConfig:
    """The settings of one `tapt pretrain` run; a preset fills every size left at None, and
    any value that cannot work raises InputError naming its field."""

    out: str
    preset: str = field(default="cpu", metadata={
        "help": "Named size: tiny (seconds, for trying things), cpu (tens of minutes on two "
                "cores), gpu (minutes on one GPU).", "choices": tuple(PRESETS),
        "show_default": True})
    model: str | None = field(default=None, metadata={
        "help": "Continue this masked LM (directory or hub name) on the sample instead of "
                "making a new one: warms a newly initialised head on general text (the size "
                "and vocabulary settings are then the model's own)."})
    tokenizer: str = field(default="wordpiece", metadata={
        "help": "Vocabulary of a new model: wordpiece (learnt from the sample) or index (the "
                "index model's tokenizer).", "choices": TOKENIZERS, "show_default": True})
    vocab_size: int | None = field(default=None, metadata={
        "help": "Tokens of a learnt WordPiece vocabulary." + _preset_help("vocab_size")})
    hidden_size: int | None = field(default=None, metadata={
        "help": "Width of the new model's hidden states." + _preset_help("hidden_size")})
    layers: int | None = field(default=None, metadata={
        "help": "Transformer layers of the new model." + _preset_help("layers")})
    heads: int | None = field(default=None, metadata={
        "help": "Attention heads of the new model." + _preset_help("heads")})
    intermediate_size: int | None = field(default=None, metadata={
        "help": "Feed-forward width of the new model." + _preset_help("intermediate_size")})
    max_length: int | None = field(default=None, metadata={
        "help": "Tokens per example (and the new model's positions)."
                + _preset_help("max_length")})
    sample: int | None = field(default=None, metadata={
        "help": "Sentences of the index drawn at random (whole segments) to train on."
                + _preset_help("sample")})
    steps: int | None = field(default=None, metadata={
        "help": "Optimizer steps." + _preset_help("steps")})
    batch_size: int | None = field(default=None, metadata={
        "help": "Examples per step." + _preset_help("batch_size")})
    lr: float | None = field(default=None, metadata={
        "help": "Peak learning rate." + _preset_help("lr")})
    warmup: float = run_setting("warmup")
    weight_decay: float = run_setting("weight_decay")
    max_grad_norm: float = run_setting("max_grad_norm")
    mlm_probability: float = run_setting("mlm_probability")
    seed: int = field(default=0, metadata={
        "help": "Seed of the sample, the vocabulary's input order, the initialisation, data "
                "order and masks.", "minimum": 0, "maximum": MAX_SEED, "show_default": True})
    device: str = run_setting("device")
    resume: bool = run_setting("resume")
    save_every: int = run_setting("save_every")
    keep_checkpoints: int = run_setting("keep_checkpoints")
    delete_checkpoints: bool = run_setting("delete_checkpoints")
    progress: bool = True

    # what `trainer.loop.run` reads of a training run's settings
    epochs = None
    weights = "discrete"
    eval_every = 0
    eval_batch_size = MLM_EVAL_BATCH

    def __post_init__(self) -> None:
        if self.out is None or (isinstance(self.out, str) and not self.out):
            raise InputError("is required", param="out")
        object.__setattr__(self, "out", path_text(self.out, "out"))
        choice(self.preset, "preset", tuple(PRESETS))
        choice(self.tokenizer, "tokenizer", TOKENIZERS)
        if self.model is not None:
            object.__setattr__(self, "model", path_text(self.model, "model"))
        for name in _PRESET_FIELDS:
            if getattr(self, name) is None:
                object.__setattr__(self, name, PRESETS[self.preset][name])
        for name in (*_SHAPE, "sample", "steps"):
            whole_number(getattr(self, name), name, maximum=MAX_COUNT)
        check_run_settings(self)
        if self.vocab_size < 100:
            raise InputError(f"must be at least 100 tokens, got {self.vocab_size}",
                             param="vocab_size")
        if self.hidden_size % self.heads:
            raise InputError(f"{self.heads} heads do not divide a hidden size of "
                             f"{self.hidden_size}", param="heads")
        for name in IDENTITY_FIELDS:
            value = getattr(self, name)     # numpy scalars as plain numbers: JSON for the manifest
            if isinstance(value, (np.integer, np.floating)):
                object.__setattr__(self, name, value.item())

    def identity_fields(self) -> dict[str, Any]:
        """The settings that define the model the run makes (not where or how it runs)."""
        return {name: getattr(self, name) for name in IDENTITY_FIELDS}

    def to_dict(self) -> dict[str, Any]:
        """All settings, JSON-ready (for the manifest)."""
        return asdict(self)


def sample_record(units: Sequence[Sequence[str]], index: dict[str, Any], seed: int
                  ) -> dict[str, Any]:
    """What a run trained on: the index's identity, the sample's seed, size and a hash of its
    text (in order).

    Args:
        units: The sampled segments' sentences.
        index: The index's identity (uuid, manifest_sha256, ...).
        seed: The seed the sample was drawn with.

    Returns:
        A JSON-ready record.
    """
    h = hashlib.sha256()
    for unit in units:
        for sentence in unit:
            h.update(sentence.encode("utf-8"))
            h.update(b"\x00")
        h.update(b"\x01")
    return {"index": index, "seed": int(seed), "segments": len(units),
            "sentences": int(sum(len(u) for u in units)), "sha256": h.hexdigest()}


def pretrain(config: PretrainConfig, units: Sequence[Sequence[str]], sample: dict[str, Any],
             inputs: Sequence[str | Path], index_model: str | None = None) -> dict[str, Any]:
    """Train the general model of `config` on the sampled segments `units` into `config.out`.

    Args:
        config: The run's settings.
        units: The sample: each segment's sentences, in order.
        sample: `sample_record` of it.
        inputs: The paths the run reads (the index), which `out` may not be.
        index_model: The index's model (for `tokenizer` index).

    Returns:
        The training manifest (`pretrain`: preset, shape, tokenizer, sample).

    Raises:
        InputError: a sample without text, a model that cannot be loaded.
    """
    import torch

    from tapt.indexer.encoding.models import resolve_model
    from tapt.modeling import mlm
    from tapt.modeling.scratch import Architecture, new_masked_lm, train_wordpiece
    from tapt.trainer.data import Example, pack_sentences
    from tapt.trainer.loop import run
    from tapt.trainer.outdir import check_output
    from tapt.trainer.plan import TrainingPlan

    inputs = [Path(p) for p in inputs]
    check_output(Path(config.out), None, config.resume, inputs)
    if not any(any(s.strip() for s in unit) for unit in units):
        raise InputError("the sample holds no text to train on", param="sample")
    torch.manual_seed(config.seed)   # a base encoder's new head, the dropout masks: reproducibly
    if config.model is not None:
        model, tokenizer, info = mlm.load_mlm(config.model, warn=False)
        mlm.check_max_length(model, config.max_length, info["name"])
        vocabulary = {"kind": "model", "size": len(tokenizer)}
    else:
        if config.tokenizer == "index":
            tokenizer = mlm.load_tokenizer(resolve_model(index_model), str(index_model))
            vocabulary = {"kind": "index", "model": str(index_model), "size": len(tokenizer)}
        else:
            sentences = (s for unit in units for s in unit)
            tokenizer = train_wordpiece(sentences, config.vocab_size, config.max_length)
            vocabulary = {"kind": "wordpiece", "size": len(tokenizer),
                          "sha256": hashlib.sha256(json.dumps(
                              tokenizer.get_vocab(), sort_keys=True).encode()).hexdigest()}
        shape = Architecture(len(tokenizer), config.hidden_size, config.layers, config.heads,
                             config.intermediate_size, config.max_length)
        model = new_masked_lm(shape, tokenizer, config.seed)
        info = {"name": f"new BERT ({config.preset} preset)", "path": None,
                "architecture": type(model).__name__, "head_initialised": True,
                "shape": shape.to_json(), "warnings": []}
    packed = pack_sentences([list(u) for u in units], tokenizer, config.max_length)
    examples = [Example(ids, 1.0, "sample") for unit in packed for ids in unit]
    plan = TrainingPlan(examples, [], ratio=None, weights="discrete", seed=config.seed,
                        batch_size=config.batch_size)
    identity = {"sample": sample["sha256"], "vocabulary": vocabulary}
    record = {"arguments": config.to_dict(),
              "pretrain": {"preset": config.preset, "shape": info.get("shape"),
                           "vocabulary": vocabulary, "sample": sample},
              "selections": [], "task": [], "eval_text": [],
              "examples": {"selection": len(examples), "task": 0}}
    return run(config, model, tokenizer, info, plan, [], identity, record, inputs)
