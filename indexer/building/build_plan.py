"""The plan of a build or add, made before anything is embedded.

Once the prepare stage has read every shard, the row count is known exactly (sentences after
splitting, blank records and duplicate documents dropped), while nothing costly has been spent:
the plan then fixes the FAISS index type (`index_choice.choose_index`, or the index's own type for
an add), the RAM that building it needs (the FAISS index a process holds at once, its largest
shard's part when it has several, or the training sample and k-means of IVF-PQ, whichever is
larger) and the disk still to be written (embeddings, with the parts of the
largest shard beside its assembled file; token counts; int8 codes; the FAISS parts), and checks
them against the memory budget (`memory`, default "auto": a share of the available memory where
the FAISS work runs, `Executor.available_memory`) and the free space of the output's filesystem
(`shutil.disk_usage`). A plan that does not fit is refused there, with one InputError naming the
option that fixes it, instead of after the embed stage. The plan is logged and recorded in the
manifest (`build.plan`; an add's in its `history` entry).

The plan also fixes the memory each task of each stage asks its executor for (`TaskMemory`: a
Ray cluster reserves it on the node the task runs on), and refuses a plan one of whose tasks
needs more than any node offers (`Executor.task_memory_limit`): such a task would never be
placed. A build checks both before it prepares anything too (`plan_build(before_prepare=True)`,
from the scan's record counts, which a build's sentences never undercount), so a build whose
shards cannot fit a node is refused before any input is read twice, naming `shard_size`.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tapt.errors import InputError, TaptError
from tapt.indexer.ann.index_choice import (
    IndexChoice,
    choice_from_manifest,
    choose_index,
    flat_bytes,
    format_bytes,
    hnsw_bytes,
    ivfpq_bytes,
    memory_budget,
)

log = logging.getLogger(__name__)

KMEANS_COPIES = 2       # IVF training: the float32 sample, and FAISS's own copy of it
_DTYPE_BYTES = {"float32": 4, "float16": 2}
# A Ray worker's own memory: the interpreter, numpy, Ray, torch where imported (~280 MB
# measured on this project's machine), with room.
TASK_BASE = 384 << 20
# A prepare task's reading, splitting, text store and streamed lexical ids, beyond TASK_BASE:
# its distinct words and word pairs stay in memory (benchmarks/results/scale/prepare_memory.md)
PREPARE_BYTES = 1 << 30
DOC_HASH_BYTES = 56     # an add's prepare task: per document of the index (held and sorted)
TOKEN_BYTES = 16        # a part's tokens in flight: ids and attention mask, int64 each
TEXT_BYTES = 512        # a sentence's text and record in flight
MODEL_COPIES = 3        # a model actor: the weights as stored, loaded, and the framework's copy
MODEL_FALLBACK = 1 << 30    # a model whose weight files are not found
CALIBRATION_BLOCK = 65536   # rows of an exact top-k task's block (`ann_recall.ground_truth`)
STEPS_MEMORY = ("prepare", "tokenize", "embed", "save", "assemble", "train", "index",
                "calibrate")


@dataclass(frozen=True)
class Workers:
    """What a plan needs to know of where its tasks run and of the model they run.

    Attributes:
        available: Bytes free where the FAISS work runs (a budget of "auto" takes its share;
            None: this machine's).
        limit: The most memory one task can be given (a cluster's largest node's; None: no
            limit beyond the budget, as in one process).
        model_bytes: The model's weight files (0: not known).
        window: Rows of an embed part.
        max_length: The model's tokens per sentence at most.
        index_docs: An add's prepare tasks: the index's documents each one skips.
    """

    available: int | None = None
    limit: int | None = None
    model_bytes: int = 0
    window: int = 4096
    max_length: int = 512
    index_docs: int = 0

    @classmethod
    def of(cls, executor: Any, encoder: Any, window: int, index_docs: int = 0) -> "Workers":
        """Those of `executor` (`available_memory`, `task_memory_limit`) and `encoder`."""
        return cls(executor.available_memory(), executor.task_memory_limit(),
                   model_bytes(getattr(encoder, "spec", None)), int(window),
                   int(getattr(encoder, "max_length", 512) or 512), int(index_docs))


def model_bytes(spec: str | None) -> int:
    """Bytes of a model's weight files (`.safetensors`, `.bin`, `.onnx`, `.pt`) in its
    directory (the packaged default's where `spec` is None); 0 where they are not found."""
    from tapt.indexer.encoding.models import resolve_model

    try:
        where = Path(resolve_model(spec))
        files = [p for p in where.rglob("*") if p.suffix in (".safetensors", ".bin", ".onnx",
                                                                ".pt") and p.is_file()]
    except (OSError, ValueError, TaptError):
        return 0
    return sum(p.stat().st_size for p in files)


@dataclass(frozen=True)
class TaskMemory:
    """Bytes of RAM one task (or actor) of each step asks its executor for: `prepare` (read,
    split, store and lexical ids of a shard: bounded, see `PREPARE_BYTES`), `tokenize` and
    `save` (a part's tokens or embeddings), `embed` (a model actor), `assemble` (a part at a
    time), `train` (the training sample), `index` (the largest shard's FAISS part), `calibrate`
    (a shard's FAISS part and a block of exact products); `part`, what each more part a task
    holds at once adds (an executor that hands tasks several parts)."""

    prepare: int
    tokenize: int
    embed: int
    save: int
    assemble: int
    train: int
    index: int
    calibrate: int
    part: int = 0

    def record(self) -> dict[str, int]:
        return asdict(self)

    def steps(self) -> tuple[tuple[str, int], ...]:
        """The embed stage's other steps, as `Stage.steps_memory` takes them."""
        return (("tokenize", self.tokenize), ("save", self.save))


def task_memory(choice: IndexChoice | None, part_rows: int, dim: int, workers: Workers,
                trains: bool = True) -> TaskMemory:
    """The memory of each step's tasks for FAISS parts of `part_rows` rows of `choice` (None:
    not chosen yet, before prepare) and `dim` dimensions (see `TaskMemory`)."""
    window, tokens = workers.window, workers.max_length * TOKEN_BYTES
    part = index_bytes(choice, part_rows, dim) if choice is not None else 0
    train = train_bytes(choice, dim) if choice is not None and trains else 0
    model = workers.model_bytes or MODEL_FALLBACK
    block = CALIBRATION_BLOCK * dim * 4 + 3 * 4 * CALIBRATION_BLOCK * 256
    return TaskMemory(
        prepare=TASK_BASE + PREPARE_BYTES + DOC_HASH_BYTES * workers.index_docs,
        tokenize=TASK_BASE + window * (tokens + TEXT_BYTES),
        embed=TASK_BASE + MODEL_COPIES * model + window * (tokens + 2 * 4 * dim),
        save=TASK_BASE + 2 * window * 4 * dim,
        assemble=TASK_BASE + 2 * window * 4 * dim,
        train=TASK_BASE + train, index=TASK_BASE + part + 2 * 65536 * 4 * dim,
        calibrate=TASK_BASE + part + block,
        part=window * (tokens + TEXT_BYTES + 2 * 4 * dim))


def check_tasks(tasks: TaskMemory, limit: int | None, before: str) -> None:
    """Refuse a plan with a task no node can hold (`limit`: the most one task can be given).

    Raises:
        InputError: naming the option that makes the task smaller, where one does.
    """
    if limit is None:
        return
    fixes = {"index": ("shard_size", "build it in more, smaller shards (`shard_size`)"),
             "calibrate": ("shard_size", "build it in more, smaller shards (`shard_size`)"),
             "train": ("memory", "give a smaller `memory` budget (a more compact FAISS type) "
                                 "or add a node with more memory"),
             "embed": ("executor", "add a node with more memory for the model")}
    for step, need in tasks.record().items():
        if step != "part" and need > limit:
            param, fix = fixes.get(step, ("executor", "add a node with more memory"))
            raise InputError(f"a {step} task needs about {format_bytes(need)} of RAM, more "
                             f"than any node of the cluster offers one task "
                             f"({format_bytes(limit)}): {fix}; {before}", param=param)


@dataclass
class BuildPlan:
    """What a build or add will need, known before the embed stage.

    Attributes:
        rows: Rows of the finished index (an add: the index's and the new ones).
        new_rows: Rows this build or add embeds.
        dim: Embedding dimensions.
        kind: The FAISS index type; factory: its factory string.
        memory_budget_bytes: The RAM budget; memory_source: "given" or how "auto" chose it.
        index_bytes: The FAISS index a process holds in RAM (estimated): its largest shard's
            part (every part when it has one shard).
        part_rows: Rows of that part.
        train_bytes: RAM of training it (the IVF training sample, twice).
        ram_bytes: The larger of the two: what must fit the budget.
        disk_bytes: Disk still to be written (estimate).
        disk_free_bytes: Free space on the output's filesystem when planned.
        written_bytes: What the prepare stage wrote already (text store, offsets, lexical ids).
        task_memory: The memory each step's tasks ask for (`TaskMemory.record`).
        task_memory_limit: The most one task could be given when planned (None: no limit).
    """

    rows: int
    new_rows: int
    dim: int
    kind: str
    factory: str
    memory_budget_bytes: int
    memory_source: str
    index_bytes: int
    part_rows: int
    train_bytes: int
    ram_bytes: int
    disk_bytes: int
    disk_free_bytes: int
    written_bytes: int
    task_memory: dict[str, int] = field(default_factory=dict)
    task_memory_limit: int | None = None

    def tasks(self) -> TaskMemory:
        """`task_memory` as a `TaskMemory`."""
        return TaskMemory(**self.task_memory)

    def record(self) -> dict[str, Any]:
        """The plan as the manifest records it."""
        return asdict(self)

    def summary(self) -> str:
        """One line for the progress text."""
        return (f"plan: {self.rows:,} rows ({self.new_rows:,} to embed), {self.factory}; RAM "
                f"{format_bytes(self.ram_bytes)} of a {format_bytes(self.memory_budget_bytes)} "
                f"budget ({self.memory_source}); disk {format_bytes(self.disk_bytes)} still to "
                f"write, {format_bytes(self.disk_free_bytes)} free")


def index_bytes(choice: IndexChoice, rows: int, dim: int) -> int:
    """The FAISS index of `choice` over `rows` rows in RAM (as `choose_index` estimates it)."""
    p = choice.params
    if choice.kind == "hnsw":
        return hnsw_bytes(rows, dim, int(p.get("M", 32)))
    if choice.kind == "ivfpq":
        return ivfpq_bytes(rows, dim, int(p.get("nlist", 1)), int(p.get("m", dim // 4)),
                           int(p.get("nbits", 4)), bool(p.get("opq")),
                           int(p.get("quantizer_M", 0)))
    return flat_bytes(rows, dim)


def train_bytes(choice: IndexChoice, dim: int) -> int:
    """RAM of training an IVF template: its float32 training sample, KMEANS_COPIES times."""
    return choice.train_size * dim * 4 * KMEANS_COPIES if choice.kind == "ivfpq" else 0


def disk_needed(shard_rows: list[int], choice: IndexChoice, rows: int, dim: int, dtype: str,
                codes: bool) -> int:
    """Bytes still to be written for new shards of `shard_rows` rows (those not embedded yet):
    their embeddings (plus the parts of the largest one, which sit beside its assembled file
    until they are joined), token counts, int8 codes and their share of the FAISS index."""
    new = sum(shard_rows)
    row_bytes = dim * _DTYPE_BYTES.get(dtype, 4)
    embeddings = new * row_bytes + max(shard_rows, default=0) * row_bytes
    faiss_part = index_bytes(choice, rows, dim) * new // max(1, rows)
    return embeddings + new * 4 + (new * dim if codes else 0) + faiss_part


def tree_bytes(paths: list[Path]) -> int:
    """Bytes of the regular files under `paths`."""
    total = 0
    for root in paths:
        for path in ([root] if root.is_file() else root.rglob("*")):
            try:
                if path.is_file() and not path.is_symlink():
                    total += path.stat().st_size
            except OSError:
                continue
    return total


def make_plan(*, rows: int, new_rows: int, dim: int, choice: IndexChoice, memory: str | int,
              work: Path, to_embed: list[int], dtype: str, codes: bool,
              written: list[Path] = (), trains: bool = True,
              part_rows: int | None = None, workers: Workers = Workers()) -> BuildPlan:
    """The plan of a build or add whose FAISS index is `choice` (see the module docstring).

    Args:
        rows: Rows of the finished index; new_rows: rows this run adds.
        dim: Embedding dimensions.
        choice: The FAISS index to build.
        memory: The RAM budget ("auto", a size or bytes).
        work: The work directory (its filesystem is the one written to).
        to_embed: Rows of each new shard not embedded yet (a resumed run embedded the others).
        dtype: Stored embedding dtype; codes: int8 codes are written too.
        written: The prepared shard directories (their size is reported, not needed again).
        trains: The run trains the FAISS template (an add reuses the index's).
        part_rows: Rows of the largest shard (None: one shard of `rows`).
        workers: Where the tasks run and the model they run (their memory: `TaskMemory`).

    Returns:
        The plan (not yet checked: see `check_plan`).
    """
    budget, source = memory_budget(memory, workers.available)
    part = max(1, min(rows, int(part_rows))) if part_rows else rows
    index = index_bytes(choice, part, dim)
    train = train_bytes(choice, dim) if trains else 0
    return BuildPlan(rows=rows, new_rows=new_rows, dim=dim, kind=choice.kind,
                     factory=choice.factory, memory_budget_bytes=budget, memory_source=source,
                     index_bytes=index, part_rows=part, train_bytes=train,
                     ram_bytes=max(index, train),
                     disk_bytes=disk_needed(to_embed, choice, rows, dim, dtype, codes),
                     disk_free_bytes=int(shutil.disk_usage(work).free),
                     written_bytes=tree_bytes(list(written)),
                     task_memory=task_memory(choice, part, dim, workers, trains).record(),
                     task_memory_limit=workers.limit)


def check_plan(plan: BuildPlan, adding: bool = False, before: str = "nothing was embedded"
               ) -> None:
    """Refuse a plan that does not fit, before anything is embedded.

    Args:
        plan: The plan (`make_plan`).
        adding: An add (its index type is fixed; the fix is a reindex, not an option).
        before: What the refusal says was not done yet.

    Raises:
        InputError: the RAM, a node's memory or the disk does not suffice; the message names
            what fixes it.
    """
    if plan.ram_bytes > plan.memory_budget_bytes:
        what = (f"the index's {plan.factory} over {plan.rows:,} rows" if adding else
                f"{plan.factory} over {plan.rows:,} rows")
        if not adding:
            shards = (" or build it in more shards (`shard_size`: one shard's FAISS part is "
                      "held at a time)" if plan.index_bytes >= plan.train_bytes else "")
            raise InputError(f"{what} needs about {format_bytes(plan.ram_bytes)} of RAM to "
                             f"build, over the {format_bytes(plan.memory_budget_bytes)} budget "
                             f"({plan.memory_source}): give `memory` "
                             f"{_size_up(plan.ram_bytes)} or more{shards}; {before}",
                             param="memory")
        fix = ("reindex it to a more compact type first (tapt index reindex --index ivfpq)"
               if plan.kind != "ivfpq" else "run the add where more memory is available")
        raise InputError(f"{what} needs about {format_bytes(plan.ram_bytes)} of RAM, over the "
                         f"{format_bytes(plan.memory_budget_bytes)} budget "
                         f"({plan.memory_source}): {fix}; {before}")
    if plan.disk_bytes > plan.disk_free_bytes:
        where = "the index's filesystem" if adding else "the filesystem of `out`"
        fix = ("free space there" if adding else
               "free space there or give `out` on another disk")
        raise InputError(f"this {'add' if adding else 'build'} needs about "
                         f"{format_bytes(plan.disk_bytes)} more disk (embeddings, codes, FAISS "
                         f"parts), but {where} has "
                         f"{format_bytes(plan.disk_free_bytes)} free: {fix}; {before}")
    check_tasks(plan.tasks(), plan.task_memory_limit, before)


def _size_up(size: int) -> str:
    return f"{-(-size // (1 << 30))}G" if size > 1 << 30 else f"{max(1, -(-size // (1 << 20)))}M"


def plan_build(rows: int, dim: int, config: Any, work: Path, to_embed: list[int],
               dtype: str, written: list[Path] = (), part_rows: int | None = None,
               workers: Workers = Workers(), before_prepare: bool = False
               ) -> tuple[IndexChoice, BuildPlan]:
    """The index type and plan of a build of `rows` rows (`part_rows` in its largest shard),
    checked (see `check_plan`). `before_prepare`: planned from the scan's record counts,
    before anything is prepared (a lower bound of the sentences: a record gives one or more);
    the plan made after prepare, from the exact counts, is the one recorded."""
    before = "nothing was prepared" if before_prepare else "nothing was embedded"
    if rows == 0:
        raise InputError("the corpus holds no sentences")
    budget, source = memory_budget(config.memory, workers.available)
    try:
        choice = choose_index(rows, dim, budget, config.index, opq=config.opq,
                              part_rows=part_rows)
    except InputError as exc:
        if exc.param != "memory" or source == "given":
            raise
        raise InputError(f"{exc.message} (the budget is {source}); {before}",
                         param="memory") from None
    plan = make_plan(rows=rows, new_rows=rows, dim=dim, choice=choice, memory=config.memory,
                     work=work, to_embed=to_embed, dtype=dtype, codes=config.codes == "int8",
                     written=written, part_rows=part_rows, workers=workers)
    if not before_prepare:
        log.info("faiss index: %s", choice.reason)
        log.info("%s", plan.summary())
    check_plan(plan, before=before)
    return choice, plan


def plan_add(faiss_info: dict[str, Any], rows: int, new_rows: int, dim: int, memory: str | int,
             work: Path, to_embed: list[int], dtype: str, codes: bool,
             written: list[Path] = (), part_rows: int | None = None,
             workers: Workers = Workers()) -> tuple[IndexChoice, BuildPlan]:
    """The index type (the index's own) and plan of an add growing it to `rows` rows (its
    largest shard, old or new, `part_rows`), checked. The budget is the larger of `memory` and
    the one the index was built with."""
    choice = choice_from_manifest(faiss_info, rows, dim)
    recorded = faiss_info.get("memory_budget_bytes")
    budget, source = memory_budget(memory, workers.available)
    if isinstance(recorded, int) and recorded > budget:
        memory = recorded
    plan = make_plan(rows=rows, new_rows=new_rows, dim=dim, choice=choice, memory=memory,
                     work=work, to_embed=to_embed, dtype=dtype, codes=codes, written=written,
                     trains=False, part_rows=part_rows, workers=workers)
    if plan.memory_budget_bytes != budget:
        plan.memory_source = "the index's own"
    else:
        plan.memory_source = source
    log.info("%s", plan.summary())
    check_plan(plan, adding=True)
    return choice, plan
