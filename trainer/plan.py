"""Which examples each training step sees: task/selection mixing, weight modes, seeded epoch order.

Every epoch's order is a pure function of (seed, epoch), so a step number alone locates the data
position: resuming needs no sampler state.
"""

from __future__ import annotations

import hashlib
import math
from typing import Sequence

import numpy as np

from tapt.errors import InputError
from tapt.trainer.data import Example


def mix_counts(n_task: int, n_selection: int, ratio: tuple[int, int]) -> tuple[int, int]:
    """Examples per epoch (task, selection) for a task:selection ratio: the side that is large
    relative to its share is used once; the other is repeated / subsampled up to its share."""
    a, b = ratio
    scale = max(n_task / a, n_selection / b)
    return max(1, round(a * scale)), max(1, round(b * scale))


def repeat_to(n: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """`count` indices into range(n): whole copies of range(n), plus a seeded sample without
    replacement for the remainder."""
    copies, rest = divmod(count, n)
    parts = [np.tile(np.arange(n), copies)]
    if rest:
        parts.append(rng.choice(n, size=rest, replace=False))
    return np.concatenate(parts).astype(np.int64)


class TrainingPlan:
    """The examples of a run and the seeded order in which batches take them.

    `weights`: 'discrete' and 'continuous' take every selection example once per epoch ('continuous'
    weights the loss, see `trainer.loss`); 'sample' draws the selection part of each epoch with
    replacement, with probability proportional to lambda. Task examples have weight 1 and are mixed in
    at `ratio` (task:selection).
    """

    def __init__(
        self,
        selection: Sequence[Example],
        task: Sequence[Example],
        *,
        ratio: tuple[int, int] | None,
        weights: str,
        seed: int,
        batch_size: int,
    ) -> None:
        if not selection:
            raise InputError("the selection yields no training examples")
        if ratio is not None and not task:
            raise InputError("the task text yields no training examples")
        self.examples: list[Example] = list(selection) + list(task if ratio is not None else [])
        self.n_selection = len(selection)
        self.n_task = len(self.examples) - self.n_selection
        self.weights = weights
        self.seed = int(seed)
        self.batch_size = int(batch_size)
        if ratio is None:
            self.task_per_epoch, self.selection_per_epoch = 0, self.n_selection
        else:
            self.task_per_epoch, self.selection_per_epoch = mix_counts(
                self.n_task, self.n_selection, ratio
            )
        lambdas = np.array([e.weight for e in selection], dtype=np.float64)
        if weights in ("continuous", "sample") and len(lambdas) and not lambdas.sum() > 0:
            raise InputError(f"every selected segment has weight 0: --weights {weights} would "
                             "train on nothing (use --weights discrete, or select again with "
                             "other C and alpha)", param="weights")
        self._p = lambdas / lambdas.sum() if lambdas.sum() > 0 else lambdas
        self._cache: tuple[int, np.ndarray] | None = None

    @property
    def epoch_size(self) -> int:
        return self.task_per_epoch + self.selection_per_epoch

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(self.epoch_size / self.batch_size)

    def epoch_order(self, epoch: int) -> np.ndarray:
        """Indices into `self.examples` for one epoch, shuffled with a (seed, epoch) generator."""
        if self._cache is not None and self._cache[0] == epoch:
            return self._cache[1]
        rng = np.random.default_rng([self.seed, epoch])
        if self.weights == "sample":
            sel = rng.choice(self.n_selection, size=self.selection_per_epoch, replace=True, p=self._p)
        else:
            sel = repeat_to(self.n_selection, self.selection_per_epoch, rng)
        parts = [sel]
        if self.task_per_epoch:
            parts.append(self.n_selection + repeat_to(self.n_task, self.task_per_epoch, rng))
        order = rng.permutation(np.concatenate(parts))
        self._cache = (epoch, order)
        return order

    def position(self, step: int) -> tuple[int, int]:
        """(epoch, batch index within the epoch) of a 0-based step."""
        return divmod(step, self.steps_per_epoch)

    def batch(self, step: int) -> list[Example]:
        """The examples of 0-based step `step`; the last batch of an epoch may be smaller."""
        epoch, index = self.position(step)
        order = self.epoch_order(epoch)
        chunk = order[index * self.batch_size : (index + 1) * self.batch_size]
        return [self.examples[int(i)] for i in chunk]

    def fingerprint(self) -> str:
        """Hash of the examples and the plan, checked on --resume (same data, same positions)."""
        h = hashlib.sha256()
        h.update(f"{self.weights}|{self.seed}|{self.batch_size}|{self.task_per_epoch}|"
                 f"{self.selection_per_epoch}".encode())
        for e in self.examples:
            h.update(f"{e.source}:{e.weight!r}:".encode())
            h.update(np.asarray(e.input_ids, dtype=np.int64).tobytes())
            h.update(b"|")
        return h.hexdigest()
