"""Serving an index from Ray actors: its shards held in memory, selections fanned out to them.

`ShardServers` starts one actor per group of consecutive shards (`ShardServer`); each opens the
index (checked as any open is), keeps its rows of the embeddings (or, `hold` codes, their int8
codes) in RAM and its shards' FAISS parts loaded, and answers four calls: `top(scorer, cut,
...)` (a budget's cut of the segments of its rows ranked by a sentence scorer), `score(scorer,
on)` (the scorer's score of every one of its rows, or of their codes), `lexicon_scores(
score_shard)` (a score of each of its shards' sentences from their stored lexical ids) and
`search(queries, k)` (its parts' top-k with global ids). The driver keeps the index
open too (memory-mapped) for everything else a selection does: the segment view, the exact
rescoring of FAISS candidates, reading the chosen text.

What fans out:

- a selection with a budget that streams (`methods.base.streams`: sentence context, at most
  1/16 of the sentences) by a method that scores the whole index with a fitted `scorer`
  (centroid, distance, density, classifier...): every actor returns only the budget's cut of
  its own segments (`topcut`) and the scores of the few rows of segments its rows begin or end
  inside; the driver merges them. No score per sentence crosses Ray;
- every other scan of every row by a scorer (`Index.score_rows`: no budget or a larger one,
  document context, `auto`, iforest's pre-ranking, the classifier's fit): the scorer is sent
  to every actor, each returns the scores of its rows;
- every FAISS search (knn, and methods that search): each actor searches its parts, the driver
  merges with `merge_topk`, exactly as `ShardedFaiss` does in one process (each actor merges
  its own parts first);
- `centroid` with `scan` codes: each actor scores its rows' int8 codes (held in RAM with
  `hold` codes, half the bytes of float16 rows); the driver rescores the best exactly;
- scores from the stored lexical ids (Moore-Lewis, and the Moore-Lewis half of `fused` and
  `fused-learned`): the fitted models are sent to every actor, each scores its own shards
  (`Index.lexicon_scores`); with a budget that streams, Moore-Lewis's actors return only the
  cut of their own segments (`lexicon_top`).

Methods that rank another way run on the driver over its memory maps, as in `Index.select`.

Identical scores: scorers walk their rows in blocks whose shape BLAS rounds by, on a grid of
global rows (`scoring.blocks`). An actor holds the rows of the `grid`-row blocks that start in
its shards (`shards.grid_ranges`), so every block it scores starts at a multiple of `grid` and,
as `grid` is a multiple of every block size the scorers use, has exactly the rows it has in a
single process: a served selection equals `Index.select`, row for row.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

from tapt.errors import IndexFormatError, InputError
from tapt.indexer.ann.faiss_index import (ShardedFaiss, merge_in_groups, search_part,
                                      set_search_param)
from tapt.indexer.store.identity import same_snapshot
from tapt.indexer.building.ray_executor import ExecutorError, connect, import_ray, task_error
from tapt.indexer.store.shards import grid_ranges
from tapt.util.checks import whole_number

from ..scoring import arrays
from ..ranking import topcut
from ..ranking.index_protocol import window

GRID = arrays.CHUNK
HOLD = ("rows", "codes")
START_TIMEOUT = 600.0


class ShardServer:
    """One actor's share of a served index (created through Ray, see `ShardServers`).

    Args:
        path: The index directory (on a file system this actor's node sees).
        shards: Positions of its shards in the index's shard list.
        grid: Rows per block of the scoring grid (see the module docstring).
        hold: What it copies into RAM: `rows` (the float16 embeddings) or `codes` (the int8
            codes, half the bytes; the embeddings stay memory-mapped, read when a method
            scores rows).
    """

    def __init__(self, path: str, shards: Sequence[int], grid: int = GRID,
                 hold: str = "rows") -> None:
        from tapt.indexer.ann.faiss_index import read_faiss_index
        from tapt.indexer.index import Index

        index = Index(path)
        self.index, self.shards = index, list(shards)
        self._identity = index.identity()
        self.start, self.stop = span(index, shards, grid)
        rows = _window(index.embeddings, self.start, self.stop)
        codes = None if index.codes is None else _window(index.codes, self.start, self.stop)
        # what it holds in RAM, not mapped
        self.rows = np.array(rows) if hold == "rows" else rows
        self.codes = np.array(codes) if hold == "codes" and codes is not None else codes
        global_ids = index.manifest.get("faiss", {}).get("part_ids") == "global"
        self.parts = [(read_faiss_index(index.shards[s].faiss_path),
                       0 if global_ids else index.shards[s].row_offset) for s in shards]

    def identity(self) -> dict[str, Any]:
        return self._identity

    def score(self, scorer, on: str = "rows") -> tuple[int, np.ndarray]:
        """(first row, the scorer's scores of this actor's rows, or of their int8 codes)."""
        return self.start, np.asarray(scorer(self.rows if on == "rows" else self.codes))

    def top(self, scorer, cut: topcut.Cut, offsets: np.ndarray, first: int,
            measure: np.ndarray | None, on: str = "rows"
            ) -> tuple[topcut.Candidates, list[topcut.Piece]]:
        """The cut of this actor's whole segments ranked by the scorer's mean scores (of its
        rows, or with `on` codes of their int8 codes), and the pieces of the segments its rows
        begin or end inside (`topcut.scan_cut`; `offsets`, `first`, `measure`: the segments
        that meet its rows)."""
        return topcut.scan_cut(self.rows if on == "rows" else self.codes, scorer, offsets, first,
                               measure, cut, self.start)

    def lexicon_scores(self, score_shard) -> list[tuple[int, np.ndarray]]:
        """(first row, scores) of each of this actor's shards by `score_shard` of its stored
        lexical ids (`Index.lexicon_scores`)."""
        lexicon = self.index.lexicon
        return [(int(lexicon.row_offsets[s]), np.asarray(score_shard(lexicon.shards[s]),
                                                          dtype=np.float32))
                for s in self.shards]

    def lexicon_top(self, models, cut: topcut.Cut, offsets: np.ndarray, first: int,
                    measure: np.ndarray | None
                    ) -> tuple[topcut.Candidates, list[topcut.Piece]]:
        """The cut of the segments of this actor's shards ranked by the mean of `models`'
        scores of their sentences from the stored lexical ids (`HashedLMs.shard_parts`,
        shard by shard; no score is kept), as `lexicon_scores` then a cut would rank them
        (`offsets`, `first`, `measure`: the segments of those shards)."""
        lexicon = self.index.lexicon
        stream = topcut.SegmentStream(offsets, first, measure, cut,
                                      int(lexicon.row_offsets[self.shards[0]]))
        for s in self.shards:
            for _, part in models.shard_parts(lexicon.shards[s]):
                stream.feed(part)
        return stream.finish()

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

    def nbytes(self) -> int:
        """Bytes of rows or codes this actor holds in RAM."""
        held = [a for a in (self.rows, self.codes) if isinstance(a, np.ndarray)
                and not isinstance(a, np.memmap)]
        return int(sum(a.nbytes for a in held))


def _window(rows, start: int, stop: int):
    """Rows [start, stop) of a row view or array, without a copy."""
    return window(rows, start, stop)


class ShardServers:
    """The actors serving one index.

    Args:
        index: The index, open in this process (the actors must find it at the same path).
        address: The Ray cluster ("auto", "HOST:PORT"; default: the one this process is
            connected to, else RAY_ADDRESS, else a new local one).
        actors: How many actors (consecutive groups of shards); default one per shard.
        cpus_per_actor: CPUs Ray reserves for each actor.
        grid: Rows per block of the scoring grid (a multiple of `scoring.CHUNK`'s divisors;
            smaller only in tests).
        timeout: Seconds the actors may take to load their shards.
        hold: What each actor holds in RAM: `rows` (float16 embeddings) or `codes` (int8
            codes; an index built or reindexed with `codes` int8).

    Raises:
        InputError: Ray is not installed, or a setting cannot work.
        IndexFormatError: an actor opened another generation of the index than this process.
        ExecutorError: the actors failed or did not start within `timeout`.
    """

    def __init__(self, index, address: str | None = None, actors: int | None = None,
                 cpus_per_actor: float = 1.0, grid: int = GRID,
                 timeout: float = START_TIMEOUT, hold: str = "rows") -> None:
        n = len(index.shards)
        if hold not in HOLD:
            raise InputError(f"must be one of {', '.join(HOLD)}", param="hold")
        if hold == "codes" and index.codes is None:
            raise InputError(f"index {index.path} has no int8 codes to hold: run tapt index "
                             f"reindex {index.path} --codes int8", param="hold")
        if actors is not None:
            whole_number(actors, "actors")
        if not cpus_per_actor > 0:
            raise InputError("must be more than 0", param="cpus_per_actor")
        self.ray = import_ray("serving an index", param=None)
        self._owned = connect(address)
        count = min(actors or n, n)
        cpus = float(self.ray.cluster_resources().get("CPU", 0))
        if count * cpus_per_actor > cpus + 1e-9:
            self.close()
            raise InputError(f"{count} actor(s) of {cpus_per_actor:g} CPU need "
                             f"{count * cpus_per_actor:g} CPUs, the Ray cluster has {cpus:g} "
                             "(an actor that cannot be placed waits forever): pass fewer "
                             "`actors` or a smaller `cpus_per_actor`", param="actors")
        groups = [list(g) for g in np.array_split(np.arange(n), count)]
        # a dead actor comes back for the next request; the call it died in fails (no retries:
        # a call on a stopped actor must fail at once, not wait for one)
        remote = self.ray.remote(num_cpus=cpus_per_actor, max_restarts=2,
                                 max_task_retries=0)(ShardServer)
        # absolute: the actors' working directory is the cluster's, not this process's
        where = os.path.abspath(index.path)
        self.actors = [remote.remote(where, g, grid, hold) for g in groups]
        self.groups = groups
        self.spans = [span(index, g, grid) for g in groups]
        try:
            identities = self.ray.get([a.identity.remote() for a in self.actors],
                                      timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - one tapt error, the actors stopped
            self.close()
            if isinstance(exc, self.ray.exceptions.GetTimeoutError):
                raise ExecutorError(f"the {count} serving actor(s) did not load {index.path} "
                                    f"within {timeout:g} s", param="timeout") from exc
            raise task_error(exc, "serve", resumable=False) from exc
        wanted = index.identity()
        if not all(same_snapshot(i, wanted) for i in identities):
            self.close()
            raise IndexFormatError(f"the Ray actors opened another generation of {index.path} "
                                   "than this process (the index changed, or the path is not "
                                   "the same directory on every node): serve it again")

    def _get(self, refs: list[Any], what: str) -> list[Any]:
        try:
            return self.ray.get(refs)
        except Exception as exc:  # noqa: BLE001 - the task's own error, or one ExecutorError
            raise task_error(exc, what, resumable=False) from exc

    def scores(self, scorer, n: int, on: str = "rows") -> np.ndarray:
        """The scorer's score of every row (`on` codes: of every row's int8 codes), computed
        by the actors."""
        ref = self.ray.put(scorer)
        out = np.empty(n, dtype=np.float32)
        for start, part in self._get([a.score.remote(ref, on) for a in self.actors], "score"):
            out[start:start + len(part)] = part
        return out

    def lexicon_scores(self, score_shard, n: int) -> np.ndarray:
        """`score_shard` of every shard's stored lexical ids, run by the actors that hold the
        shards (`Index.lexicon_scores`)."""
        ref = self.ray.put(score_shard)
        out = np.empty(n, dtype=np.float32)
        for found in self._get([a.lexicon_scores.remote(ref) for a in self.actors], "score"):
            for start, part in found:
                out[start:start + len(part)] = part
        return out

    def top(self, scorer, view, cut: topcut.Cut, on: str = "rows") -> topcut.Candidates:
        """The budget's cut of the segments of `view` ranked by the scorer's mean sentence
        scores (`on` codes: scores of the int8 codes): each actor cuts its own segments, the
        driver merges the cuts and completes the segments that straddle two actors' rows
        (equal to `SentenceScored.budget_candidates` in one process)."""
        return self._merged_cuts(view, cut, self.spans, "top", self.ray.put(scorer), on)

    def lexicon_top(self, models, index, view, cut: topcut.Cut) -> topcut.Candidates:
        """The budget's cut of the segments of `view` ranked by the mean of `models`' scores
        (`ngram_lm.HashedLMs`) of their sentences: each actor scores and cuts its own shards'
        segments (segments never cross shards), the driver merges the cuts; equal to
        `topcut.parts_cut` of `models.parts()` in one process."""
        rows = [s.row_offset for s in index.shards] + [index.n_sentences]
        spans = [(rows[group[0]], rows[group[-1] + 1]) for group in self.groups]
        return self._merged_cuts(view, cut, spans, "lexicon_top", self.ray.put(models))

    def _merged_cuts(self, view, cut: topcut.Cut, spans, method: str, ref, *rest
                     ) -> topcut.Candidates:
        """The actors' `method(ref, cut, offsets, first, measure, *rest)` for every actor with
        rows (`spans`: each actor's rows [start, stop)), given the segments that meet its rows;
        their cuts merged, and the segments that straddle two actors completed from their
        pieces."""
        measure = cut.measure(view.lengths, view.tokens)
        calls = []
        for actor, (start, stop) in zip(self.actors, spans):
            if stop <= start:
                continue
            first = int(np.searchsorted(view.offsets, start, side="right")) - 1
            last = int(np.searchsorted(view.offsets, stop, side="left"))
            calls.append(getattr(actor, method).remote(
                ref, cut, view.offsets[first:last + 1], first,
                None if measure is None else measure[first:last], *rest))
        kept, pieces = topcut.Candidates.empty(), []
        for part, edges in self._get(calls, "score"):
            kept = topcut.merge(kept, part, cut)
            pieces += edges
        return topcut.merge(kept, topcut.join_pieces(pieces, view.offsets, measure), cut)

    def faiss(self, index) -> "RemoteFaiss":
        """The actors' FAISS parts as one searchable index of `index`'s rows."""
        return RemoteFaiss(self, index.n_sentences, index.dim)

    def close(self) -> None:
        """Stop the actors (waiting until Ray has their CPUs back) and a cluster started here."""
        actors = getattr(self, "actors", [])
        for actor in actors:
            self.ray.kill(actor, no_restart=True)
        for actor in actors:
            try:
                self.ray.get(actor.identity.remote(), timeout=30)
            except Exception:  # noqa: BLE001 - the call fails once the actor is gone
                pass
        self.actors = []
        if self._owned and self.ray.is_initialized():
            self.ray.shutdown()
        self._owned = False


class RemoteFaiss(ShardedFaiss):
    """The FAISS parts of a served index: each actor searches its own, the results are merged
    here (`merge_in_groups`), as `ShardedFaiss` does in one process."""

    def __init__(self, servers: ShardServers, ntotal: int, d: int) -> None:
        import faiss

        self.servers, self.parts, self.row_offsets, self.global_ids = servers, [], [], True
        self.ntotal, self.d, self.metric_type = int(ntotal), int(d), faiss.METRIC_INNER_PRODUCT

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        q = np.ascontiguousarray(queries, dtype=np.float32)
        ref = self.servers.ray.put(q)
        found = self.servers._get([a.search.remote(ref, int(k))
                                   for a in self.servers.actors], "search")
        return merge_in_groups((r for r in found if r is not None), k)

    def set_param(self, name: str, value: int) -> None:
        self.servers._get([a.set_param.remote(name, value) for a in self.servers.actors],
                          "search")


def span(index, shards: Sequence[int], grid: int) -> tuple[int, int]:
    """The rows [start, stop) an actor of these shards holds: the `grid`-row blocks that start
    in them (`shards.grid_ranges`); (0, 0) when none does."""
    offsets = np.array([s.row_offset for s in index.shards] + [index.n_sentences])
    ranges = grid_ranges(offsets, grid)
    mine = [r for s in shards for r in ranges[s]]
    return (mine[0][0], mine[-1][1]) if mine else (0, 0)
