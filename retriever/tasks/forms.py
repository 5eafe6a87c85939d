"""A task as a user gives it: files (or stdin), a list of strings, or ready embeddings.

Files are read with the corpus readers; strings are split into sentences as the
index was; embeddings are used as they are (methods that read the text then refuse). Before a
task is embedded, `screen_tokens` refuses one the model cannot read at all and warns about one
it mostly cannot.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence

import numpy as np

from tapt.errors import InputError
from tapt.util.checks import path_text

if TYPE_CHECKING:
    from tapt.indexer.reading.reader import TextInput

log = logging.getLogger(__name__)

# Above this share of unknown tokens a task is mostly text the model was not trained on.
UNKNOWN_TOKEN_WARNING = 0.2
STDIN = "-"      # a task path that reads standard input
_FILE_SUFFIXES = (".txt", ".text", ".jsonl", ".json", ".ndjson", ".jl", ".gz", ".zst", ".bz2",
                  ".xz", ".csv", ".tsv", ".parquet", ".arrow")


@dataclass
class TaskInput:
    """The task's sentences (or embeddings) and where they came from.

    Attributes:
        kind: "files", "texts" or "embeddings".
        files: The task files as given ("-" for stdin).
        sha256: Hash of the files' bytes, of the strings, or of the embeddings.
        sentences: The task's sentences (None for embeddings).
        embeddings: L2-normalised task embeddings (only for kind "embeddings").
    """

    kind: Literal["files", "texts", "embeddings"]
    files: list[str]
    sha256: str
    sentences: list[str] | None = None
    embeddings: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.sentences) if self.sentences is not None else len(self.embeddings)

    def to_manifest(self) -> dict[str, Any]:
        return {"kind": self.kind, "files": self.files, "sha256": self.sha256,
                "sentences": len(self)}


def task_from_files(paths: Sequence[str | Path], split: bool, text_field: str = "text"
                    ) -> TaskInput:
    """Read task files, folders or URLs ("-": standard input) with the corpus readers.

    Args:
        paths: Files, folders, URLs or "-" (the same path given twice is read once).
        split: Split records into sentences (the index's setting).
        text_field: The field or column holding the text.

    Returns:
        The task.
    """
    from tapt.indexer.reading.reader import read_text

    # not `load_task`: no command that takes a task offers `input_format`, so an unknown
    # suffix's error must not name it
    text = read_text(list(paths), split, text_field=text_field, what="the task")
    return TaskInput("files", text.files, text.sha256, list(text.sentences))


def task_from_texts(texts: Sequence[str], split: bool) -> TaskInput:
    """A task from strings (records), split into sentences as the index was."""
    text = text_from_strings(texts, split)
    return TaskInput("texts", [], text.sha256, [s for doc in text.documents for s in doc])


def text_from_strings(texts: Sequence[str], split: bool, what: str = "task",
                      param: str = "task") -> TextInput:
    """Text given as strings, one record (and document) each, split into sentences as files
    are: what `task_form`'s "texts" read, for a selection's task and for a training's task and
    held-out text alike.

    Args:
        texts: The strings.
        split: Split them into sentences.
        what: How messages name the text.
        param: The argument's name, for errors.

    Returns:
        The documents, with one SHA-256 over the strings (each followed by NUL) in order; the
            one "file" is "<strings>".
    """
    from tapt.indexer.reading.reader import TextInput
    from tapt.indexer.reading.splitter import SentenceSplitter

    splitter = SentenceSplitter(split=split)
    digest = hashlib.sha256()
    documents = []
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise InputError(f"{what} strings must be str, got {type(text).__name__}",
                             param=param)
        if "\x00" in text:      # as the file readers: never text an index would refuse
            raise InputError(f"{what} string {i} contains NUL (U+0000); remove it", param=param)
        digest.update(text.encode("utf-8") + b"\x00")
        sentences = splitter(text)
        if sentences:
            documents.append(list(sentences))
    if not documents:
        raise InputError(f"the {what} holds no sentences", param=param)
    return TextInput(["<strings>"], [digest.hexdigest()], digest.hexdigest(), documents)


def task_from_embeddings(array: Any, dim: int) -> TaskInput:
    """A task given as embeddings of the index's model: rows of unit length, `dim` columns."""
    emb = np.asarray(array, dtype=np.float32)
    if emb.ndim == 1:
        emb = emb[None, :]
    if emb.ndim != 2 or emb.shape[1] != dim or len(emb) == 0:
        raise InputError(f"task embeddings must be an (n, {dim}) array for this index, got shape "
                         f"{tuple(np.shape(array))}", param="task")
    if not np.isfinite(emb).all():
        raise InputError("task embeddings hold NaN or infinite values", param="task")
    norms = np.linalg.norm(emb, axis=1)
    if np.abs(norms - 1).max() > 1e-3:
        raise InputError("task embeddings must be L2-normalised rows (embeddings of the index's "
                         "model; divide each row by its norm)", param="task")
    emb = np.ascontiguousarray(emb)
    return TaskInput("embeddings", [], hashlib.sha256(emb.tobytes()).hexdigest(), None, emb)


def resolve_task(task: Any, split: bool, dim: int, text_field: str = "text") -> TaskInput:
    """The `task` argument of `Index.select` (any form `task_form` takes), read.

    Args:
        task: The task.
        split: Split text into sentences (the index's setting).
        dim: The index's embedding dimensions (for a task given as embeddings).
        text_field: The field or column holding the text in task files.

    Returns:
        The task.

    Raises:
        InputError: see `task_form`.
    """
    if isinstance(task, TaskInput):
        return task
    kind, value = task_form(task)
    if kind == "files":
        return task_from_files(value, split, text_field)
    if kind == "texts":
        return task_from_texts(value, split)
    return task_from_embeddings(value, dim)


def task_form(task: Any, param: str = "task") -> tuple[Literal["files", "texts", "embeddings"],
                                                       Any]:
    """The one rule by which every call that takes a task (or held-out text) tells its forms
    apart: ("files", paths), ("texts", strings) or ("embeddings", array).

    A `str` or `os.PathLike` is a file, folder or URL ("-": standard input); a list of
    `os.PathLike` is files; a list of `str` (a NumPy array or pandas Series of them too) is the
    text, one string per record, unless every string names an existing file, a URL or "-";
    `{"files": [...]}` is files, URLs, glob patterns or "-" as given (what the command line
    passes); a float array (or a list of rows) is embeddings.

    Args:
        task: The argument.
        param: Its name, for errors.

    Returns:
        (the form, the paths, strings or array).

    Raises:
        InputError: a type that is none of these, or strings that look like file names of
            which some do not exist.
    """
    if isinstance(task, Mapping):
        files = task.get("files")
        if set(task) != {"files"} or not isinstance(files, (list, tuple)) or not files \
                or not all(isinstance(p, (str, os.PathLike)) for p in files):
            raise InputError('a task mapping is {"files": [paths, ...]}', param=param)
        return "files", [path_text(p, param) if isinstance(p, str) else p for p in files]
    if isinstance(task, str):
        path_text(task, param)
    if isinstance(task, str) and task == STDIN:
        return "files", [task]
    if isinstance(task, str) and not (os.path.exists(task) or _is_url(task)) \
            and not _looks_like_file(task):
        raise InputError(f"{_short(task)!r} is not a file, folder or URL: pass the task's text "
                         "as a list of strings ([\"...\"]), or a path", param=param)
    if isinstance(task, (str, os.PathLike)):
        return "files", [task]
    if _is_series(task):                 # a pandas column of text (or of embedding rows)
        task = task.tolist()
    if isinstance(task, np.ndarray) and (task.dtype.kind in "USO"):
        if task.ndim != 1 or not all(isinstance(t, str) for t in task.tolist()):
            raise InputError("an array of strings as a task must be 1-D and hold only str "
                             "(the task's text); embeddings are a float array", param=param)
        return "texts", task.tolist()
    if isinstance(task, np.ndarray):
        return "embeddings", task
    if isinstance(task, (list, tuple)):
        if not task:
            raise InputError("the task is empty: give its sentences, files or embeddings",
                             param=param)
        if all(isinstance(t, os.PathLike) for t in task):
            return "files", list(task)
        if task and all(isinstance(t, str) for t in task):
            exists = [os.path.exists(t) or _is_url(t) or t == STDIN for t in task]
            if all(exists):
                return "files", list(task)
            if all(_looks_like_file(t) for t in task):
                missing = next(t for t, e in zip(task, exists) if not e)
                raise InputError(f"{missing}: no such file (pass pathlib.Path objects for files, "
                                 "plain strings for the task's text)", param=param)
            return "texts", list(task)
        if task and all(isinstance(t, (list, tuple, np.ndarray)) for t in task):
            return "embeddings", np.asarray(task)
        raise InputError("a task list must hold only strings (the text), only paths, or "
                         "embedding rows", param=param)
    raise InputError(f"a task is a path, a list of paths, a list of strings or an array of "
                     f"embeddings, not {type(task).__name__}", param=param)


def task_paths(task: Any) -> list[str | os.PathLike]:
    """The files a `task` argument names, standard input left out (an output must be none of
    them); none for text or embeddings."""
    if isinstance(task, Mapping):
        items = list(task.get("files") or [])
    elif isinstance(task, (str, os.PathLike)):
        items = [task]
    elif isinstance(task, (list, tuple)):
        items = list(task)
    else:
        return []
    named = isinstance(task, Mapping)
    for item in items:
        if isinstance(item, str) and (named or len(items) == 1):
            path_text(item, "task")
    return [t for t in items if isinstance(t, os.PathLike)
            or (isinstance(t, str) and t != STDIN and (named or os.path.exists(t)))]


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _is_series(value: Any) -> bool:
    kind = type(value)
    return kind.__name__ == "Series" and kind.__module__.startswith("pandas")


def _is_url(text: str) -> bool:
    return "://" in text and not any(c.isspace() for c in text)


def _looks_like_file(text: str) -> bool:
    return not any(c.isspace() for c in text) and text.lower().endswith(_FILE_SUFFIXES)


def tokenizer_of(encoder: Any) -> Any | None:
    """The encoder's Hugging Face tokenizer, if it exposes one."""
    tok = getattr(encoder, "tokenizer", None)
    if tok is None:
        tok = getattr(getattr(encoder, "model", None), "tokenizer", None)
    return tok if callable(tok) else None


def screen_tokens(encoder: Any, sentences: list[str]) -> tuple[list[str], list[str]]:
    """Leave out task sentences the model cannot read; warn when most tokens are unknown.

    Uses the encoder's tokenizer; an encoder without one is not screened.

    Returns:
        (the sentences kept, warnings).

    Raises:
        InputError: no sentence holds a token the model knows (emoji only, zero-width
            characters, a script the tokenizer does not cover).
    """
    left_out, warnings = screen_left_out(encoder, sentences)
    dropped = set(left_out)
    return [s for i, s in enumerate(sentences) if i not in dropped], warnings


def screen_left_out(encoder: Any, sentences: list[str]) -> tuple[list[int], list[str]]:
    """`screen_tokens` as the positions of the sentences left out (ascending) and warnings."""
    tok = tokenizer_of(encoder)
    if tok is None:
        return [], []
    hf_log = logging.getLogger("transformers")
    level = hf_log.level
    hf_log.setLevel(logging.ERROR)  # "sequence longer than the model's maximum": not used here
    try:
        ids = tok(list(sentences), add_special_tokens=False, truncation=False)["input_ids"]
    finally:
        hf_log.setLevel(level)
    unk = getattr(tok, "unk_token_id", None)
    unreadable = [not x or (unk is not None and all(t == unk for t in x)) for x in ids]
    name = getattr(encoder, "name", "the model")
    if all(unreadable):
        raise InputError(f"the task's {len(sentences)} sentence(s) tokenise to nothing {name} "
                         "knows (no tokens, or only unknown ones: emoji, zero-width or "
                         "unsupported characters)", param="task")
    warnings = []
    if any(unreadable):
        warnings.append(f"{sum(unreadable)} of {len(sentences)} task sentences tokenise to "
                        f"nothing {name} knows and were left out")
        ids = [x for x, bad in zip(ids, unreadable) if not bad]
    total = sum(len(x) for x in ids)
    unknown = sum(1 for x in ids for t in x if t == unk) if unk is not None else 0
    if total and unknown / total >= UNKNOWN_TOKEN_WARNING:
        warnings.append(f"{unknown / total:.0%} of the task's tokens are unknown to {name}: it "
                        "was not trained on most of this text, so the selection will be poor")
    for warning in warnings:
        log.warning("%s", warning)
    return [i for i, bad in enumerate(unreadable) if bad], warnings
