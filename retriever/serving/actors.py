"""Serving an index from Ray actors: its shards held in memory, selections fanned out to them.

`ShardServers` starts one actor per group of consecutive shards (`ShardServer`); each opens
and verifies only its own shards (`shard_set.ShardSubset`: every file against the checksum in
its shard's `shard.json`, once per version of its content), keeps its rows of the embeddings
(or, `hold` codes, their int8 codes) in RAM and its shards' FAISS parts loaded (made ready
after the start, all actors' starts waited for at once: `ShardServer.warm`), and answers
these calls: `top(scorer, cut, size, first)` (a budget's cut of the segments of its rows ranked
by a sentence scorer; the request names the segment size and its first segment's id, the
actor cuts its own segments from its shards' document offsets), `score(scorer, on)` (the
scorer's score of every one of its rows, or of their codes), `lexicon_scores(score_shard)` and
`lexicon_top` (from its shards' stored lexical ids) and `search(queries, k)` (its parts' top-k
with global ids). The driver keeps the index open too (memory-mapped; headers and lengths
checked, the content left to the actors) for everything else a selection does: the segment
view, the exact rescoring of FAISS candidates, reading the chosen text.

What fans out:

- a selection with a budget that streams (`methods.base.streams`: sentence context, at most
  1/16 of the sentences) by a method that scores the whole index with a fitted `scorer`
  (centroid, distance, density, classifier...): every actor returns only the budget's cut of
  its own segments (`topcut`) and the scores of the few rows of segments its rows begin or end
  inside; the driver merges them. No score per sentence crosses Ray;
- the scans of a fit that needs every row's score several times (the classifier's pre-ranking
  and self-training rounds; `fused`'s halves and their z-score sum): each actor keeps its rows'
  scores by name (`held`, `hold_scores`, `hold_lexicon`, `zsum`), the driver asks for counts,
  moments, rows at ranking positions and the budget's cut (`remote_scores`);
- every other scan of every row by a scorer (`Index.score_rows`: no budget or a larger one,
  document context, `auto`, iforest's pre-ranking): the scorer is sent to every actor, each
  returns the scores of its rows;
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

import logging
import os
import sys
import time
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from tapt.errors import IndexFormatError, InputError
from tapt.indexer.ann.faiss_index import ShardedFaiss, search_part, set_search_param
from tapt.indexer.ann.topk_merge import merge_in_groups
from tapt.indexer.store.identity import same_snapshot
from tapt.indexer.building.ray_executor import ExecutorError, connect, import_ray, task_error
from tapt.indexer.store.shards import grid_ranges
from tapt.util import spill
from tapt.util.checks import whole_number

from ..scoring import arrays
from ..ranking import topcut

if TYPE_CHECKING:
    from .remote_scores import RemoteScores

log = logging.getLogger(__name__)

GRID = arrays.CHUNK
HOLD = ("rows", "codes")
START_TIMEOUT = 600.0


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

        from .shard_set import ShardSubset, checked_by_shard, process_age, ready_steps

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
        from .held_arrays import ACTOR_OPS

        return ACTOR_OPS[op](self, *args)

    def held_top(self, name: str, cut: topcut.Cut, size: int, first: int, of: str = "rows"
                 ) -> tuple[topcut.Candidates, list[topcut.Piece], tuple[int, int, int]]:
        """`top` of the scores kept under `name` (`held_arrays.held_cut`; `of`: whether they
        are of its scoring span, "rows", or of its own shards, "shards")."""
        from .held_arrays import held_cut

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


def segments_of(parts: Sequence[dict[str, Any]], size: int) -> tuple[np.ndarray, np.ndarray]:
    """Offsets (global rows) and tokens of the segments at `size` of consecutive shards, from
    their document offsets and token counts: segments never cross shards, so they are those of
    `Index.segments(size)` over the same rows.

    Args:
        parts: Consecutive shards: {"row": first row, "docs": local document offsets, "tokens":
            tokens per sentence}.
        size: Sentences per segment.

    Returns:
        (offsets (one more than the segments), tokens per segment (int32)).
    """
    from tapt.indexer.reading.splitter import segment_offsets

    offsets, tokens = [], []
    for part in parts:
        seg = segment_offsets(part["docs"], size)
        offsets.append(seg[:-1] + part["row"])
        tokens.append(np.add.reduceat(np.asarray(part["tokens"]), seg[:-1], dtype=np.int64
                                      ).astype(np.int32) if len(seg) > 1
                      else np.empty(0, np.int32))
    if not parts:
        return np.zeros(1, np.int64), np.empty(0, np.int32)
    end = int(parts[-1]["row"]) + len(parts[-1]["tokens"])
    return (np.concatenate(offsets + [np.array([end], np.int64)]).astype(np.int64),
            np.concatenate(tokens))


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
        resources: Ray custom resources each actor needs (e.g. {"index-node": 1}: only on the
            nodes that offer it).

    Raises:
        InputError: Ray is not installed, or a setting cannot work.
        IndexFormatError: an actor opened another generation of the index than this process.
        ExecutorError: the actors failed or did not start within `timeout`.
    """

    def __init__(self, index, address: str | None = None, actors: int | None = None,
                 cpus_per_actor: float = 1.0, grid: int = GRID,
                 timeout: float = START_TIMEOUT, hold: str = "rows",
                 resources: dict[str, float] | None = None) -> None:
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
        groups = [[int(s) for s in g] for g in np.array_split(np.arange(n), count)]
        # a dead actor comes back for the next request; the call it died in fails (no retries:
        # a call on a stopped actor must fail at once, not wait for one)
        remote = self.ray.remote(num_cpus=cpus_per_actor, max_restarts=2,
                                 max_task_retries=0, **({"resources": resources}
                                                         if resources else {}))(ShardServer)
        # absolute: the actors' working directory is the cluster's, not this process's
        where = os.path.abspath(index.path)
        self.groups = groups
        self.spans = [span(index, g, grid) for g in groups]
        self.row_offsets = np.array([s.row_offset for s in index.shards] + [index.n_sentences],
                                    dtype=np.int64)
        self.traffic: dict[str, int] | None = None
        began = time.perf_counter()
        self.actors = [remote.remote(where, g, rows, hold)
                       for g, rows in zip(groups, self.spans)]
        try:                                 # all started at once, waited for once
            answers = self.ray.get([a.identity.remote() for a in self.actors]
                                   + [a.report.remote() for a in self.actors], timeout=timeout)
            identities, self.reports = answers[:count], answers[count:]
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
        self.start_seconds = time.perf_counter() - began
        log.info("%d serving actor(s) opened their shards of %s in %.1f s", count, index.path,
                 self.start_seconds)
        for actor in self.actors:            # after every start: not competing with one
            actor.warm.remote()

    def warmed(self, timeout: float | None = None) -> list[dict[str, float]]:
        """Wait until every actor has made ready what only requests need (`ShardServer.warm`).

        Args:
            timeout: Seconds each actor may wait (None: as long as it takes).

        Returns:
            Per actor, the seconds of each step.
        """
        return self._get([a.warmed.remote(timeout) for a in self.actors], "serve")

    def _get(self, refs: list[Any], what: str) -> list[Any]:
        try:
            return self.ray.get(refs)
        except Exception as exc:  # noqa: BLE001 - the task's own error, or one ExecutorError
            raise task_error(exc, what, resumable=False) from exc

    def scores(self, scorer, n: int, on: str = "rows") -> np.ndarray:
        """The scorer's score of every row (`on` codes: of every row's int8 codes), computed
        by the actors."""
        ref = self.ray.put(scorer)
        out = spill.empty(n, np.float32)
        for start, part in self._get([a.score.remote(ref, on) for a in self.actors], "score"):
            self._count("received", part)
            out[start:start + len(part)] = part
        return out

    def hold_scores(self, scorer, on: str = "rows") -> "RemoteScores":
        """The scorer's score of every row (`on` codes: of its int8 codes), kept by the actors
        that score the rows: a handle (`remote_scores.RemoteScores`), no score gathered."""
        from .remote_scores import RemoteScores

        return RemoteScores.create(self, "rows", scorer, on, of="rows")

    def hold_lexicon(self, score_shard) -> "RemoteScores":
        """`score_shard` of every shard's stored lexical ids, kept by the actors that hold the
        shards: a handle, no score gathered."""
        from .remote_scores import RemoteScores

        return RemoteScores.create(self, "lexicon", score_shard, of="shards")

    def zsum(self, *scores: "RemoteScores") -> "RemoteScores":
        """`scoring.ZSum` of held scores, kept by the actors (`remote_scores.remote_zsum`)."""
        from .remote_scores import remote_zsum

        return remote_zsum(*scores)

    def lexicon_scores(self, score_shard, n: int) -> np.ndarray:
        """`score_shard` of every shard's stored lexical ids, run by the actors that hold the
        shards (`Index.lexicon_scores`)."""
        ref = self.ray.put(score_shard)
        out = spill.empty(n, np.float32)
        for found in self._get([a.lexicon_scores.remote(ref) for a in self.actors], "score"):
            self._count("received", found)
            for start, part in found:
                out[start:start + len(part)] = part
        return out

    def top(self, scorer, view, cut: topcut.Cut, on: str = "rows") -> topcut.Candidates:
        """The budget's cut of the segments of `view` ranked by the scorer's mean sentence
        scores (`on` codes: scores of the int8 codes): each actor cuts its own segments, the
        driver merges the cuts and completes the segments that straddle two actors' rows
        (equal to `SentenceScored.budget_candidates` in one process)."""
        return self._merged_cuts(view, cut, self.spans, "top", scorer, on)

    def lexicon_top(self, models, index, view, cut: topcut.Cut) -> topcut.Candidates:
        """The budget's cut of the segments of `view` ranked by the mean of `models`' scores
        (`ngram_lm.HashedLMs`) of their sentences: each actor scores and cuts its own shards'
        segments (segments never cross shards), the driver merges the cuts; equal to
        `topcut.parts_cut` of `models.parts()` in one process."""
        rows = self.row_offsets
        spans = [(int(rows[group[0]]), int(rows[group[-1] + 1])) for group in self.groups]
        return self._merged_cuts(view, cut, spans, "lexicon_top", models)

    def _merged_cuts(self, view, cut: topcut.Cut, spans, method: str, scorer, *rest
                     ) -> topcut.Candidates:
        """The actors' `method(scorer, cut, size, first, *rest)` for every actor with rows
        (`spans`: each actor's rows [start, stop)). A request carries the scorer (or models),
        the cut, the segment size and the id of the first segment of the shard the actor's
        rows begin in: never offsets, so its bytes do not grow with the rows. Each answer is
        at most the budget's segments plus the pieces of the two segments its rows may begin
        and end inside; the cuts are merged by one running cut (`topcut.TopCut`: what ranks
        after a full cut's last is dropped at once), and the straddling segments completed
        from their pieces."""
        measure = cut.measure(view.lengths, view.tokens)
        size = segment_size_of(view)
        ref = self.ray.put(scorer)           # once, shared by every actor
        self._count("scorer_bytes", scorer)
        calls = []
        for actor, (start, stop) in zip(self.actors, spans):
            if stop <= start:
                continue
            shard = int(np.searchsorted(self.row_offsets, start, side="right")) - 1
            first = first_segment(view.offsets, int(self.row_offsets[shard]))
            self._count("sent", (cut, size, first, *rest))
            calls.append(getattr(actor, method).remote(ref, cut, size, first, *rest))
        top, pieces = topcut.TopCut(cut), []
        for part, edges, (seg, count, end) in self._get(calls, "score"):
            self._count("received", (part, edges, (seg, count, end)))
            if seg + count >= len(view.offsets) or int(view.offsets[seg + count]) != end:
                raise ValueError(f"an actor's segments {seg}..{seg + count} end at row {end}, "
                                 "the selection's segment view does not")
            top.add(part)
            pieces += edges
        top.add(topcut.join_pieces(pieces, view.offsets, measure))
        return top.result()

    def count_traffic(self) -> dict[str, int]:
        """Start counting the bytes of the requests and answers of the actors' cuts (pickled;
        for benchmarks): the returned dict is updated by every later cut.

        Returns:
            {"sent", "received", "requests"}; "sent" excludes the scorer, put once per cut
            and shared by every actor (`scorer_bytes` adds it).
        """
        self.traffic = {"sent": 0, "received": 0, "requests": 0, "scorer_bytes": 0}
        return self.traffic

    def _count(self, way: str, value: Any) -> None:
        from ray import cloudpickle

        if self.traffic is None:
            return
        self.traffic[way] += len(cloudpickle.dumps(value))
        if way == "sent":
            self.traffic["requests"] += 1

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


def segment_size_of(view) -> int:
    """The segment size a view was cut at: its longest segment (`splitter.segment_offsets`
    cuts each document into runs of at most the size, all but the last of a document exactly
    the size; where no document reaches the size, cutting at the longest cuts none either, so
    either way the same segments)."""
    return max(1, int(view.lengths.max())) if len(view.lengths) else 1


def first_segment(offsets: np.ndarray, row: int) -> int:
    """The id of the segment that begins at `row` (a shard's first row).

    Raises:
        ValueError: no segment begins there (the view is not of this index's shards).
    """
    at = int(np.searchsorted(offsets, row, side="left"))
    if at >= len(offsets) or int(offsets[at]) != row:
        raise ValueError(f"no segment of the view begins at row {row}, where a shard begins")
    return at


def span(index, shards: Sequence[int], grid: int) -> tuple[int, int]:
    """The rows [start, stop) an actor of these shards holds: the `grid`-row blocks that start
    in them (`shards.grid_ranges`); (0, 0) when none does."""
    offsets = np.array([s.row_offset for s in index.shards] + [index.n_sentences])
    ranges = grid_ranges(offsets, grid)
    mine = [r for s in shards for r in ranges[s]]
    return (mine[0][0], mine[-1][1]) if mine else (0, 0)
