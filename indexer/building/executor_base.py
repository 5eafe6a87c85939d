"""What an executor is: the `Executor` interface, the `Stage` it runs, the `EncoderSource`
a stage that embeds gets, and the registry of executors by name (`register`: each executor is a
module of `tapt.indexer.building.executors`, found there the first time the registry is asked,
or a class registered from any other module once that module is imported)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Iterator, Sequence, TypeVar

from tapt.errors import InputError
from tapt.util.registry import Registry

# Results one merge task of `Executor.reduce` is given at most, on an executor that merges in
# tasks: the tree is log_8 of the tasks deep; a merge stage's `memory` covers that many results.
MERGE_FANIN = 8


@dataclass(frozen=True)
class EncoderSpec:
    """How a worker process loads the build's model (picklable)."""

    model: str | None
    device: str = "auto"
    backend: str = "auto"

    def __post_init__(self) -> None:
        from tapt.indexer.encoding.models import absolute_spec, missing_model

        missing = missing_model(self.model)     # refused before the corpus is read
        if missing:
            raise InputError(missing, param="model")
        # a worker's working directory is not this process's
        object.__setattr__(self, "model", absolute_spec(self.model))

    def load(self):
        from tapt.indexer.encoding.encoder import load_encoder

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
            to them (and a GPU where the node's FAISS can use one); in one process it already
            has them.
        memory: Bytes of RAM one task needs (the build plan's `TaskMemory`; 0: not known): an
            executor that places tasks on a cluster reserves it on the node a task runs on.
        steps_memory: For a stage that embeds, the bytes of each step apart from the model
            (`tokenize`, `save`), by step; `memory` is then a model worker's.
        part_memory: For a stage that embeds: the bytes each more part held at once adds to
            its steps' (an executor that hands a task several parts at a time).
    """

    name: str
    fn: Callable[..., Any]
    needs_encoder: bool = False
    unit: str = "task"
    weight: Callable[[Any], int] | None = None
    whole_node: bool = False
    memory: int = 0
    steps_memory: tuple[tuple[str, int], ...] = ()
    part_memory: int = 0


class Executor(ABC):
    """Runs a stage's tasks (see the docstring of `executors`). Subclass, give it a `name`,
    implement `map` (and `imap` where results can be folded one at a time, `reduce` where they
    can be merged where they are made), and decorate the
    class with `register` (`tapt.extend.register_executor`); `--executor NAME` then makes it
    with no arguments, `get_executor(NAME, **options)` with keyword arguments.

    Attributes:
        name: `--executor` value and the name in messages.
        order: Position in listings and messages (then by name).
        Options: None, or a dataclass of the options a build or add takes for this executor:
            each field (default None: the executor's own default) is a keyword of
            `Index.build` and `Index.add` and, with a `help` in its metadata, a flag of `tapt
            index build` and `index add` (its name, `-` for `_`; `minimum`, `maximum`,
            `choices`, `metavar` as for settings), and a keyword of the constructor under
            the same name. Names are unique across executors.
    """

    name: ClassVar[str]
    order: ClassVar[int] = 100
    Options: ClassVar[type | None] = None

    @abstractmethod
    def map(self, stage: Stage, tasks: Sequence[Any], encoder: EncoderSource | None = None
            ) -> list[Any]:
        """Run `stage.fn` on every task; results in task order."""

    def imap(self, stage: Stage, tasks: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        """(task's place, result) of every task of a stage that embeds nothing, as each
        finishes, so that a caller folding the results holds one at a time."""
        yield from enumerate(self.map(stage, tasks))

    def reduce(self, stage: Stage, tasks: Sequence[Any], merge: Stage) -> Any:
        """Every task's result of `stage` merged into one by `merge.fn(results)` (a list of
        two or more results -> one result, associative and commutative: the merged value must
        not depend on the order or grouping of its parts); None for no tasks. By default the
        results are folded here one at a time as they finish (`imap`); an executor that places
        tasks on a cluster merges them there, in a tree of `merge` tasks of at most
        MERGE_FANIN results each, and this process receives the last result only."""
        merged = None
        for _, result in self.imap(stage, tasks):
            merged = result if merged is None else merge.fn([merged, result])
        return merged

    def available_memory(self) -> int | None:
        """Bytes free where whole-node work runs (what a `memory` of "auto" takes its share
        of); None: this machine's (`util.machine.available_memory`), as in one process."""
        return None

    def task_memory_limit(self) -> int | None:
        """The most memory one task can be given (a cluster's largest node's); None: no
        limit beyond the build plan's own budget (one process)."""
        return None

    def close(self) -> None:  # noqa: B027 - optional: most executors hold nothing
        """Release what the executor holds (workers, a cluster connection)."""


EXECUTORS: Registry[type[Executor]] = Registry("executor", "tapt.indexer.building.executors")
E = TypeVar("E", bound=type[Executor])


def register(cls: E) -> E:
    """Class decorator: make an `Executor` subclass available by its `name` (`--executor
    NAME`) and return it unchanged; ValueError when it has no name or another executor has it."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"{cls.__name__}: an executor needs a `name`")
    EXECUTORS.add(name, cls)
    return cls
