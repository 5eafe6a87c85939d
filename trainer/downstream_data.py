"""The labelled task of `tapt bench downstream`: a JSON Lines file of texts and labels, and its
seeded, stratified split into a training and a test split (whole groups, e.g. documents, on one
side only, so that no document leaks from training into test)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def _quota(counts: np.ndarray, size: int) -> np.ndarray:
    """`size` shared among the labels in proportion to `counts` (largest remainders), at least
    one each."""
    share = counts / counts.sum() * size
    out = np.maximum(np.floor(share).astype(np.int64), 1)
    order = np.argsort(-(share - np.floor(share)), kind="stable")
    for i in order:
        if out.sum() >= size:
            break
        out[i] += 1
    return out


def split(data: LabelledSet, train_size: int, test_size: int, seed: int
          ) -> tuple[np.ndarray, np.ndarray]:
    """A seeded split stratified by label: the test split takes whole groups of each label (in
    a seeded order) until it holds its share of `test_size`; the training split then draws its
    share of `train_size` from the other groups' examples. No group is on both sides.

    Args:
        data: The labelled examples.
        train_size: Training examples.
        test_size: Test examples.
        seed: Seed of the split.

    Returns:
        (training rows, test rows), each sorted.

    Raises:
        InputError: a label with too few examples or groups for its share of either split.
    """
    whole_number(train_size, "train_size", minimum=len(data.names))
    whole_number(test_size, "test_size", minimum=len(data.names))
    rng = np.random.default_rng(seed)
    counts = np.bincount(data.labels, minlength=len(data.names))
    train_quota, test_quota = _quota(counts, train_size), _quota(counts, test_size)
    groups = np.asarray(data.groups, dtype=object)
    train_rows, test_rows = [], []
    for label, name in enumerate(data.names):
        rows = np.flatnonzero(data.labels == label)
        keys = list(dict.fromkeys(groups[rows].tolist()))
        if len(keys) < 2:
            raise InputError(f"label {name!r} has its {len(rows)} example(s) in one group: it "
                             "cannot be on both sides of a split (give more of its groups, or "
                             "leave it out)", param="labelled")
        keys = [keys[i] for i in rng.permutation(len(keys))]
        taken: list[int] = []
        rest: list[int] = []
        for position, key in enumerate(keys):
            members = rows[groups[rows] == key].tolist()
            # never the last group: something must remain for training
            if len(taken) < test_quota[label] and position < len(keys) - 1:
                taken += members
            else:
                rest += members
        if len(taken) < test_quota[label] or len(rest) < train_quota[label]:
            raise InputError(
                f"label {name!r} has {len(rows)} examples in {len(keys)} groups: too few for "
                f"{test_quota[label]} test and {train_quota[label]} training examples (ask for "
                "smaller splits)", param="labelled")
        test_rows += taken[:test_quota[label]]
        train_rows += rng.choice(np.asarray(rest), size=train_quota[label],
                                 replace=False).tolist()
    return np.sort(np.asarray(train_rows)), np.sort(np.asarray(test_rows))


def describe_split(data: LabelledSet, rows: np.ndarray) -> dict[str, Any]:
    """Examples per label name in a split (for the report)."""
    counts = np.bincount(data.labels[rows], minlength=len(data.names))
    return {name: int(c) for name, c in zip(data.names, counts)}
