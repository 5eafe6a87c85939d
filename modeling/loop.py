"""The one training loop of tapt: every model it trains takes its optimizer steps here.

Pretraining from scratch (`tapt pretrain`), continued pretraining (`tapt train`), the
downstream benchmark's fine-tuning, Domain-Finetune's classifier and `perplexity`'s task
adaptation differ only in what a step's loss is; how a step is taken is the same for all of
them: the loss under bf16 autocast on a GPU (nothing on the CPU, so CPU runs are exact), a
check that it is finite (a diverged run is never trained on, saved or reported as done),
backward, gradient clipping, AdamW with BERT's decay groups and a linear warmup/decay schedule
(`util.training.make_optimizer`), a progress bar with the running loss, and, where the caller
asks, a checkpoint every N steps.

The data side stays with the caller: `loss_of(step)` computes the loss of 0-based step `step`
from whatever the caller keeps (a seeded plan, a stream of batches), so a run that resumes at
step k needs only the step number and the optimizer's state (`Loop.optimizer`,
`Loop.scheduler`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from tapt.errors import TaptError

StepLoss = Callable[[int], Any]
StepHook = Callable[[int, float], None]


@dataclass(frozen=True)
class Schedule:
    """How a run's optimizer steps are taken.

    Attributes:
        steps: Optimizer steps of the whole run.
        lr: Peak learning rate (linear warmup, then linear decay to 0).
        weight_decay: AdamW's decoupled weight decay (none on biases and LayerNorm weights).
        warmup: Fraction of the steps of linear warmup, in [0, 1).
        max_grad_norm: Gradient clipping norm (0 = none).
        prefix_lr: Another peak learning rate for the parameters whose name starts with a
            prefix (a freshly initialised head: {"head.": 1e-3}).
    """

    steps: int
    lr: float
    weight_decay: float = 0.01
    warmup: float = 0.06
    max_grad_norm: float = 1.0
    prefix_lr: Mapping[str, float] = field(default_factory=dict)


def _diverged(value: float, step: int, lr: float) -> Exception:
    return TaptError(f"training diverged: the loss is {value} at step {step}; lower the "
                     f"learning rate (now {lr:g})")


class Loop:
    """The optimizer, its schedule and the step loop of one model.

    Args:
        model: A torch module on `device`; only parameters that require gradients train.
        schedule: Steps, learning rates, decay, warmup and clipping.
        device: The torch device the model is on.
        desc: The progress bar's label.
        progress: Show a progress bar.
        diverged: Makes the error raised on a loss that is not finite, from (loss, 1-based
            step, peak learning rate); default: a `TaptError` asking for a lower rate.
        leave: Keep the finished progress bar on screen.
    """

    def __init__(self, model: Any, schedule: Schedule, device: Any, *, desc: str = "train",
                 progress: bool = True,
                 diverged: Callable[[float, int, float], Exception] | None = None,
                 leave: bool = True) -> None:
        from tapt.util.training import make_optimizer

        self.model = model
        self.schedule = schedule
        self.device = device
        self.desc = desc
        self.progress = progress
        self.leave = leave
        self._diverged = diverged or _diverged
        self.optimizer, self.scheduler = make_optimizer(
            model, schedule.lr, schedule.weight_decay, schedule.warmup, schedule.steps,
            prefix_lr=dict(schedule.prefix_lr) or None)

    def run(self, loss_of: StepLoss, *, start: int = 0, on_step: StepHook | None = None,
            checkpoint: Callable[[int], Any] | None = None, checkpoint_every: int = 0,
            postfix: Callable[[list[float]], str] | None = None) -> list[float]:
        """Take steps `start` .. `schedule.steps - 1`.

        Args:
            loss_of: The loss (a scalar tensor with a graph) of a 0-based step.
            start: The first step to take (a resumed run's step count).
            on_step: Called with (steps done, loss) after every step; it may raise to stop
                the run (the step it was called for is complete).
            checkpoint: Called with the steps done every `checkpoint_every` steps (not after
                the last step: the caller saves the finished model).
            checkpoint_every: How often to call `checkpoint` (0: never).
            postfix: The progress bar's text from the losses so far (default: the mean of the
                last ten).

        Returns:
            The loss of every step taken, in order.
        """
        import torch
        from tqdm.auto import tqdm

        from tapt.util.progress import check_deadline
        from tapt.util.training import autocast

        model, schedule = self.model, self.schedule
        curve: list[float] = []
        model.train()
        with tqdm(total=schedule.steps, initial=start, unit="step", desc=self.desc,
                  disable=not self.progress, dynamic_ncols=True, leave=self.leave) as bar:
            for step in range(start, schedule.steps):
                check_deadline()                # a served request's time: stop between steps
                with autocast(self.device):
                    loss = loss_of(step)
                value = float(loss.detach())    # the step's one device sync, checked first
                if not math.isfinite(value):
                    raise self._diverged(value, step + 1, schedule.lr)
                loss.backward()
                if schedule.max_grad_norm > 0:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), schedule.max_grad_norm)
                self.optimizer.step()
                self.scheduler.step()
                self.optimizer.zero_grad(set_to_none=True)
                curve.append(value)
                bar.update(1)
                tail = curve[-10:]
                bar.set_postfix_str(postfix(curve) if postfix else
                                    f"loss={sum(tail) / len(tail):.4f}", refresh=False)
                done = step + 1
                if on_step is not None:
                    on_step(done, value)
                if checkpoint is not None and checkpoint_every and \
                        done % checkpoint_every == 0 and done < schedule.steps:
                    checkpoint(done)
        return curve


def epoch_batches(n: int, batch_size: int, seed: int) -> Callable[[int], Any]:
    """Batches of whole seeded epochs over `n` examples as a function of the step: step k gets
    the k-th batch of the concatenated epochs (each epoch a permutation drawn from (seed,
    epoch); the last batch of an epoch may be smaller), so any step's rows are known without
    replaying the run.

    Args:
        n: Examples.
        batch_size: Examples per step.
        seed: Seed of the epochs' order.

    Returns:
        step -> the example numbers (a numpy array) of that step.
    """
    import numpy as np

    per_epoch = math.ceil(n / batch_size)
    cache: dict[int, Any] = {}

    def rows(step: int) -> Any:
        epoch, k = divmod(step, per_epoch)
        if epoch not in cache:
            cache.clear()
            cache[epoch] = np.random.default_rng([seed, epoch]).permutation(n)
        return cache[epoch][k * batch_size:(k + 1) * batch_size]

    return rows

