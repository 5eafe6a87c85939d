"""Load a masked-LM model and its tokenizer from a local directory, the packaged default or a hub name.

The packaged default (all-MiniLM-L6-v2) is a sentence-transformers directory whose config is a plain
`BertModel`: `AutoModelForMaskedLM` then builds a `BertForMaskedLM` whose prediction head (transform
dense + LayerNorm + output bias) is newly initialised. As in BERT, the output decoder is tied to the
word embeddings, so the head starts from the pretrained vocabulary matrix and only the small transform
is random; a few hundred steps of MLM training on generic text warm it up.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from tapt.errors import InputError
from tapt.indexer.encoding.models import display_name, load_failure, resolve_model
from tapt.util.training import quiet_transformers

logger = logging.getLogger(__name__)


TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json")


def _looks_like_path(spec: str) -> bool:
    """A user argument meant as a directory (hub names are 'name' or 'owner/name')."""
    return spec.startswith((".", "/", "~")) or spec.count("/") > 1 or "\\" in spec


def _masked_lm_types() -> set[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    return set(MODEL_FOR_MASKED_LM_MAPPING_NAMES)


def load_tokenizer(path: str, name: str) -> Any:
    """The tokenizer of a model; it must exist and have a mask token."""
    from transformers import AutoTokenizer

    try:
        with quiet_transformers():
            tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise InputError(f"model {name} has no usable tokenizer: {str(exc).splitlines()[0]}") from exc
    if getattr(tokenizer, "mask_token_id", None) is None:
        raise InputError(f"the tokenizer of {name} has no mask token; it cannot train a masked LM")
    if getattr(tokenizer, "pad_token_id", None) is None:
        raise InputError(f"the tokenizer of {name} has no padding token")
    if len(tokenizer) <= len(set(tokenizer.all_special_ids)) + 1:
        raise InputError(f"the tokenizer of {name} has no vocabulary")
    return tokenizer


def _tie_head(model: Any) -> bool:
    """Tie the output decoder to the input embeddings (as BERT does); True when they are tied."""
    out, inp = model.get_output_embeddings(), model.get_input_embeddings()
    if out is None or inp is None:
        return False
    tie = getattr(model.config, "tie_word_embeddings", True) is not False
    if tie and out.weight is not inp.weight and out.weight.shape == inp.weight.shape:
        out.weight = inp.weight
    return out.weight is inp.weight


def load_mlm(spec: str | None, warn: bool = True) -> tuple[Any, Any, dict[str, Any]]:
    """(model, tokenizer, info) for a model argument; info has `name`, `path`, `head_initialised`
    and `warnings`.

    Refuses a directory without config, weights or tokenizer, and an architecture that has no
    masked-LM head in transformers (e.g. GPT-2). A base encoder without head weights is accepted with a
    warning: its head is initialised (call `torch.manual_seed` first for a reproducible head).
    With `warn` False the warning is only in `info["warnings"]`, for the caller to log once its
    own refusals are past.
    """
    from transformers import AutoConfig, AutoModelForMaskedLM

    if spec is not None and not Path(spec).expanduser().exists() and _looks_like_path(spec):
        raise InputError(f"model directory {spec} does not exist")
    path = resolve_model(spec)
    name = display_name(spec)
    local = Path(path)
    if local.exists():
        if not (local / "config.json").is_file():
            raise InputError(f"model directory {path} has no config.json (not a transformers model)")
        if not any((local / f).is_file() for f in TOKENIZER_FILES) and not list(local.glob("*.model")):
            raise InputError(f"model directory {path} has no tokenizer files ({', '.join(TOKENIZER_FILES)})")
    try:
        with quiet_transformers():
            config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(load_failure(spec, "cannot load the config of model", exc)) from exc
    if config.model_type not in _masked_lm_types():
        archs = ", ".join(getattr(config, "architectures", None) or [config.model_type])
        raise InputError(
            f"model {name} ({archs}) is not a masked-LM architecture; use an encoder such as "
            f"BERT, RoBERTa or DistilBERT"
        )
    tokenizer = load_tokenizer(path, name)
    try:
        with quiet_transformers():
            model, loading = AutoModelForMaskedLM.from_pretrained(path, output_loading_info=True)
    except (OSError, ValueError, RuntimeError) as exc:
        raise InputError(load_failure(spec, "cannot load the weights of model", exc)) from exc
    # Half-precision checkpoints train in fp32 master weights (autocast supplies bf16 on a GPU).
    model = model.float()
    prefix = getattr(model, "base_model_prefix", "") or ""
    missing = sorted(loading.get("missing_keys") or [])
    missing_base = [k for k in missing if prefix and k.startswith(prefix + ".")]
    if missing_base:
        raise InputError(
            f"the weights of model {name} do not match its config ({len(missing_base)} encoder "
            f"tensors missing, e.g. {missing_base[0]})"
        )
    head_initialised = bool(missing)
    tied = _tie_head(model) if head_initialised else None
    warnings = []
    if head_initialised:
        warnings.append(
            f"model {name} has no masked-LM head weights (config "
            f"{', '.join(getattr(config, 'architectures', None) or [config.model_type])}): the "
            "head is newly initialised"
            + (", its decoder tied to the word embeddings" if tied else ""))
        if warn:
            logger.warning("%s", warnings[-1])
    if len(tokenizer) > model.get_input_embeddings().weight.shape[0]:
        raise InputError(
            f"the tokenizer of {name} has {len(tokenizer)} tokens but the model only "
            f"{model.get_input_embeddings().weight.shape[0]} embeddings"
        )
    info = {"name": name, "path": path, "head_initialised": head_initialised,
            "architecture": type(model).__name__, "warnings": warnings}
    return model, tokenizer, info


def max_positions(model: Any) -> int | None:
    """Longest input the model accepts (RoBERTa-style models reserve pad_token_id + 1 positions)."""
    config = model.config
    n = getattr(config, "max_position_embeddings", None)
    if n is None:
        return None
    if config.model_type in {"roberta", "xlm-roberta", "camembert", "xlm-roberta-xl", "data2vec-text",
                             "roberta-prelayernorm", "xmod", "ibert", "longformer"}:
        n -= (config.pad_token_id or 0) + 1
    return int(n)


def check_max_length(model: Any, max_length: int, name: str) -> None:
    """Refuse a `max_length` longer than the model's positions (InputError naming it), before
    any text is packed to that length."""
    limit = max_positions(model)
    if limit is not None and max_length > limit:
        raise InputError(f"{max_length} exceeds what {name} accepts ({limit})",
                         param="max_length")
