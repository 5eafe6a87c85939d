"""The plan of a build or add, made before anything is embedded.

Once the prepare stage has read every shard, the row count is known exactly (sentences after
splitting, blank records and duplicate documents dropped), while nothing costly has been spent:
the plan then fixes the FAISS index type (`index_choice.choose_index`, or the index's own type for
an add), the RAM that building it needs (the FAISS index a process holds at once, its largest
shard's part when it has several, or the training sample and k-means of IVF-PQ, whichever is
larger) and the disk still to be written (embeddings, with the parts of the
largest shard beside its assembled file; token counts; int8 codes; the FAISS parts), and checks
them against the memory budget (`memory`, default "auto": a share of the machine's available
memory) and the free space of the output's filesystem (`shutil.disk_usage`). A plan that does
not fit is refused there, with one InputError naming the option that fixes it, instead of after
the embed stage. The plan is logged and recorded in the manifest (`build.plan`; an add's in its
`history` entry).
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tapt.errors import InputError

from ..ann.index_choice import (IndexChoice, choice_from_manifest, choose_index, format_bytes,
                                hnsw_bytes, ivfpq_bytes, flat_bytes, memory_budget)

log = logging.getLogger(__name__)

KMEANS_COPIES = 2       # IVF training: the float32 sample, and FAISS's own copy of it
_DTYPE_BYTES = {"float32": 4, "float16": 2}


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
              part_rows: int | None = None) -> BuildPlan:
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

    Returns:
        The plan (not yet checked: see `check_plan`).
    """
    budget, source = memory_budget(memory)
    part = max(1, min(rows, int(part_rows))) if part_rows else rows
    index = index_bytes(choice, part, dim)
    train = train_bytes(choice, dim) if trains else 0
    return BuildPlan(rows=rows, new_rows=new_rows, dim=dim, kind=choice.kind,
                     factory=choice.factory, memory_budget_bytes=budget, memory_source=source,
                     index_bytes=index, part_rows=part, train_bytes=train,
                     ram_bytes=max(index, train),
                     disk_bytes=disk_needed(to_embed, choice, rows, dim, dtype, codes),
                     disk_free_bytes=int(shutil.disk_usage(work).free),
                     written_bytes=tree_bytes(list(written)))


def check_plan(plan: BuildPlan, adding: bool = False) -> None:
    """Refuse a plan that does not fit, before anything is embedded.

    Args:
        plan: The plan (`make_plan`).
        adding: An add (its index type is fixed; the fix is a reindex, not an option).

    Raises:
        InputError: the RAM or the disk does not suffice; the message names what fixes it.
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
                             f"{_size_up(plan.ram_bytes)} or more{shards}; nothing was embedded",
                             param="memory")
        fix = ("reindex it to a more compact type first (tapt index reindex --index ivfpq)"
               if plan.kind != "ivfpq" else "run the add where more memory is available")
        raise InputError(f"{what} needs about {format_bytes(plan.ram_bytes)} of RAM, over the "
                         f"{format_bytes(plan.memory_budget_bytes)} budget "
                         f"({plan.memory_source}): {fix}; nothing was embedded")
    if plan.disk_bytes > plan.disk_free_bytes:
        where = "the index's filesystem" if adding else "the filesystem of `out`"
        fix = ("free space there" if adding else
               "free space there or give `out` on another disk")
        raise InputError(f"this {'add' if adding else 'build'} needs about "
                         f"{format_bytes(plan.disk_bytes)} more disk (embeddings, codes, FAISS "
                         f"parts), but {where} has "
                         f"{format_bytes(plan.disk_free_bytes)} free: {fix}; nothing was "
                         "embedded")


def _size_up(size: int) -> str:
    return f"{-(-size // (1 << 30))}G" if size > 1 << 30 else f"{max(1, -(-size // (1 << 20)))}M"


def plan_build(rows: int, dim: int, config: Any, work: Path, to_embed: list[int],
               dtype: str, written: list[Path] = (), part_rows: int | None = None
               ) -> tuple[IndexChoice, BuildPlan]:
    """The index type and plan of a build of `rows` rows (`part_rows` in its largest shard),
    checked (see `check_plan`)."""
    if rows == 0:
        raise InputError("the corpus holds no sentences")
    try:
        choice = choose_index(rows, dim, config.memory, config.index, opq=config.opq,
                              part_rows=part_rows)
    except InputError as exc:
        source = memory_budget(config.memory)[1]
        if exc.param != "memory" or source == "given":
            raise
        raise InputError(f"{exc.message} (the budget is {source}); nothing was embedded",
                         param="memory") from None
    plan = make_plan(rows=rows, new_rows=rows, dim=dim, choice=choice, memory=config.memory,
                     work=work, to_embed=to_embed, dtype=dtype, codes=config.codes == "int8",
                     written=written, part_rows=part_rows)
    log.info("faiss index: %s", choice.reason)
    log.info("%s", plan.summary())
    check_plan(plan)
    return choice, plan


def plan_add(faiss_info: dict[str, Any], rows: int, new_rows: int, dim: int, memory: str | int,
             work: Path, to_embed: list[int], dtype: str, codes: bool,
             written: list[Path] = (), part_rows: int | None = None
             ) -> tuple[IndexChoice, BuildPlan]:
    """The index type (the index's own) and plan of an add growing it to `rows` rows (its
    largest shard, old or new, `part_rows`), checked. The budget is the larger of `memory` and
    the one the index was built with."""
    choice = choice_from_manifest(faiss_info, rows, dim)
    recorded = faiss_info.get("memory_budget_bytes")
    budget, source = memory_budget(memory)
    if isinstance(recorded, int) and recorded > budget:
        memory = recorded
    plan = make_plan(rows=rows, new_rows=new_rows, dim=dim, choice=choice, memory=memory,
                     work=work, to_embed=to_embed, dtype=dtype, codes=codes, written=written,
                     trains=False, part_rows=part_rows)
    if plan.memory_budget_bytes != budget:
        plan.memory_source = "the index's own"
    else:
        plan.memory_source = source
    log.info("%s", plan.summary())
    check_plan(plan, adding=True)
    return choice, plan
