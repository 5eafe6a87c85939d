"""One serving actor (`ShardServer`, made a Ray actor by `actors.ShardServers`): its own shards
opened and verified, what requests need held where its rows are, and the calls the driver makes
(see the `actors` module docstring)."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, Sequence

import numpy as np

from tapt.indexer.ann.faiss_index import search_part, set_search_param
from tapt.indexer.ann.topk_merge import merge_in_groups
from tapt.indexer.store.shards import RowView
from tapt.indexer.store.text_store import damaged
from tapt.retriever.ranking import topcut
from tapt.retriever.serving.shard_set import segments_of

log = logging.getLogger(__name__)

HOLD = ("rows", "codes")


class ShardServer:
    """One actor's share of a served index (created through Ray, see `ShardServers`).

    It opens and verifies only its own shards (`shard_set.ShardSubset`), once, when it starts,
    and keeps what a request needs where its rows are: the rows (or codes), the FAISS parts,
    the lexical ids, and each segment size's segment offsets of its rows (computed from its
    shards' document offsets on the first request at that size). The rows are copied into RAM
    and the FAISS parts loaded after the start (`warm`), or by the first request that needs
    them.

    Args:
        path: The index directory (on a file system this actor's node sees).
        shards: Positions of its shards in the index's shard list (consecutive).
        rows: The rows [start, stop) it scores: the `grid`-row blocks that start in its shards
            (`span`; (0, 0) when none does).
        hold: What it copies into RAM: `rows` (the float16 embeddings) or `codes` (the int8
            codes, half the bytes; the embeddings stay memory-mapped, read when a method
            scores rows).
    """

    def __init__(self, path: str, shards: Sequence[int], rows: tuple[int, int],
                 hold: str = "rows") -> None:
        from tapt.indexer.store.integrity import checked_files
        from tapt.retriever.serving.shard_set import (
            ShardSubset,
            checked_by_shard,
            process_age,
            ready_steps,
        )

        at, began, cpu, age = time.time(), time.perf_counter(), time.process_time(), process_age()
        before = len(checked_files())
        index = ShardSubset(path, shards, rows)      # every file of its shards verified
        self.index, self.shards = index, list(shards)
        self._identity = index.identity()
        self.start, self.stop = index.rows
        # mapped until `_ready` copies what it holds into RAM (the same values)
        self.rows, self.codes = index.held("embeddings"), index.held("codes")
        self._ready = ready_steps(self, hold)
        self._segments: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}
        checked = checked_by_shard(checked_files()[before:])
        verified = [s.name for s in index.shards
                    if set(s.extra["checksums"]) <= set(checked.get(s.name, []))]
        self._report = {"shards": list(index.opened), "reached": list(index.reached),
                        "checked": checked, "verified": verified,
                        "rows": [self.start, self.stop], "node": _node_id(),
                        "seconds": round(time.perf_counter() - began, 3), "process_s": age,
                        "began_at": round(at, 3),
                        "cpu_before_s": round(cpu, 3),
                        "cpu_s": round(time.process_time() - cpu, 3)}

    @property
    def parts(self) -> list[tuple[Any, int]]:
        """Its shards' FAISS parts, with the base of their ids (loaded once)."""
        return self._ready.get("parts")

    def warm(self) -> None:
        """Make ready in the background what only requests need (`shard_set.Ready`): the rows
        (or codes) copied into RAM, the FAISS parts loaded, torch imported for the scans."""
        self._ready.start()

    def warmed(self, timeout: float | None = None) -> dict[str, float]:
        """Wait for `warm`'s steps (at most `timeout` seconds); the seconds of each."""
        return self._ready.wait(timeout)

    def identity(self) -> dict[str, Any]:
        return self._identity

    def report(self) -> dict[str, Any]:
        """What it opened when it started: its shards (`shards`), the files it compared with
        their recorded checksums by shard (`checked`), the shards all of whose recorded files
        it checked (`verified`), the shards past its own whose rows the scoring grid reaches
        (`reached`: mapped, headers and lengths checked, only their small document offsets
        and token counts hashed), its rows, its Ray node, its start's seconds, when it began
        (`began_at`, `time.time()` of its node), the age of its process then (`process_s`: the
        Ray worker's own start) and the CPU seconds of its process before (`cpu_before_s`) and
        during its start (`cpu_s`)."""
        return dict(self._report)

    def score(self, scorer, on: str = "rows") -> tuple[int, np.ndarray]:
        """(first row, the scorer's scores of this actor's rows, or of their int8 codes)."""
        return self.start, np.asarray(scorer(self.rows if on == "rows" else self.codes))

    def segments(self, size: int, of: str = "rows") -> tuple[np.ndarray, np.ndarray]:
        """(offsets in global rows, tokens) of the segments at `size` of the shards that hold
        its rows (`of` rows) or of its own shards (`of` shards), kept per size."""
        key = (of, int(size))
        if key not in self._segments:
            if len(self._segments) >= 8:               # a few sizes at a time
                self._segments.pop(next(iter(self._segments)))
            parts = self.index.held_parts if of == "rows" else [
                {"row": s.row_offset, "docs": s.docs, "tokens": s.tokens}
                for s in self.index.shards]
            self._segments[key] = segments_of(parts, int(size))
        return self._segments[key]

    def _stream(self, cut: topcut.Cut, size: int, first: int, start: int, stop: int,
                of: str) -> tuple[np.ndarray, int, np.ndarray | None, tuple[int, int, int]]:
        """The segments that meet rows [start, stop): (offsets, id of the first, measure,
        (id of the first, how many, the row they end at) for the driver's check)."""
        offsets, tokens = self.segments(size, of)
        lo = int(np.searchsorted(offsets, start, side="right")) - 1
        hi = int(np.searchsorted(offsets, stop, side="left"))
        mine = offsets[lo:hi + 1]
        measure = None if cut.by_count else (
            np.diff(mine).astype(np.int32) if cut.unit == "sentences" else tokens[lo:hi])
        return mine, first + lo, measure, (first + lo, hi - lo, int(mine[-1]))

    def top(self, scorer, cut: topcut.Cut, size: int, first: int, on: str = "rows"
            ) -> tuple[topcut.Candidates, list[topcut.Piece], tuple[int, int, int]]:
        """The cut of this actor's whole segments ranked by the scorer's mean scores (of its
        rows, or with `on` codes of their int8 codes), and the pieces of the segments its rows
        begin or end inside (`topcut.scan_cut`). The request is the task and the budget only:
        `size` the segment size, `first` the id of the first segment of the first shard that
        holds its rows; the segments are this actor's own."""
        offsets, seg, measure, check = self._stream(cut, size, first, self.start, self.stop,
                                                    "rows")
        kept, pieces = topcut.scan_cut(self.rows if on == "rows" else self.codes, scorer,
                                       offsets, seg, measure, cut, self.start)
        return kept, pieces, check

    def lexicon_scores(self, score_shard) -> list[tuple[int, np.ndarray]]:
        """(first row, scores) of each of this actor's shards by `score_shard` of its stored
        lexical ids (`Index.lexicon_scores`)."""
        lexicon = self.index.lexicon
        return [(int(lexicon.row_offsets[i]), np.asarray(score_shard(shard), dtype=np.float32))
                for i, shard in enumerate(lexicon.shards)]

    def lexicon_top(self, models, cut: topcut.Cut, size: int, first: int
                    ) -> tuple[topcut.Candidates, list[topcut.Piece], tuple[int, int, int]]:
        """The cut of the segments of this actor's shards ranked by the mean of `models`'
        scores of their sentences from the stored lexical ids (`HashedLMs.shard_parts`,
        shard by shard; no score is kept), as `lexicon_scores` then a cut would rank them
        (`size`, `first`: as for `top`, of its first shard)."""
        lexicon = self.index.lexicon
        start, stop = int(lexicon.row_offsets[0]), int(lexicon.row_offsets[-1])
        offsets, seg, measure, check = self._stream(cut, size, first, start, stop, "shards")
        stream = topcut.SegmentStream(offsets, seg, measure, cut, start)
        for shard in lexicon.shards:
            for _, part in models.shard_parts(shard):
                stream.feed(part)
        kept, pieces = stream.finish()
        return kept, pieces, check

    def held(self, op: str, *args: Any) -> Any:
        """An operation on the score arrays this actor keeps by name (`held_arrays`, asked by
        `remote_scores`: every row's score stays here, the driver asks for counts, positions
        and cuts)."""
        from tapt.retriever.serving.held_arrays import ACTOR_OPS

        return ACTOR_OPS[op](self, *args)

    def held_top(self, name: str, cut: topcut.Cut, size: int, first: int, of: str = "rows"
                 ) -> tuple[topcut.Candidates, list[topcut.Piece], tuple[int, int, int]]:
        """`top` of the scores kept under `name` (`held_arrays.held_cut`; `of`: whether they
        are of its scoring span, "rows", or of its own shards, "shards")."""
        from tapt.retriever.serving.held_arrays import held_cut

        return held_cut(self, name, cut, size, first, of)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The best `k` per query of this actor's parts (global ids), merged here: one k-wide
        result crosses Ray whatever the number of parts; None without parts."""
        if not self.parts:
            return None
        return merge_in_groups((search_part(part, queries, k, base)
                                for part, base in self.parts), k)

    def set_param(self, name: str, value: int) -> None:
        for part, _ in self.parts:
            set_search_param(part, name, value)

    def search_rescored(self, queries: np.ndarray, width: int, n: int, exact_index: bool
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The best `width` candidates per query of this actor's parts (global ids), with their
        approximate similarities and their exact ones from its own shards' rows (every row
        checked, as `faiss_index.knn_search` checks them; `n`: the index's rows; an
        `exact_index`'s similarities must agree with the rows'); None without parts."""
        from tapt.indexer.ann.faiss_index import AGREEMENT
        from tapt.indexer.ann.rescore import exact_of
        from tapt.indexer.store.integrity import check_results

        found = self.search(queries, width)
        if found is None:
            return None
        sims, ids = found
        label = self.index.path
        check_results(sims, ids, n, label)
        first = int(self.index.shards[0].row_offset)
        own = RowView([s.embeddings for s in self.index.shards])
        if len(ids) and ((ids >= 0) & ((ids < first) | (ids >= first + len(own)))).any():
            raise damaged(label, "index.faiss returned rows of another shard")
        exact = exact_of(own, queries, ids, label=label, offset=first)
        if exact_index:
            off = (ids >= 0) & ~(np.abs(exact - sims) <= AGREEMENT)      # NaN disagrees too
            if off.any():
                q, j = np.argwhere(off)[0]
                raise damaged(label, f"index.faiss and embeddings.npy disagree (query {int(q)}, "
                                     f"similarity {float(sims[q, j]):.4f} vs "
                                     f"{float(exact[q, j]):.4f})")
        return ids, sims.astype(np.float32), exact

    def nbytes(self) -> int:
        """Bytes of rows or codes this actor holds in RAM."""
        self._ready.get("held")
        held = [a for a in (self.rows, self.codes) if isinstance(a, np.ndarray)
                and not isinstance(a, np.memmap)]
        return int(sum(a.nbytes for a in held))


def _node_id() -> str | None:
    """The Ray node this process runs on (None outside Ray)."""
    ray = sys.modules.get("ray")          # never imported for this
    try:
        return ray.get_runtime_context().get_node_id() if ray and ray.is_initialized() else None
    except Exception:  # noqa: BLE001 - a report, never a failure
        return None
