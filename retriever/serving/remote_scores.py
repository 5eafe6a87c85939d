"""Scores of every row kept where the rows are: a served index's actors hold named score arrays,
the driver holds a handle (`RemoteScores`) and asks only for answers whose size does not grow
with the rows.

A selection that needs every row's score for more than one cut (the PU classifier's pre-ranking
and self-training rounds, `fused`'s z-score sum of the classifier's and Moore-Lewis's scores)
would otherwise gather a float per row to the driver several times (4 GB per gather at 10^9
rows). Here each actor keeps its rows' scores as a float32 (or float64) array under a name, and
the driver asks for:

- counts (`count_above`), per-array moments for z-scores (`moments`, `remote_zsum`: the sums
  of numpy's pairwise summation leaves, bit for bit those of the whole array: a leaf that
  straddles actors is summed by the first of them, the others' rows handed over actor to
  actor, never through the driver);
- rows at positions of the ranking (descending score, ties by ascending row, NaN last:
  `scoring.rank`'s order): the key at each position found by a k-way search on the actors'
  summed counts of keys at most a value (each round splits every open range of keys in up to
  `FANOUT` parts, with about `PIVOTS` keys asked in all, until a range holds at most `BRACKET`
  rows or one key: 4-8 rounds of requests for float32 scores, not 32), the last rows of each
  range settled from the actors' distinct keys in it, ties split by row across the actors in
  row order. This gives `rows_at_ranks` (the PU negatives drawn at ranking positions),
  `top_rows` (the pseudo-positives, in rank order), `rows_below_cut` (the negatives drawn in
  row order past 2^20 rows) and `rescore_best`'s rows (`top_rows`);
- the budget's cut of the segments ranked by the mean of the held scores (`cut`): each actor
  cuts its own segments and the driver merges the cuts (`ShardServers._merged_cuts`).

Answers are O(positions asked + shards) (and, for the moments, one float per 2^20 rows):
never a score per row, but for `values`, the whole array, which a caller that needs every
row's score (a ranking without a small budget) asks for once.

A held array lives as long as its handle: the handle's finalizer frees it in the actors.

The arrays have a layout: each actor's range of rows, either the rows it scores (`spans`, "rows")
or its own shards' rows ("shards": lexical scores, computed from the shards' lexical ids).
`relayout` moves an array into another layout (only the rows at the boundaries move, actor to
actor), which `remote_zsum` does to sum arrays of both kinds.
"""

from __future__ import annotations

import itertools
import os
import weakref
from typing import Any, Sequence

import numpy as np

from tapt.retriever.ranking import topcut
from tapt.retriever.scoring.moments import pairwise_sum

Layout = list[tuple[int, int]]      # each actor's rows [lo, hi) (hi <= lo: none)
BRACKET = 4      # rows in a range of keys whose keys are fetched rather than searched
FANOUT = 256     # a range of keys is split in up to this many per round of counts ...
PIVOTS = 1 << 14  # ... with at most about this many keys asked per round (64 KB of uint32)
_NAMES = itertools.count()


def _free(servers, actors: list[Any], name: str) -> None:
    """Free a held array in its actors (a handle's finalizer: never an error; nothing to do
    once the actors stopped or were replaced)."""
    try:
        if (servers.ray.is_initialized() and servers.actors
                and all(a is b for a, b in zip(servers.actors, actors))):
            for actor in actors:
                actor.held.remote("free", [name])
    except Exception:  # noqa: BLE001 - the actors or Ray may be gone already
        pass



def split_points(ranges: np.ndarray, ways: int) -> tuple[np.ndarray, np.ndarray]:
    """The keys that split each inclusive range [lo, hi] of `ranges` into up to `ways` parts of
    near equal width: its parts are (lo - 1, p_1], (p_1, p_2], .., (p_last, hi].

    Args:
        ranges: (r, 2) uint64 [lo, hi] with lo < hi.
        ways: Parts per range (>= 2; fewer where a range holds fewer keys).

    Returns:
        (every range's pivots ascending, uint64; where each range's pivots begin, r + 1
        offsets).
    """
    out: list[int] = []
    first = [0]
    for lo, hi in ranges.tolist():
        width = hi - lo + 1                       # Python ints: 2^64 does not overflow
        k = min(ways, width)
        out.extend(lo + width * j // k - 1 for j in range(1, k))
        first.append(len(out))
    return np.array(out, dtype=np.uint64), np.array(first, dtype=np.int64)

class RemoteScores:
    """A handle on one score per row held by a served index's actors (see the module's
    docstring). Made by `ShardServers.hold_scores`, `hold_lexicon` or `remote_zsum`.

    Attributes:
        servers: The `ShardServers`.
        name: The array's name in the actors.
        layout: Each actor's rows [lo, hi) of the array.
        of: "rows" (each actor's scoring span) or "shards" (its own shards' rows).
        dtype: float32 or float64.
    """

    def __init__(self, servers, name: str, layout: Layout, of: str, dtype: np.dtype) -> None:
        self.servers, self.name, self.layout, self.of = servers, name, layout, of
        self.dtype = np.dtype(dtype)
        self.n = sum(max(hi - lo, 0) for lo, hi in layout)
        self._moments: dict[float | None, tuple[float, float]] = {}    # by fill, until set
        self._finalizer = weakref.finalize(self, _free, servers, list(servers.actors), name)

    @classmethod
    def create(cls, servers, op: str, scorer: Any, *rest: Any, of: str) -> "RemoteScores":
        """Run `op` (`rows`, `lexicon`) with `scorer` in every actor, storing its answer under
        a new name."""
        name = new_name()
        ref = servers.ray.put(scorer)        # once, shared by every actor
        servers._count("scorer_bytes", scorer)
        answers = _call(servers, [(a, (op, name, ref, *rest)) for a in servers.actors])
        dtypes = {d for lo, hi, d in answers if hi > lo}
        return cls(servers, name, [(lo, hi) for lo, hi, _ in answers], of,
                   np.dtype(dtypes.pop() if len(dtypes) == 1 else np.float32))

    def __len__(self) -> int:
        return self.n

    def free(self) -> None:
        """Free the array in the actors now (else when the handle is collected)."""
        self._finalizer()

    def _holders(self) -> list[tuple[Any, int, int]]:
        return [(a, lo, hi) for a, (lo, hi) in zip(self.servers.actors, self.layout) if hi > lo]

    def _ask(self, op: str, *args: Any, per_actor: Sequence[tuple] | None = None) -> list[Any]:
        """`op(name, *args)` (or each holder's own args) in every actor that holds rows."""
        holders = self._holders()
        return _call(self.servers, [
            (a, (op, self.name, *(per_actor[i] if per_actor is not None else args)))
            for i, (a, _, _) in enumerate(holders)])

    # counts and positions ----------------------------------------------------------------

    def count_above(self, threshold: float) -> int:
        """How many scores are above `threshold` (NaN is not)."""
        return int(sum(self._ask("count_above", float(threshold))))

    def _keys_at(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For ranking positions (each < len): (the key at each, how many rows before it have
        its key, each holder's count of rows with each key (holders x positions)).

        A k-way search over the keys on the holders' summed counts of keys at most a value:
        each round splits every position's range of keys in up to `FANOUT` (fewer when many
        ranges are searched at once: about `PIVOTS` keys a round), so a 32-bit key takes 4-8
        rounds of requests, not 32; until a position's range holds at most `BRACKET` rows (or
        one key); then the holders' distinct keys in each range, with their counts, settle it."""
        positions = np.asarray(positions, dtype=np.int64)
        kind = np.uint64 if self.dtype == np.float64 else np.uint32
        bits = 64 if kind is np.uint64 else 32
        lo = np.zeros(len(positions), dtype=np.uint64)
        hi = np.full(len(positions), (1 << bits) - 1, dtype=np.uint64)
        below_lo = np.zeros(len(positions), dtype=np.int64)       # rows with a key below lo
        upto_hi = np.full(len(positions), self.n, dtype=np.int64)  # rows with a key <= hi
        for _ in range(bits):
            active = np.flatnonzero((lo < hi) & (upto_hi - below_lo > BRACKET))
            if not len(active):
                break
            # positions that share their search so far share its pivots: each range split once
            ranges, where = np.unique(np.stack([lo[active], hi[active]], axis=1), axis=0,
                                      return_inverse=True)
            pivots, first = split_points(ranges, max(2, min(FANOUT, PIVOTS // len(ranges))))
            values, at = np.unique(pivots, return_inverse=True)
            counts = self._count_le(values.astype(kind))[at.reshape(-1)].astype(np.int64)
            # each position's first pivot of its range whose count reaches it: one search over
            # (range, count), ascending since a range's counts grow with its pivots
            r = where.reshape(-1)
            step = np.int64(self.n + 2)
            keyed = np.repeat(np.arange(len(ranges), dtype=np.int64), np.diff(first)) * step
            got = np.searchsorted(keyed + counts, r * step + positions[active] + 1)
            inside, after = got < first[r + 1], got > first[r]
            hi[active[inside]] = pivots[got[inside]]
            upto_hi[active[inside]] = counts[got[inside]]
            lo[active[after]] = pivots[got[after] - 1] + np.uint64(1)
            below_lo[active[after]] = counts[got[after] - 1]
        return self._settle(positions, lo.astype(kind), hi.astype(kind), below_lo)

    def _settle(self, positions: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                below_lo: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`_keys_at` from each position's range of keys [lo, hi] (few rows, or one key) and
        the rows below it: the holders' distinct keys in each distinct range, with counts."""
        ranges, which = np.unique(np.stack([lo, hi], axis=1), axis=0, return_inverse=True)
        which = which.reshape(-1)
        found = self._ask("range_keys", ranges[:, 0], ranges[:, 1])
        r = np.concatenate([f[0] for f in found]).astype(np.int64)
        k = np.concatenate([f[1] for f in found]).astype(np.uint64)
        c = np.concatenate([f[2] for f in found]).astype(np.int64)
        h = np.concatenate([np.full(len(f[0]), i, np.int64) for i, f in enumerate(found)])
        order = np.lexsort((h, k, r))
        r, k, c, h = r[order], k[order], c[order], h[order]
        # groups: one (range, key), each holder's count of it; ranges in order, keys ascending
        new = np.ones(len(r), dtype=bool)
        new[1:] = (r[1:] != r[:-1]) | (k[1:] != k[:-1])
        starts = np.flatnonzero(new)
        group = np.cumsum(new) - 1
        total = np.add.reduceat(c, starts) if len(starts) else np.empty(0, np.int64)
        upto = np.cumsum(total)                                  # inclusive, over every group
        first = np.searchsorted(r[starts], np.arange(len(ranges)))   # each range's first group
        base = upto[first] - total[first]
        chosen = np.searchsorted(upto, positions - below_lo + base[which], side="right")
        keys = k[starts[chosen]].astype(lo.dtype)
        below = below_lo + (upto[chosen] - total[chosen] - base[which])
        picked, column = np.unique(chosen, return_inverse=True)
        eq_picked = np.zeros((len(found), len(picked)), dtype=np.int64)
        at = np.searchsorted(picked, group)
        hit = (at < len(picked)) & (picked[np.minimum(at, len(picked) - 1)] == group)
        np.add.at(eq_picked, (h[hit], at[hit]), c[hit])
        return keys, positions - below, eq_picked[:, column.reshape(-1)]

    def _count_le(self, keys: np.ndarray) -> np.ndarray:
        """How many keys of every holder are <= each of `keys`, summed by the first holder
        from the others' answers (handed to it actor to actor): one array comes here."""
        holders = self._holders()
        servers = self.servers
        ref = servers.ray.put(keys)
        servers._count("sent", keys)
        others = [a.held.remote("count_le", self.name, ref) for a, _, _ in holders[1:]]
        for _ in others:
            servers._count("sent", ("count_le", self.name))
        return _call(servers, [(holders[0][0], ("count_le_sum", self.name, ref, others))])[0]

    def rows_at_ranks(self, ranks: np.ndarray) -> np.ndarray:
        """`rank(scores)[ranks]`: the rows at these positions of the ranking, any order.

        Args:
            ranks: Positions in the ranking (0 = the best), each below `len(self)`.

        Returns:
            int64 rows, one per position.
        """
        ranks = np.asarray(ranks, dtype=np.int64)
        if not len(ranks):
            return np.empty(0, np.int64)
        keys, ties, eq = self._keys_at(ranks)
        # the tie's holder: the first whose rows with that key (in row order) reach it
        reach = np.cumsum(eq, axis=0)
        holder = np.argmax(reach > ties, axis=0)
        local = ties - (reach[holder, np.arange(len(ranks))] - eq[holder, np.arange(len(ranks))])
        per = [np.flatnonzero(holder == h) for h in range(len(eq))]
        answers = self._ask("tied_rows", per_actor=[(keys[p], local[p]) for p in per])
        out = np.empty(len(ranks), dtype=np.int64)
        for p, rows in zip(per, answers):
            out[p] = rows
        return out

    def _cut(self, start: int) -> tuple[int | None, list[int], np.ndarray]:
        """The first `start` positions of the ranking as (the key at position `start`, each
        holder's count of rows with that key inside the cut, each holder's rows inside);
        key None when the cut holds every row."""
        holders = self._holders()
        if start >= self.n:
            return None, [0] * len(holders), np.array([hi - lo for _, lo, hi in holders])
        keys, ties, eq = self._keys_at(np.array([start]))
        lt = np.array([found[0] for found in self._ask("count_eq", keys)]).reshape(-1, 1)
        ties_left, split = int(ties[0]), []
        for count in eq[:, 0]:
            split.append(min(int(count), ties_left))
            ties_left -= split[-1]
        return int(keys[0]), split, lt[:, 0] + np.array(split, dtype=np.int64)

    def top_rows(self, k: int) -> np.ndarray:
        """`rank(scores)[:k]`: the first `k` rows of the ranking, in rank order."""
        k = min(max(int(k), 0), self.n)
        if k == 0:
            return np.empty(0, np.int64)
        key, split, _ = self._cut(k)
        found = self._ask("inside", per_actor=[(key, s) for s in split])
        rows = np.concatenate([r for r, _ in found])
        keys = np.concatenate([k_ for _, k_ in found])
        return rows[np.lexsort((rows, keys))]

    def rows_below_cut(self, start: int, ordinals: np.ndarray) -> np.ndarray:
        """`np.sort(rank(scores)[start:])[ordinals]`: the rows outside the first `start`
        positions of the ranking, taken by their position among those rows in row order
        (`ordering.rows_below_cut`).

        Args:
            start: A position of the ranking.
            ordinals: Sorted positions among the rows outside the cut.

        Returns:
            int64 rows, ascending.
        """
        ordinals = np.asarray(ordinals, dtype=np.int64)
        key, split, inside = self._cut(int(start))
        sizes = np.array([hi - lo for _, lo, hi in self._holders()], dtype=np.int64)
        outside = sizes - inside
        bounds = np.concatenate([[0], np.cumsum(outside)])
        if len(ordinals) and ordinals[-1] >= bounds[-1]:
            raise ValueError(f"ordinals beyond the {int(bounds[-1])} rows outside the cut")
        cuts = np.searchsorted(ordinals, bounds)
        answers = self._ask("outside", per_actor=[
            (key, split[h], ordinals[cuts[h]:cuts[h + 1]] - bounds[h])
            for h in range(len(sizes))])
        return np.concatenate(answers) if answers else np.empty(0, np.int64)

    # values --------------------------------------------------------------------------------

    def set_rows(self, rows: np.ndarray, values: np.ndarray) -> None:
        """Overwrite the scores of `rows` (ascending) with `values`."""
        rows = np.asarray(rows, dtype=np.int64)
        values = np.asarray(values)
        self._moments.clear()
        holders = self._holders()
        bounds = np.searchsorted(rows, [lo for _, lo, _ in holders] + [holders[-1][2]]) \
            if holders else []
        self._ask("set", per_actor=[(rows[bounds[h]:bounds[h + 1]], values[bounds[h]:bounds[h + 1]])
                                    for h in range(len(holders))])

    def at(self, rows: np.ndarray) -> np.ndarray:
        """The scores of `rows` (any order), gathered: O(rows asked)."""
        rows = np.asarray(rows, dtype=np.int64)
        unique, inverse = np.unique(rows, return_inverse=True)
        holders = self._holders()
        if not holders or not len(unique):
            return np.empty(len(rows), dtype=self.dtype)
        bounds = np.searchsorted(unique, [lo for _, lo, _ in holders] + [holders[-1][2]])
        found = self._ask("at", per_actor=[(unique[bounds[h]:bounds[h + 1]],)
                                           for h in range(len(holders))])
        return np.concatenate(found).astype(self.dtype)[inverse]

    def zscores_at(self, rows: np.ndarray) -> list[np.ndarray | None]:
        """Of a sum made by `remote_zsum`: each summed array's z-scores at `rows` (None for a
        constant one), as `moments.ZSum.zscores_at`."""
        out: list[np.ndarray | None] = []
        for part in getattr(self, "parts", []):
            if part is None:
                out.append(None)
                continue
            values, fill, mean, std = part
            block = values.at(rows).astype(np.float64)
            if fill is not None:
                block = np.where(np.isfinite(block), block, fill)
            out.append((block - mean) / std)
        return out

    def astype(self, dtype: Any) -> "RemoteScores":
        """The scores cast to `dtype` (a new array, held where these are)."""
        name = new_name()
        _call(self.servers, [
            (a, ("cast", name, self.name, np.dtype(dtype).str)) for a, _, _ in self._holders()])
        return RemoteScores(self.servers, name, self.layout, self.of, np.dtype(dtype))

    def values(self) -> np.ndarray:
        """Every row's score, gathered here (the one answer that grows with the rows: for a
        ranking of every segment)."""
        out = np.empty(self.n, dtype=self.dtype)
        for lo, part in self._ask("values"):
            out[lo:lo + len(part)] = part
        return out

    def finite_fill(self) -> float | None:
        """What a z-score counts a non-finite score as (`moments.ZSum`): None when every score
        is finite, else the lowest finite score (0.0 when there is none)."""
        found = self._ask("finite")
        if all(ok for ok, _ in found):
            return None
        lows = [low for _, low in found if low is not None]
        return min(lows) if lows else 0.0

    def moments(self, fill: float | None = None) -> tuple[float, float]:
        """`moments.moments(scores, fill)`, bit for bit: numpy's pairwise summation, each of its
        leaves summed where its rows are (a leaf across actors by the first, the others' rows
        handed to it actor to actor)."""
        n = self.n
        if n == 0:
            return float("nan"), float("nan")
        if fill in self._moments:
            return self._moments[fill]
        leaves: list[tuple[int, int]] = []
        pairwise_sum(n, lambda lo, hi: leaves.append((lo, hi)) or 0.0)
        plan = self._leaf_plan(leaves)
        total = self._leaf_sums(plan, leaves, fill, None)
        mean = np.float64(total) / n
        squares = self._leaf_sums(plan, leaves, fill, float(mean))
        self._moments[fill] = float(mean), float(np.sqrt(np.float64(squares) / n))
        return self._moments[fill]

    def _leaf_plan(self, leaves: list[tuple[int, int]]) -> dict[int, list[tuple]]:
        """For each holder, the leaves it sums: (lo, hi, pieces of the leaf's other rows, as
        references to the other holders' answers)."""
        holders = self._holders()
        plan: dict[int, list[tuple]] = {h: [] for h in range(len(holders))}
        for lo, hi in leaves:
            meet = [h for h, (_, a, b) in enumerate(holders) if a < hi and b > lo]
            pieces = []
            for h in meet[1:]:
                actor, a, b = holders[h]
                pieces.append((max(a, lo), actor.held.remote("piece", self.name, max(a, lo),
                                                            min(b, hi))))
            plan[meet[0]].append((lo, hi, pieces))
        return plan

    def _leaf_sums(self, plan, leaves, fill, mean) -> float:
        holders = self._holders()
        answers = _call(self.servers, [
            (holders[h][0], ("leaf_sums", self.name, plan[h], fill, mean))
            for h in range(len(holders))])
        sums: dict[tuple[int, int], float] = {}
        for h, found in enumerate(answers):
            for (lo, hi, _), value in zip(plan[h], found):
                sums[lo, hi] = value
        return pairwise_sum(self.n, lambda lo, hi: sums[lo, hi])

    def relayout(self, layout: Layout, of: str) -> "RemoteScores":
        """The same scores held in another layout (a new array; only the rows each actor lacks
        move, from the actors that hold them)."""
        if [tuple(x) for x in layout] == [tuple(x) for x in self.layout]:
            return self
        name = new_name()
        holders = self._holders()
        calls = []
        for actor, (lo, hi) in zip(self.servers.actors, layout):
            pieces = []
            for src, a, b in holders:
                if src is actor or not (a < hi and b > lo):
                    continue
                pieces.append((max(a, lo), src.held.remote("piece", self.name, max(a, lo),
                                                           min(b, hi))))
            calls.append((actor, ("assemble", name, self.name, lo, max(hi, lo), pieces)))
        _call(self.servers, calls)
        return RemoteScores(self.servers, name, [(lo, max(hi, lo)) for lo, hi in layout], of,
                            self.dtype)

    def cut(self, view, cut: topcut.Cut) -> topcut.Candidates:
        """The budget's cut of the segments of `view` ranked by the mean of the held scores:
        each actor cuts its own segments, the driver merges the cuts (equal to
        `topcut.parts_cut` of the whole array in one process)."""
        return self.servers._merged_cuts(view, cut, self.layout, "held_top", self.name,
                                         self.of)


def new_name() -> str:
    return f"scores-{os.getpid()}-{next(_NAMES)}"


def _call(servers, calls: list[tuple[Any, tuple]]) -> list[Any]:
    """Run `(actor, (op, *args))` calls (`ShardServer.held`) and return their answers,
    counting the bytes of requests and answers (`ShardServers.count_traffic`; references to
    other actors' answers, handed actor to actor, count as nothing here)."""
    refs = []
    for actor, args in calls:
        refs.append(actor.held.remote(*args))
        servers._count("sent", _without_refs(args))
    answers = servers._get(refs, "score")
    for answer in answers:
        servers._count("received", answer)
    return answers


def _without_refs(value: Any) -> Any:
    """`value` with the Ray object references in it (nested in tuples and lists) as None."""
    if isinstance(value, (tuple, list)):
        return type(value)(_without_refs(v) for v in value)
    return None if type(value).__name__ == "ObjectRef" else value


def remote_zsum(*scores: RemoteScores) -> RemoteScores:
    """`moments.ZSum(*scores)` held in the actors: the sum of each array's z-scores (float64),
    the means and spreads bit for bit those of one process; arrays of other layouts are moved
    into the first's first.

    Raises:
        ValueError: no array, or arrays of different lengths.
    """
    if not scores:
        raise ValueError("fuse_zscores needs at least one score array")
    first = scores[0]
    if any(len(s) != len(first) for s in scores):
        raise ValueError("fuse_zscores: score arrays differ in length")
    terms, aligned, parts = [], [], []
    for values in scores:      # the moments of the array as it is held (cached there)
        fill = values.finite_fill()
        mean, std = values.moments(fill)
        moved = values.relayout(first.layout, first.of)
        aligned.append(moved)
        parts.append((values, fill, mean, std) if std != 0 else None)
        if std != 0:
            terms.append((moved.name, fill, mean, std))
    servers, name = first.servers, new_name()
    _call(servers, [(a, ("zsum", name, lo, max(hi, lo), terms if hi > lo else []))
                    for a, (lo, hi) in zip(servers.actors, first.layout)])
    out = RemoteScores(servers, name, [(lo, max(hi, lo)) for lo, hi in first.layout],
                       first.of, np.float64)
    out.parts = parts          # for `zscores_at`: why a row scored as it did
    for moved, original in zip(aligned, scores):
        if moved is not original:
            moved.free()
    return out
