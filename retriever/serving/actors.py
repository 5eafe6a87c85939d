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
`lexicon_top` (from its shards' stored lexical ids) and `search_rescored(queries, width)` (its
parts' candidates with global ids, rescored exactly from its own rows). Each actor asks Ray for
the memory it holds (`actor_memory`: its rows or codes, its FAISS parts, the scores a fit keeps)
and runs with the driver's tapt and Hugging Face settings (`ray_cluster.env_options`). The
driver keeps the index open too (memory-mapped; headers and lengths checked, the content left
to the actors) for everything else a selection does: the segment view, reading the chosen
text.

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
- every FAISS search (knn, and methods that search): each actor searches its parts and
  rescores its candidates from its own rows (`ShardServer.search_rescored`); the driver merges
  the candidates by their approximate similarity as `ShardedFaiss` merges a search in one
  process and ranks the best by the exact similarities the actors computed
  (`ShardServers.search`): the neighbours `Index.search` finds, with no row read by the driver;
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
import time
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from tapt.errors import IndexFormatError, InputError
from tapt.indexer.ann.faiss_index import ShardedFaiss
from tapt.indexer.ann.topk_merge import merge_in_groups
from tapt.indexer.building.ray_cluster import (
    ExecutorError,
    check_placeable,
    connect,
    custom_resources,
    env_options,
    import_ray,
    task_error,
)
from tapt.indexer.store.identity import same_snapshot
from tapt.retriever.ranking import topcut
from tapt.retriever.scoring import arrays
from tapt.retriever.serving.shard_server import HOLD, ShardServer
from tapt.retriever.serving.shard_set import segments_of, span  # noqa: F401 - where the tests and benchmarks look
from tapt.util import spill
from tapt.util.checks import real_number, whole_number

if TYPE_CHECKING:
    from tapt.retriever.serving.remote_scores import RemoteScores

log = logging.getLogger(__name__)

GRID = arrays.CHUNK
START_TIMEOUT = 600.0


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
        request_timeout: Seconds one call of a request may wait for the actors (None: as
            long as it takes); past it the call fails with `Unavailable` and `heal` replaces
            the actors that do not answer.

    Raises:
        InputError: Ray is not installed, or a setting cannot work.
        IndexFormatError: an actor opened another generation of the index than this process.
        ExecutorError: the actors failed or did not start within `timeout`.
    """

    def __init__(self, index, address: str | None = None, actors: int | None = None,
                 cpus_per_actor: float = 1.0, grid: int = GRID,
                 timeout: float = START_TIMEOUT, hold: str = "rows",
                 resources: dict[str, float] | None = None,
                 request_timeout: float | None = None) -> None:
        n = len(index.shards)
        self.request_timeout, self.restarts = request_timeout, 0
        if hold not in HOLD:
            raise InputError(f"must be one of {', '.join(HOLD)}", param="hold")
        if hold == "codes" and index.codes is None:
            raise InputError(f"index {index.path} has no int8 codes to hold: run tapt index "
                             f"reindex {index.path} --codes int8", param="hold")
        if actors is not None:
            whole_number(actors, "actors")
        real_number(cpus_per_actor, "cpus_per_actor", low=0, low_open=True,
                    what="more than 0")
        resources = custom_resources(resources)
        self.ray = import_ray("serving an index", param=None)
        self._owned = connect(address)
        count = min(actors or n, n)
        try:
            check_placeable(self.ray, count, cpus_per_actor, resources)
        except InputError:
            self.close()
            raise
        groups = [[int(s) for s in g] for g in np.array_split(np.arange(n), count)]
        # a dead actor comes back for the next request; the call it died in fails (no retries:
        # a call on a stopped actor must fail at once, not wait for one)
        remote = self.ray.remote(num_cpus=cpus_per_actor, max_restarts=2,
                                 max_task_retries=0, **({"resources": resources}
                                                         if resources else {}),
                                 **env_options())(ShardServer)
        # absolute: the actors' working directory is the cluster's, not this process's
        where = os.path.abspath(index.path)
        self.groups = groups
        self.spans = [span(index, g, grid) for g in groups]
        self.memory = [actor_memory(index, g, rows, hold) for g, rows in zip(groups, self.spans)]
        limit = max((int(n.get("Resources", {}).get("memory", 0)) for n in self.ray.nodes()
                     if n.get("Alive")), default=0)
        if limit and max(self.memory) > limit:
            self.close()
            fix = ("pass more `actors` (fewer shards each)" if count < n else
                   "hold codes (`hold` codes: half the bytes of float16 rows)"
                   if hold == "rows" and index.codes is not None else
                   "add nodes with more memory, or build the index in smaller shards")
            raise InputError(f"a serving actor needs about {max(self.memory) >> 20:,} MB of RAM "
                             f"(its rows, FAISS parts and scores), more than any node of the "
                             f"Ray cluster offers one actor ({limit >> 20:,} MB): {fix}",
                             param="actors")
        self.row_offsets = np.array([s.row_offset for s in index.shards] + [index.n_sentences],
                                    dtype=np.int64)
        self.traffic: dict[str, int] | None = None
        began = time.perf_counter()
        self._revive = lambda i: remote.options(memory=self.memory[i]).remote(
            where, groups[i], self.spans[i], hold)
        self.actors = [self._revive(i) for i in range(count)]
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
        self.check_open()
        ray = self.ray
        try:
            return ray.get(refs, timeout=self.request_timeout)
        except ray.exceptions.GetTimeoutError as exc:
            raise Unavailable(f"the serving actors did not answer the {what} step within "
                              f"{self.request_timeout:g} s") from exc
        except ray.exceptions.RayActorError as exc:
            raise Unavailable(f"a serving actor died during the {what} step") from exc
        except Exception as exc:  # noqa: BLE001 - the task's own error, or one ExecutorError
            raise task_error(exc, what, resumable=False) from exc

    def heal(self, timeout: float = 10.0) -> list[str]:
        """Ask every actor for its identity; replace each that is dead or does not answer
        within `timeout` seconds (a hung one is stopped first) by a new actor on the same
        shards, which loads them and warms as at the start; later calls wait for it.

        Returns:
            Per actor, what it was: "ok", "dead" or "hung" (the last two now replaced).
        """
        ray = self.ray
        refs = [a.identity.remote() for a in self.actors]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
        states = []
        for i, ref in enumerate(refs):
            state = "hung" if ref not in ready else "ok"
            if state == "ok":
                try:
                    ray.get(ref)
                except Exception:  # noqa: BLE001 - whatever the cause, it cannot answer
                    state = "dead"
            if state != "ok":
                ray.kill(self.actors[i], no_restart=True)
                self.actors[i] = self._revive(i)
                self.actors[i].warm.remote()
                self.restarts += 1
                log.warning("serving actor %d was %s: replaced", i, state)
            states.append(state)
        return states

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
        from tapt.retriever.serving.remote_scores import RemoteScores

        return RemoteScores.create(self, "rows", scorer, on, of="rows")

    def hold_lexicon(self, score_shard) -> "RemoteScores":
        """`score_shard` of every shard's stored lexical ids, kept by the actors that hold the
        shards: a handle, no score gathered."""
        from tapt.retriever.serving.remote_scores import RemoteScores

        return RemoteScores.create(self, "lexicon", score_shard, of="shards")

    def zsum(self, *scores: "RemoteScores") -> "RemoteScores":
        """`scoring.ZSum` of held scores, kept by the actors (`remote_scores.remote_zsum`)."""
        from tapt.retriever.serving.remote_scores import remote_zsum

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

    @property
    def closed(self) -> bool:
        """Whether `close` stopped the actors (a call then answers nothing: it is refused)."""
        return self.__dict__.get("_closed", False)

    def check_open(self) -> None:
        """Refuse a call once the actors are stopped: gathering from none of them would leave
        every score unwritten (whatever memory held), never an answer.

        Raises:
            InputError: `close` was called.
        """
        if self.closed:
            raise InputError("the served index is closed (its actors are stopped): serve it "
                             "again to select from it")

    def search(self, queries: np.ndarray, k: int, faiss_info: dict[str, Any], n: int, dim: int,
               nprobe: int | None = None, ef_search: int | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """`faiss_index.knn_search` of a served index: each actor searches its parts and
        rescores its candidates from its own rows; the driver merges their candidates as one
        search of every part would (the best `rescore_k` by approximate similarity, ties by
        id) and ranks those by their exact similarity. The same answer, with no row read
        here and k-wide exact similarities per candidate instead of rows."""
        from tapt.indexer.ann.faiss_index import FLAT_MARGIN, search_setting
        from tapt.indexer.ann.index_choice import rescore_k
        from tapt.indexer.ann.rescore import exact_top, merge_candidates

        k = min(int(k), n)
        kind, name, value = search_setting(faiss_info, n, dim, nprobe, ef_search)
        if name is not None:
            self._get([a.set_param.remote(name, value) for a in self.actors], "search")
        width = (min(n, k + FLAT_MARGIN) if kind == "flat" else
                 rescore_k(k, kind, n, (faiss_info.get("rescore") or {}).get("factor")))
        ref = self.ray.put(np.ascontiguousarray(queries, dtype=np.float32))
        found = self._get([a.search_rescored.remote(ref, width, n, kind == "flat")
                           for a in self.actors], "search")
        for part in found:
            self._count("received", part)
        merged = merge_candidates(found, width)
        if merged is None:
            empty = np.full((len(queries), 0), -1, dtype=np.int64)
            return empty.astype(np.float32), empty
        return exact_top(merged, k)

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
        self._closed = True
        if self._owned and self.ray.is_initialized():
            self.ray.shutdown()
        self._owned = False


class Unavailable(ExecutorError):
    """A serving actor died or did not answer in time: this request fails, the next one is
    answered by the actors `ShardServers.heal` put in their place."""


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


SCORE_BYTES = 24     # the scores a fit keeps in an actor per row (`remote_scores`: a few arrays)


def actor_memory(index, shards: Sequence[int], rows: tuple[int, int], hold: str) -> int:
    """The RAM an actor of these shards asks Ray for: the rows (or codes) it holds, its shards'
    FAISS parts (as their shard.json records them), the scores a fit keeps per row, and a
    worker's own (`build_plan.TASK_BASE`)."""
    from tapt.indexer.building.build_plan import TASK_BASE

    held = max(0, rows[1] - rows[0])
    per_row = index.dim * (1 if hold == "codes" else index.embeddings.dtype.itemsize)
    faiss = sum(int((index.shards[s].manifest.get("faiss") or {}).get("bytes") or 0)
                for s in shards)
    return TASK_BASE + held * (per_row + SCORE_BYTES) + faiss
