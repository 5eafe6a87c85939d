"""What an executor is: the `Executor` interface, the `Stage` it runs and the `EncoderSource`
a stage that embeds gets (the registry of executors by name is `executors`, above this module and
the Ray executor)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Sequence

from tapt.errors import InputError


@dataclass(frozen=True)
class EncoderSpec:
    """How a worker process loads the build's model (picklable)."""

    model: str | None
    device: str = "auto"
    backend: str = "auto"

    def __post_init__(self) -> None:
        from ..encoding.models import absolute_spec, missing_model

        missing = missing_model(self.model)     # refused before the corpus is read
        if missing:
            raise InputError(missing, param="model")
        # a worker's working directory is not this process's
        object.__setattr__(self, "model", absolute_spec(self.model))

    def load(self):
        from ..encoding.encoder import load_encoder

        return load_encoder(self.model, device=self.device, backend=self.backend)


@dataclass
class EncoderSource:
    """The encoder of a stage that embeds: the loaded one (this process) and, where known, the
    spec a worker in another process loads the same model from."""

    encoder: Any = None
    spec: EncoderSpec | None = None

    def get(self):
        if self.encoder is None:
            if self.spec is None:
                raise InputError("this stage needs an encoder")
            self.encoder = self.spec.load()
        return self.encoder


@dataclass(frozen=True)
class Stage:
    """One stage: its function, whether it takes an encoder, and how progress is counted.

    Attributes:
        name: "prepare", "embed", "assemble", "train", "index".
        fn: fn(task) -> result, or fn(task, encoder) -> result when `needs_encoder`.
        needs_encoder: The stage embeds text.
        unit: What `weight(task)` counts, for progress bars ("shard", "sent").
        weight: How much of the stage a task is (default 1).
        whole_node: Each task is whole-node work (FAISS training, a shard's FAISS part): an
            executor that places tasks on a cluster gives it a node's cores, FAISS's threads set
            to them (and a GPU where faiss-gpu is installed); in one process it already has them.
    """

    name: str
    fn: Callable[..., Any]
    needs_encoder: bool = False
    unit: str = "task"
    weight: Callable[[Any], int] | None = None
    whole_node: bool = False


class Executor(ABC):
    """Runs a stage's tasks (see the docstring of `executors`)."""

    name: ClassVar[str]

    @abstractmethod
    def map(self, stage: Stage, tasks: Sequence[Any], encoder: EncoderSource | None = None
            ) -> list[Any]:
        """Run `stage.fn` on every task; results in task order."""

    def close(self) -> None:
        """Release what the executor holds (workers, a cluster connection)."""
