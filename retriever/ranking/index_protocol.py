"""What selection methods use of an index, declared: an open `Index` and a served one
(`tapt.serve`, whose actors hold the shards) both satisfy `SelectableIndex`; a served index is
also a `CutsOwnRows`, whose cuts are made where the rows are, not by reading every score back.

Methods ask `own_cuts(index)` instead of probing for methods by name, so the protocol a served
index must keep is written down here and checked by `isinstance`.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, runtime_checkable

import numpy as np

Scorer = Callable[[np.ndarray], np.ndarray]


@runtime_checkable
class SelectableIndex(Protocol):
    """The index of a selection: its rows, scored whole or searched."""

    n_sentences: int
    embeddings: Any
    codes: Any
    lexicon: Any

    def score_rows(self, scorer: Scorer) -> np.ndarray:
        """Every embedding row's score by `scorer` (which takes a block of rows)."""
        ...

    def score_codes(self, scorer: Scorer) -> np.ndarray:
        """Every row's score by `scorer` on the int8 codes."""
        ...

    def lexicon_scores(self, score_shard: Callable[[Any], np.ndarray]) -> np.ndarray:
        """Every row's score by `score_shard` on each shard's stored lexical ids."""
        ...

    def search(self, queries: np.ndarray, k: int, nprobe: int | None = None,
               ef_search: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The `k` nearest rows of each query (FAISS): (similarities, row ids)."""
        ...


@runtime_checkable
class CutsOwnRows(Protocol):
    """An index that makes a budget's cut where its rows are (a served index's actors)."""

    def top_cut(self, scorer: Scorer, view: Any, cut: Any, on: str = "rows") -> Any:
        """The cut (`topcut.Cut` -> `topcut.Candidates`; not imported: topcut reads this
        module) of the segments ranked by `scorer`'s mean sentence scores. A served index
        sends its actors the scorer, the cut and the view's segment size, never the view's
        offsets: each actor cuts its own segments, and answers with at most the cut."""
        ...

    def lexicon_cut(self, models: Any, view: Any, cut: Any) -> Any:
        """The cut of the segments ranked by a Moore-Lewis model pair's mean scores."""
        ...


@runtime_checkable
class Windowed(Protocol):
    """Rows that hand out a range without a copy (`RowView` over several shards)."""

    def window(self, start: int, stop: int) -> Any:
        """Rows [start, stop)."""
        ...


def own_cuts(index: Any) -> CutsOwnRows | None:
    """The index as a `CutsOwnRows` where it makes its own cuts, else None.

    Args:
        index: The selection's index.

    Returns:
        The index, or None for an index whose cuts are made from its scores in this process.
    """
    return index if isinstance(index, CutsOwnRows) else None


def window(rows: Any, start: int, stop: int) -> Any:
    """Rows [start, stop) of a row view or array, without a copy.

    Args:
        rows: An array, or a `Windowed` view over several shards.
        start: First row.
        stop: One past the last row.

    Returns:
        The rows.
    """
    return rows.window(start, stop) if isinstance(rows, Windowed) else rows[start:stop]
