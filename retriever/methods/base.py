"""What every selection method is made of: `Method`, its `Params`, and the `RankingInputs` it ranks
with.

A method is one module of this package holding one `Method` subclass decorated with `@register`
(see `registry`); nothing else names it. The CLI's `tapt select NAME` command and its options,
`auto`'s candidates, the `prerank` choices of detector rescoring and `tapt bench recall` are all
derived from the registered objects and their properties:

    from dataclasses import dataclass

    from tapt.retriever.scoring import arrays
    from tapt.retriever.methods.base import Params, SentenceScored, param
    from tapt.retriever.methods.registry import register

    @dataclass(frozen=True)
    class MaxCosParams(Params):
        floor: float = param(-1.0, "Ignore cosines below this.", minimum=-1.0)

    @register
    class MaxCos(SentenceScored):
        name = "maxcos"
        summary = "Best cosine to any task sentence."
        Params = MaxCosParams

        def scorer(self, ctx, task, params, heldout=False):
            return (lambda rows: arrays.max_similarity(rows, task).clip(min=params.floor)), {}

Saved as `retriever/methods/maxcos.py`, this is `tapt select maxcos IDX --floor 0.2 ...`,
`index.select("maxcos", ..., floor=0.2)`, a `prerank` choice and a `tapt bench recall` method
(tests/retriever/test_registry.py adds exactly this file). Override `rank` instead of `scorer` for a
method that does not score sentences; see the existing modules. A method whose scores do not
come from one scorer of the embeddings overrides `sentence_scores`, and `score_parts` too when
it can compute them run by run (Moore-Lewis, `fused`): a small budget's cut then streams, with
no score per sentence held.

Scores are "higher = more task-like" everywhere; the arithmetic lives in `scoring.arrays`,
`scoring.ngram_lm`, `learned.pu` and `learned.detectors`, which know nothing of indexes.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable, Literal

import numpy as np

from tapt.errors import InputError
from tapt.retriever.methods import segments
from tapt.retriever.methods.params import (
    GIVEN,
    NoParams,
    Params,
    ScanParams,
    param,
    param_choices,
    param_type,
    requirement_met,
    scans_codes,
)
from tapt.retriever.methods.ranking_inputs import CorpusCache, Memo, RankingInputs, streams
from tapt.retriever.methods.segments import (
    Ranking,
    ScoreParts,
    SegmentView,
    budget_cut,
    budget_order,
    budget_sentences,
    by_sentence_scores,
    cut_of_parts,
    note_shortfall,
    segment_tokens,
    small_budget,
    take,
)
from tapt.retriever.ranking import topcut
from tapt.retriever.ranking.budget import budget_target, cut
from tapt.retriever.ranking.index_protocol import own_cuts
from tapt.retriever.scoring import arrays
from tapt.util.checks import did_you_mean

if TYPE_CHECKING:
    from tapt.indexer.index import Index

# The pieces of a method, in their modules; importable from here, where methods look for them.
__all__ = ["CorpusCache", "Memo", "Method", "NoParams", "Params", "Ranking", "RankingInputs",
           "ScanParams", "ScoreParts", "Scorer", "SegmentView", "SentenceScored",
           "budget_cut", "budget_order", "budget_sentences", "by_sentence_scores", "code_scale",
           "cut_of_parts", "note_shortfall", "param", "param_choices", "param_type",
           "rescored_rows", "scan_rows", "scans_codes", "segment_tokens", "small_budget",
           "streams", "take"]

log = logging.getLogger(__name__)

Scorer = Callable[[np.ndarray], np.ndarray]
BudgetNeed = Literal["required", "optional", "none"]


def code_scale(index: "Index") -> np.ndarray:
    """The per-dimension scale that decodes `index`'s int8 codes.

    Raises:
        InputError: the index has no codes (naming the reindex command that adds them).
    """
    codes = index.manifest.get("codes")
    if index.codes is None or not codes:
        raise InputError(f"index {index.path} has no int8 codes: run tapt index reindex "
                         f"{index.path} --codes int8", param="scan")
    return np.asarray(codes["scale"], dtype=np.float32)


def rescored_rows(ctx: "RankingInputs", params: Params) -> int:
    """How many rows a `scan` codes selection rescores exactly: `rescore` x the budget's
    sentences. Checked before any fitting.

    Raises:
        InputError: the index has no codes, or the selection has no budget.
    """
    code_scale(ctx.index)
    if ctx.budget is None:
        raise InputError("scanning codes needs a budget", param="budget")
    return int(np.ceil(params.rescore * budget_sentences(ctx.view, ctx.budget)))


def scan_rows(ctx: "RankingInputs", params: Params) -> Callable[[Scorer], np.ndarray]:
    """How a method's full scans score every corpus row: exactly (`Index.score_rows`), or with
    `scan` codes on the int8 codes (`Index.score_codes` of the scorer's `for_codes`). A served
    index runs either in its actors."""
    if not scans_codes(params):
        return ctx.index.score_rows
    scale = code_scale(ctx.index)
    return lambda scorer: ctx.index.score_codes(scorer.for_codes(scale))


class Method:
    """One selection method. Subclasses set the class attributes and implement `rank`.

    Attributes:
        name: The method's name (`tapt select NAME`, `index.select(NAME, ...)`).
        summary: One line for listings.
        help: The longer description and examples of `tapt select NAME -h`.
        budget: "required", "optional" (see `budget_help`) or "none".
        budget_help: What the method selects without a budget (optional budgets).
        needs_text: Whether it reads the task's text (refused for a task given as embeddings).
        needs_embeddings: Whether it needs the task's embeddings at all.
        can_prerank: Whether its full ranking can be a `prerank` for detector rescoring.
        auto_candidate: Whether `auto` may choose it (it must implement `scorer`).
        min_task_sentences: Fewest task sentences it accepts; below it the task is refused.
        warn_task_sentences: Below this many task sentences a selection warns that the fitted
            model is unreliable (and records the warning in its manifest).
        order: Position in listings (then by name).
        Params: Its parameters, a frozen dataclass subclass of `Params`.
    """

    name: ClassVar[str]
    summary: ClassVar[str]
    help: ClassVar[str] = ""
    budget: ClassVar[BudgetNeed] = "required"
    budget_help: ClassVar[str] = ""
    needs_text: ClassVar[bool] = False
    needs_embeddings: ClassVar[bool] = True
    can_prerank: ClassVar[bool] = False
    auto_candidate: ClassVar[bool] = False
    min_task_sentences: ClassVar[int] = 1
    warn_task_sentences: ClassVar[int] = 1
    order: ClassVar[int] = 100
    Params: ClassVar[type[Params]] = NoParams

    def __repr__(self) -> str:
        return f"<method {self.name}>"

    def make_params(self, values: dict[str, Any] | None = None,
                    explicit: Iterable[str] | None = None, also: Iterable[str] = ()) -> Params:
        """Validated parameters from keyword values.

        Args:
            values: Parameter values by name (missing ones take their defaults).
            explicit: The names the user gave (default: every key of `values`); a parameter
                that only applies with another's value is refused when given explicitly with
                a value other than its default (its default, as `describe_methods` lists it,
                is accepted wherever it does not apply).
            also: Other keyword names of the call (`budget`, `seed`, ...), suggested for an
                unknown name that is close to one of them.

        Returns:
            An instance of `self.Params`.

        Raises:
            InputError: an unknown parameter or a value that cannot work.
        """
        values = dict(values or {})
        known = [f.name for f in dataclasses.fields(self.Params)]
        for name in values:
            if name not in known:
                takes = f"its parameters are {', '.join(known)}" if known else "it has none"
                raise InputError(f"{self.name} has no parameter `{name}`"
                                 f"{did_you_mean(name, [*known, *also])} ({takes})", param=name)
        params = self.Params(**values)
        given = set(values) if explicit is None else set(explicit)
        for f in dataclasses.fields(params):
            requires = f.metadata.get("requires")
            if (requires and f.name in given and not requirement_met(params, requires)
                    and getattr(params, f.name) != f.default):
                value = "" if requires[1] is GIVEN else f" {requires[1]}"
                raise InputError(f"only applies with `{requires[0]}`{value}", param=f.name)
        return params

    def shared_params(self, params: Params) -> Params:
        """This method's parameters taking the values of same-named fields of another method's
        `params` (how `prerank` and `auto` pass k, m, rounds, nprobe... along)."""
        known = {f.name for f in dataclasses.fields(self.Params)}
        return self.make_params({k: v for k, v in params.to_dict().items() if k in known},
                                explicit=())

    def uses_text(self, params: Params) -> bool:
        """Whether this method, with these parameters, reads the task's text."""
        return self.needs_text

    def uses_embeddings(self, params: Params) -> bool:
        """Whether this method, with these parameters, needs the task's embeddings."""
        return self.needs_embeddings

    def pools_documents(self, params: Params) -> bool:
        """Whether this method's ranking goes through sentence scores that `context` "document"
        can pool (see `retriever.ranking.document_pooling`)."""
        return False

    @property
    def scores_sentences(self) -> bool:
        """Whether the method implements `sentence_scores`."""
        return type(self).sentence_scores is not Method.sentence_scores

    def min_task(self, params: Params) -> int:
        """Fewest task sentences this method can work with, with these parameters."""
        return self.min_task_sentences

    def rank(self, ctx: RankingInputs, params: Params) -> Ranking:
        """Select: what `tapt select NAME` and `Index.select(NAME, ...)` run.

        Args:
            ctx: The index, the task and the budget.
            params: This method's validated parameters.

        Returns:
            The selected segments in rank order (cut at `ctx.budget` when there is one).
        """
        raise NotImplementedError

    def full_ranking(self, ctx: RankingInputs, params: Params) -> Ranking:
        """Every segment the method can rank, in order, uncut (for `can_prerank` methods).

        Args:
            ctx: The index and the task (its budget is ignored).
            params: This method's validated parameters.

        Returns:
            The whole ranking.
        """
        raise InputError(f"{self.name} cannot pre-rank candidates", param="prerank")

    def top_segments(self, ctx: RankingInputs, params: Params, count: int) -> np.ndarray:
        """The first `count` segments of `full_ranking`, in rank order: the candidates a
        rescoring method (iforest) takes from this pre-ranking.

        Args:
            ctx: The index and the task (its budget is ignored).
            params: This method's validated parameters.
            count: How many segments.

        Returns:
            Segment ids, best first (fewer where the ranking holds fewer).
        """
        return self.full_ranking(ctx, params).segments[:count]

    def sentence_scores(self, ctx: RankingInputs, params: Params
                        ) -> tuple[np.ndarray, dict[str, Any]] | None:
        """A score per corpus sentence whose segment means rank segments at any segment size.

        `tapt bench recall` cuts these at every budget and segment size.

        Args:
            ctx: The index, the task and the budget.
            params: This method's validated parameters.

        Returns:
            (scores, info): one score per corpus sentence and what the method reports; None
                for methods that rank segments another way.
        """
        return None

    def explain(self, ctx: RankingInputs, params: Params, rows: np.ndarray
                ) -> dict[str, np.ndarray]:
        """The parts of the sentence scores of `rows`, by name, whose sum is each one's
        score (`retriever.selections.explain`); {} (the default) for a method whose score is
        no sum of sentence scores."""
        return {}

    def depends_on_budget(self, params: Params) -> bool:
        """Whether `sentence_scores` change with the budget (then they are computed per budget)."""
        return True

    def scorer(self, ctx: RankingInputs, task: np.ndarray, params: Params, heldout: bool = False
               ) -> tuple[Scorer, dict[str, Any]]:
        """An embedding scorer fitted on the task, for `auto_candidate` methods.

        Args:
            ctx: The index and the selection's settings.
            task: The task's embeddings (the whole task, or its training part when `auto`
                holds some out).
            params: This method's validated parameters.
            heldout: Whether `task` is a training part (`auto`'s held-out protocol).

        Returns:
            (scorer, info): a function from embedding rows to scores, and what the fit saw.
        """
        raise NotImplementedError(f"{self.name} has no embedding scorer")


class SentenceScored(Method):
    """A method that scores every corpus sentence and ranks segments by their mean score.

    Subclasses implement `scorer` (an embedding scorer) or override `sentence_scores`.
    Without a budget, segments whose mean score is above `threshold` are selected (a method
    whose `threshold` is None needs a budget).
    """

    threshold: ClassVar[float | None] = None
    can_prerank = True

    def pools_documents(self, params: Params) -> bool:
        return True

    def sentence_scores(self, ctx: RankingInputs, params: Params
                        ) -> tuple[np.ndarray, dict[str, Any]]:
        """Every row's score by the fitted `scorer`; with `scan` codes (`ScanParams`), every
        row's score on its int8 codes, the best `rescore` x budget sentences rescored exactly
        from the stored embeddings (the selection's segments mix both)."""
        if not scans_codes(params):
            scorer, info = self.scorer(ctx, ctx.need_task(self.name), params)
            return ctx.index.score_rows(scorer), info
        wanted = rescored_rows(ctx, params)
        scorer, approx, info = self.fitted_scores(ctx, params)
        scores, rescored = arrays.rescore_best(ctx.index.embeddings, scorer, approx, wanted)
        return scores, {**info, "scan": "codes", "rescored_sentences": int(len(rescored))}

    def fitted_scores(self, ctx: RankingInputs, params: Params
                      ) -> tuple[Scorer, np.ndarray, dict[str, Any]]:
        """The fitted scorer, its scores of every corpus row (`scan_rows`: on the codes with
        `scan` codes) and what the fit saw. A method whose fit ends with those scores (the
        classifier's last round) overrides this to return them instead of scanning again."""
        scorer, info = self.scorer(ctx, ctx.need_task(self.name), params)
        return scorer, scan_rows(ctx, params)(scorer), info

    def row_scorer(self, ctx: RankingInputs, params: Params
                   ) -> tuple[Scorer, dict[str, Any]] | None:
        """The fitted scorer whose scores of `ctx.index.embeddings` are `sentence_scores`, or
        None where they come another way (a method that overrides `sentence_scores` overrides
        this too; `scan` codes). With one, a budget's cut streams (`budget_candidates`)."""
        if type(self).sentence_scores is not SentenceScored.sentence_scores or scans_codes(params):
            return None
        # kept for the task: `explain` scores the chosen rows with the same fit
        return ctx.memo.get(("row_scorer", self.name, params, ctx.n_positive, ctx.seed),
                            lambda: self.scorer(ctx, ctx.need_task(self.name), params))

    def explain(self, ctx: RankingInputs, params: Params, rows: np.ndarray
                ) -> dict[str, np.ndarray]:
        """The parts of the sentence scores of `rows` whose sum is each one's score, by name
        (`retriever.selections.explain`): here the fitted row scorer's own score, under the
        method's name; {} where the scores come another way (`scan` codes, a method that
        overrides `sentence_scores` without overriding this)."""
        fitted = self.row_scorer(ctx, params)
        if fitted is None:
            return {}
        unique, inverse = np.unique(np.asarray(rows, dtype=np.int64), return_inverse=True)
        scores = arrays.exact_scores(ctx.index.embeddings, fitted[0], unique)
        return {self.name: scores[inverse].astype(np.float64)}

    def budget_candidates(self, ctx: RankingInputs, scorer: Scorer, cut: topcut.Cut,
                          on: str = "rows") -> topcut.Candidates:
        """The segments `cut` keeps of the ranking by `scorer`'s mean sentence scores, in rank
        order: every row (`on` codes: every row's int8 codes) scored block by block on the
        global grid, only the running cut kept (`topcut.scan_cut`); the segments and scores of
        the whole-array path, bit for bit. An index with a `top_cut` (a served index) makes
        the cut itself, as its `score_rows` scores rows."""
        view = ctx.view
        served = own_cuts(ctx.index)
        if served is not None:           # a served index: its actors cut their own rows
            return served.top_cut(scorer, view, cut, on)
        measure = cut.measure(view.lengths, view.tokens)
        rows = ctx.index.codes if on == "codes" else ctx.index.embeddings
        kept, pieces = topcut.scan_cut(rows, scorer, view.offsets, 0, measure, cut,
                                       progress=ctx.progress)
        return topcut.merge(kept, topcut.join_pieces(pieces, view.offsets, measure), cut)

    def score_parts(self, ctx: RankingInputs, params: Params) -> ScoreParts | None:
        """`sentence_scores` as consecutive parts computed one at a time, for a method whose
        scores do not come from a row scorer of the embeddings; None (the default) where they
        come only whole. With parts, a budget's cut streams (`topcut.parts_cut`): no score per
        sentence is kept beyond what the method itself holds."""
        return None

    def parts_candidates(self, ctx: RankingInputs, parts: ScoreParts, cut: topcut.Cut
                         ) -> topcut.Candidates:
        """The segments `cut` keeps of the ranking by the mean of the scores in `parts`, in
        rank order (those of `by_sentence_scores`, bit for bit)."""
        if parts.cut is not None:
            return parts.cut(ctx.view, cut)
        return cut_of_parts(ctx.view, parts.parts, cut, ctx.progress, parts.count)

    def depends_on_budget(self, params: Params) -> bool:
        return scans_codes(params)         # how many rows are rescored

    def rank(self, ctx: RankingInputs, params: Params) -> Ranking:
        """With a budget that `streams`, a fitted row scorer's cut streams
        (`budget_candidates`: no score per sentence is kept), as does a method's whose scores
        come in parts (`score_parts`); otherwise every sentence's score is computed, then
        ranked (`by_sentence_scores`). Both give the same selection. With
        `scan` codes, a budget and sentence context, a method whose fit scans nothing ranks
        candidates (`code_rank`)."""
        if (scans_codes(params) and ctx.budget is not None and ctx.view.context == "sentence"
                and type(self).sentence_scores is SentenceScored.sentence_scores
                and type(self).fitted_scores is SentenceScored.fitted_scores):
            return self.code_rank(ctx, params)
        fitted = self.row_scorer(ctx, params)
        parts = self.score_parts(ctx, params) if fitted is None and streams(ctx) else None
        if parts is not None:
            return Ranking.of(self.parts_candidates(ctx, parts, budget_cut(ctx.view, ctx.budget)),
                              dict(parts.info))
        if fitted is None:
            scores, info = self.sentence_scores(ctx, params)
        elif streams(ctx):
            return Ranking.of(self.budget_candidates(ctx, fitted[0],
                                                     budget_cut(ctx.view, ctx.budget)),
                              dict(fitted[1]))
        else:
            scores, info = ctx.index.score_rows(fitted[0]), fitted[1]
        return by_sentence_scores(ctx.view, scores, ctx.budget, dict(info), self.threshold)

    def code_rank(self, ctx: RankingInputs, params: Params) -> Ranking:
        """`scan` codes: the best `rescore` x budget segments by their mean score on the int8
        codes are the candidates (a streamed cut when that many `streams`, else a ranking of
        every segment's score), their rows are scored again exactly, and the budget is cut
        of the candidates ranked by their exact means. Only the candidates' scores are kept,
        so the driver's memory does not grow with the corpus on the streamed path."""
        view, budget = ctx.view, ctx.budget
        scale = code_scale(ctx.index)
        scorer, info = self.scorer(ctx, ctx.need_task(self.name), params)
        on_codes = scorer.for_codes(scale)
        target = budget_target(budget, view.lengths, view.tokens)
        wide = topcut.Cut.of(budget, target * params.rescore)
        if streams(ctx, params.rescore):
            ids = self.budget_candidates(ctx, on_codes, wide, on="codes").ids
        else:
            approx = arrays.segment_mean(ctx.index.score_codes(on_codes), view.lengths)
            ids = topcut.ranked_prefix(approx, wide, wide.measure(view.lengths, view.tokens))
        ids = np.sort(np.asarray(ids, dtype=np.int64))
        rows = arrays.rows_of_segments(view.offsets, ids)
        exact = arrays.segment_mean(arrays.exact_scores(ctx.index.embeddings, scorer, rows),
                                     view.lengths[ids])
        order = arrays.rank(exact)                 # ties by ascending segment id
        chosen = cut(ids[order], budget, target, view.lengths, view.tokens)
        info = {**info, "scan": "codes", "rescored_sentences": int(len(rows))}
        note_shortfall(budget, target, view, chosen, info)
        return Ranking(chosen, exact[order[:len(chosen)]],
                       np.ones(len(chosen), dtype=np.float32), info)

    def full_ranking(self, ctx: RankingInputs, params: Params) -> Ranking:
        scores, info = self.sentence_scores(ctx, params)
        return by_sentence_scores(ctx.view, scores, None, dict(info), threshold=-np.inf)

    def top_segments(self, ctx: RankingInputs, params: Params, count: int) -> np.ndarray:
        """With a fitted row scorer, at sentence context, and at most `STREAM_SHARE` of the
        segments: a streamed cut of `count` segments (`budget_candidates`; no score per
        sentence kept), the same segments as `full_ranking`'s prefix."""
        if ctx.view.context != "sentence" or count > segments.STREAM_SHARE * len(ctx.view):
            return super().top_segments(ctx, params, count)
        fitted = self.row_scorer(ctx, params)
        parts = self.score_parts(ctx, params) if fitted is None else None
        if fitted is None and parts is None:
            return super().top_segments(ctx, params, count)
        where = topcut.Cut(float(count), "segments")
        chosen = (self.budget_candidates(ctx, fitted[0], where) if fitted is not None
                  else self.parts_candidates(ctx, parts, where))
        return chosen.ids[chosen.scores > -np.inf]      # as full_ranking drops -inf and NaN
