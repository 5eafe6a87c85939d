"""What loading a model tells the ONNX encoder, cached per model directory: its sizes, weights
hash, fingerprint and configuration, and a copy of its tokenizer.

Loading a sentence-transformers model to run its ONNX export needs none of its weights, yet
importing sentence-transformers and torch and hashing the weights takes seconds on a CPU. Once
a model has been loaded, these facts are kept under `$TAPT_CACHE_DIR/model-facts-v1/`, keyed by
`models.model_files_stamp` (the model directory's file names, sizes and modification times), and
a later ONNX encoder of the same unchanged directory starts from them (`LightModel`).

The tokenizer copy is saved with `save_pretrained` and read back as a `PreTrainedTokenizerFast`;
it is kept only when it tokenises `batching.PROBES` exactly as the model's own tokenizer does
(with and without special tokens, truncated at the model's maximum length). Every file of an
entry is checked against the SHA-256 its `facts.json` records before use; a damaged entry is
rebuilt from the model with a warning.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

from tapt.errors import TaptError
from tapt.util.cache import read_checked, readable_cache, writable_cache, write_checked
from tapt.util.files import sha256_file

log = logging.getLogger(__name__)

SUBDIR = "model-facts-v1"
FACTS = ("name", "spec", "dim", "max_length", "weights_sha256", "fingerprint", "model_config")


class LightModel:
    """The facts of a model and its tokenizer, for `OnnxEncoder`, without its weights.

    `model` loads the sentence-transformers model after all (only needed to export it to ONNX
    when no export is cached) and refuses one whose fingerprint has changed.
    """

    def __init__(self, facts: dict[str, Any], tokenizer: Any,
                 load_base: Callable[[str], Any] | None = None) -> None:
        self._load_base = load_base
        self.name, self.spec = facts["name"], facts["spec"]
        self.dim, self.max_length = int(facts["dim"]), int(facts["max_length"])
        self.weights_sha256, self.fingerprint = facts["weights_sha256"], facts["fingerprint"]
        self.model_config = facts["model_config"]
        self.tokenizer = tokenizer
        self._model: Any = None

    @property
    def model(self) -> Any:
        if self._model is None:
            if self._load_base is None:
                raise TaptError(f"model {self.name}: no loader to read its weights with")
            base = self._load_base(self.spec)
            if base.fingerprint != self.fingerprint:
                raise TaptError(f"model {self.name} changed while it was being loaded; "
                                "run the command again")
            self._model = base.model
        return self._model


def _same_tokenizer(a: Any, b: Any, max_length: int) -> bool:
    """Whether `b` tokenises `batching.PROBES` exactly as `a` (on copies: a call with
    truncation reconfigures a fast tokenizer's backend)."""
    from tapt.indexer.encoding.batching import PROBES

    for attr in ("unk_token_id", "pad_token_id", "model_max_length", "padding_side",
                 "truncation_side", "model_input_names", "is_fast"):
        if getattr(a, attr, None) != getattr(b, attr, None):
            return False
    texts = list(PROBES)
    for kwargs in ({"truncation": True, "max_length": max_length},
                   {"add_special_tokens": False, "truncation": False}):
        if dict(copy.deepcopy(a)(texts, **kwargs)) != dict(copy.deepcopy(b)(texts, **kwargs)):
            return False
    return True


def _load_tokenizer(directory: Path, input_names: list[str]) -> Any:
    """The saved tokenizer as the generic fast class (its own class may need imports of
    model code), told the inputs the model's class names (the generic class names two)."""
    from transformers.tokenization_utils_fast import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(directory),
                                                   model_input_names=list(input_names))


def _checked_record(entry: Path) -> dict[str, Any] | None:
    """The record of a cache entry whose files all match it; None when it has none (a
    damaged `facts.json` also warns); ValueError (or OSError) when a file does not match."""
    payload = read_checked(entry / "facts.json", 1 << 20)
    if payload is None:
        return None
    try:
        record = json.loads(payload)
        facts, files = record["facts"], record["tokenizer_files"]
        input_names = record["model_input_names"]
    except (KeyError, TypeError) as exc:
        raise ValueError(f"fields missing ({exc})") from exc
    if set(facts) != set(FACTS) or not files or not input_names:
        raise ValueError("fields missing")
    for name, digest in files.items():
        if Path(name).name != name or sha256_file(entry / "tokenizer" / name) != digest:
            raise ValueError(f"tokenizer file {name} does not match its checksum")
    if sorted(p.name for p in (entry / "tokenizer").iterdir()) != sorted(files):
        raise ValueError("tokenizer files differ from those recorded")
    return record


def load_facts(stamp: str | None, load_base: Callable[[str], Any] | None = None
               ) -> LightModel | None:
    """The cached facts of the model whose directory has `stamp`; None when there are none
    (or they are damaged: then with a warning, and the caller loads the model). `load_base`
    loads the full model from its spec when `LightModel.model` needs its weights (the encoder
    module passes it: this one sits below it)."""
    if stamp is None:
        return None
    found = readable_cache(SUBDIR)
    if found is None:
        return None
    entry = found / stamp
    try:
        record = _checked_record(entry)
        if record is None:
            return None
        return LightModel(record["facts"],
                          _load_tokenizer(entry / "tokenizer", record["model_input_names"]),
                          load_base)
    except (ValueError, TypeError, OSError) as exc:
        log.warning("cache entry %s is damaged (%s); loading the model", entry, exc)
        return None


def record_facts(base: Any, stamp: str | None) -> bool:
    """Cache what `base` (a loaded `SentenceTransformerEncoder`) tells, under `stamp` (taken
    before it was loaded); False when it cannot be (no stamp, no writable cache, a tokenizer
    whose saved copy tokenises differently)."""
    tokenizer = getattr(base.model, "tokenizer", None)
    if stamp is None or not getattr(tokenizer, "is_fast", False):
        return False
    root = writable_cache(SUBDIR)
    if root is None:
        return False
    work = Path(tempfile.mkdtemp(prefix=".facts-", dir=root))
    try:
        tokenizer.save_pretrained(str(work / "tokenizer"))
        input_names = list(tokenizer.model_input_names)
        copied = _load_tokenizer(work / "tokenizer", input_names)
        if not _same_tokenizer(tokenizer, copied, base.max_length):
            log.info("the tokenizer of %s does not read back identically; its facts are not "
                     "cached", base.name)
            return False
        files = {p.name: sha256_file(p) for p in sorted((work / "tokenizer").iterdir())
                 if p.is_file()}
        facts = {name: getattr(base, name) for name in FACTS}
        payload = json.dumps({"facts": facts, "tokenizer_files": files,
                              "model_input_names": input_names}, sort_keys=True)
        if not write_checked(work / "facts.json", payload.encode()):
            return False
        target = root / stamp
        if target.exists():
            try:
                if _checked_record(target) is not None:
                    return True      # another process recorded it meanwhile
            except (ValueError, OSError):
                pass                 # damaged: replaced below
            aside = root / f".{stamp}.damaged-{os.getpid()}"
            os.replace(target, aside)
            shutil.rmtree(aside, ignore_errors=True)
        try:
            os.rename(work, target)
        except OSError:  # another process recorded it first
            return False
        return True
    except (OSError, ValueError, TypeError) as exc:
        log.info("facts of %s not cached (%s)", base.name, exc)
        return False
    finally:
        shutil.rmtree(work, ignore_errors=True)
