"""The labelled task of `tapt bench downstream`: a JSON Lines file of texts and labels, and its
seeded, stratified group k-fold (whole groups, e.g. documents, in one fold only, so that no
document leaks from training into test, and every example is tested once)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tapt.errors import InputError
from tapt.util.checks import whole_number
from tapt.util.files import open_regular


@dataclass(frozen=True)
class LabelledSet:
    """Examples of a labelled classification task.

    Attributes:
        texts: The examples' text.
        labels: Each example's label number (an index into `names`).
        names: The label names, sorted.
        groups: Each example's group (e.g. its document), or its own number when the file
            names no group field.
        sha256: SHA-256 of the file.
    """

    texts: list[str]
    labels: np.ndarray
    names: list[str]
    groups: list[str]
    sha256: str


def read_labelled(path: str | Path, text_field: str = "text", label_field: str = "label",
                  group_field: str | None = None) -> LabelledSet:
    """Read a labelled JSON Lines file (`.jsonl` or `.jsonl.gz`, one object per line).

    Args:
        path: The file.
        text_field: The field with the text.
        label_field: The field with the label (any JSON scalar; compared as text).
        group_field: A field whose equal values must stay on one side of the split (a
            document id); None: every example is its own group.

    Returns:
        The examples.

    Raises:
        InputError: a file that cannot be read, a line that is not a JSON object, a missing or
            empty text or label, fewer than two labels.
    """
    name = str(path)
    try:
        with open_regular(path) as fh:
            raw = fh.read()
    except OSError as exc:
        raise InputError(f"cannot read the labelled file {name}: {exc.strerror or exc}",
                         param="labelled") from exc
    sha256 = hashlib.sha256(raw).hexdigest()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise InputError(f"labelled file {name} is not a readable gzip file",
                             param="labelled") from exc
    texts, labels, groups = [], [], []
    try:
        lines = io.StringIO(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InputError(f"labelled file {name} is not UTF-8 text", param="labelled") from exc
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"line {number} of labelled file {name} is not JSON: {exc.msg}",
                             param="labelled") from exc
        if not isinstance(record, dict):
            raise InputError(f"line {number} of labelled file {name} is not a JSON object",
                             param="labelled")
        text, label = record.get(text_field), record.get(label_field)
        if not isinstance(text, str) or not text.strip():
            raise InputError(f"line {number} of labelled file {name} has no text in field "
                             f"'{text_field}'", param="text_field")
        if label is None or isinstance(label, (dict, list)) or str(label) == "":
            raise InputError(f"line {number} of labelled file {name} has no label in field "
                             f"'{label_field}'", param="label_field")
        if group_field is not None:
            group = record.get(group_field)
            if group is None or isinstance(group, (dict, list)):
                raise InputError(f"line {number} of labelled file {name} has no group in field "
                                 f"'{group_field}'", param="group_field")
            groups.append(str(group))
        else:
            groups.append(f"#{number}")
        texts.append(text)
        labels.append(str(label))
    names = sorted(set(labels))
    if len(names) < 2:
        raise InputError(f"labelled file {name} has {len(texts)} example(s) and "
                         f"{len(names)} label(s); a classification task needs at least two "
                         "labels", param="labelled")
    number_of = {n: i for i, n in enumerate(names)}
    return LabelledSet(texts, np.array([number_of[x] for x in labels], dtype=np.int64), names,
                       groups, sha256)


def group_folds(data: LabelledSet, folds: int, seed: int) -> np.ndarray:
    """A seeded stratified group k-fold: every group (document) goes whole into one fold, each
    label's groups spread so that every fold holds about its share of the label; every example
    is in exactly one fold, so each is a test example once over the k fine-tunings.

    A group's label is its most frequent one. Each label's groups are taken in a seeded order,
    largest first, each into the fold that holds the fewest examples of that label (then the
    fewest examples, then the lowest number).

    Args:
        data: The labelled examples.
        folds: How many folds (k >= 2).
        seed: Seed of the assignment.

    Returns:
        The fold number (0..k-1) of every example.

    Raises:
        InputError: fewer groups than folds, or a label with its examples in one group (it
            could not be learnt when its group is the test fold).
    """
    whole_number(folds, "folds", minimum=2)
    groups = np.asarray(data.groups, dtype=object)
    keys, group_of = np.unique(groups, return_inverse=True)
    if len(keys) < folds:
        raise InputError(f"the labelled set has {len(keys)} groups, fewer than the {folds} "
                         "folds (ask for fewer folds)", param="folds")
    n_labels = len(data.names)
    counts = np.zeros((len(keys), n_labels), dtype=np.int64)
    np.add.at(counts, (group_of, data.labels), 1)
    label_of_group = counts.argmax(axis=1)
    sizes = counts.sum(axis=1)
    for label, name in enumerate(data.names):
        if np.count_nonzero(counts[:, label]) < 2:
            raise InputError(f"label {name!r} has all its examples in one group: it cannot be "
                             "learnt when that group is tested (give more of its groups, or "
                             "leave it out)", param="labelled")
    rng = np.random.default_rng([seed, 11])
    per_label = np.zeros((folds, n_labels), dtype=np.int64)
    per_fold = np.zeros(folds, dtype=np.int64)
    fold_of_group = np.empty(len(keys), dtype=np.int64)
    for label in range(n_labels):
        members = np.flatnonzero(label_of_group == label)
        members = members[rng.permutation(len(members))]
        members = members[np.argsort(-sizes[members], kind="stable")]
        for g in members:
            fold = min(range(folds), key=lambda f: (per_label[f, label], per_fold[f], f))
            fold_of_group[g] = fold
            per_label[fold] += counts[g]
            per_fold[fold] += sizes[g]
    return fold_of_group[group_of]


def describe_folds(data: LabelledSet, fold_of: np.ndarray) -> list[dict[str, int]]:
    """Examples per label name in each fold (for the report).

    Args:
        data: The labelled examples.
        fold_of: `group_folds`' fold of every example.

    Returns:
        One {label name: examples} per fold.
    """
    out = []
    for fold in range(int(fold_of.max()) + 1):
        counts = np.bincount(data.labels[fold_of == fold], minlength=len(data.names))
        out.append({name: int(c) for name, c in zip(data.names, counts)})
    return out
