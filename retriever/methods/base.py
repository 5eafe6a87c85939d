"""What every selection method is made of: `Method`, its `Params`, and the `Context` it ranks in.

A method is one module of this package holding one `Method` subclass decorated with `@register`
(see `registry`); nothing else names it. The CLI's `tapt select NAME` command and its options,
`auto`'s candidates, the `prerank` choices of detector rescoring and `tapt bench recall` are all
derived from the registered objects and their properties:

    from dataclasses import dataclass

    from tapt.retriever import scoring
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
            return (lambda rows: scoring.max_similarity(rows, task).clip(min=params.floor)), {}

Saved as `retriever/methods/maxcos.py`, this is `tapt select maxcos IDX --floor 0.2 ...`,
`index.select("maxcos", ..., floor=0.2)`, a `prerank` choice and a `tapt bench recall` method
(tests/test_registry.py adds exactly this file). Override `rank` instead of `scorer` for a
method that does not score sentences; see the existing modules. A method whose scores do not
come from one scorer of the embeddings overrides `sentence_scores`, and `score_parts` too when
it can compute them run by run (Moore-Lewis, `fused`): a small budget's cut then streams, with
no score per sentence held.

Scores are "higher = more task-like" everywhere; the arithmetic lives in `scoring`, `pu`,
`ngram_lm` and `detector_registry`, which know nothing of indexes.
"""

from __future__ import annotations

import dataclasses
import logging
import numbers
import time
import types
import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable, Literal, Sequence

import numpy as np

from tapt.errors import InputError

from .. import scoring, topcut
from ..budget import Budget, budget_target, cut
from ..context import DocumentPooling

if TYPE_CHECKING:
    from tapt.indexer.index import Index

log = logging.getLogger(__name__)

Scorer = Callable[[np.ndarray], np.ndarray]


@dataclass
class ScoreParts:
    """Every corpus sentence's score as consecutive parts (`SentenceScored.score_parts`).

    Attributes:
        parts: (first row, scores) of consecutive rows from row 0, in row order, each
            computed when it is reached.
        count: How many parts there are.
        info: What the method reports (as `sentence_scores` does).
        cut: Or, instead of `parts`: a function of the segment view and a `topcut.Cut` that
            makes the cut elsewhere (a served index's actors) and returns its candidates.
    """

    parts: Iterable[tuple[int, np.ndarray]]
    count: int
    info: dict[str, Any]
    cut: Callable[[SegmentView, topcut.Cut], topcut.Candidates] | None = None


BudgetNeed = Literal["required", "optional", "none"]


@dataclass
class Ranking:
    """Selected segments in rank order with their scores and weights, plus what the method saw.

    Attributes:
        segments: Segment ids (at the context's segment size), best first.
        scores: Their scores, higher = more task-like.
        weights: Their training weights (1.0 unless the method weights segments).
        info: What the method reports (recorded in the selection manifest's `info`).
    """

    segments: np.ndarray
    scores: np.ndarray
    weights: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, chosen: topcut.Candidates, info: dict[str, Any]) -> "Ranking":
        """The ranking of a budget's cut (weights 1.0)."""
        return cls(chosen.ids, chosen.scores, np.ones(len(chosen), dtype=np.float32), info)


@dataclass
class SegmentView:
    """Segments of an index at one segment size, with their sentence and token counts, and how
    sentence scores are pooled before segments are ranked (`context`: "sentence" = not at all,
    "document" = each sentence scored by its document's shrunk mean, see `retriever.context`)."""

    offsets: np.ndarray
    lengths: np.ndarray
    tokens: np.ndarray
    context: str = "sentence"
    doc_offsets: np.ndarray | None = None

    @classmethod
    def of(cls, index: "Index", size: int | None, context: str = "sentence") -> "SegmentView":
        """The view of `index` at segment size `size` (default: the index's).

        Sentence and token counts are int32 (16 bytes a segment with the int64 offsets, not
        24: 8 GB less at 10^9 one-sentence segments); sums over them are taken in int64."""
        offsets = index.segments(size)
        lengths = np.diff(offsets).astype(np.int32)
        return cls(offsets, lengths, segment_tokens(index.tokens, offsets), context,
                   index.doc_offsets if context == "document" else None)

    def __len__(self) -> int:
        return len(self.lengths)


def segment_tokens(tokens, offsets: np.ndarray) -> np.ndarray:
    """Tokens of every segment (int32), summed shard by shard of a `RowView` of per-sentence
    counts: segments never cross shards, so no whole-corpus copy of the counts is made."""
    out = np.empty(len(offsets) - 1, dtype=np.int32)
    parts = list(tokens.parts()) if hasattr(tokens, "parts") else [(0, tokens)]
    for start, part in parts:
        lo, hi = np.searchsorted(offsets, [start, start + len(part)])
        if hi == lo:
            continue
        if int(offsets[lo]) != start or int(offsets[hi]) != start + len(part):  # across shards
            return np.add.reduceat(np.asarray(tokens, dtype=np.int64),
                                   offsets[:-1]).astype(np.int32)
        out[lo:hi] = np.add.reduceat(part, offsets[lo:hi] - start, dtype=np.int64)
    return out


# The largest budget, as a share of the corpus's sentences, whose cut streams. A streamed cut
# holds ~220 bytes per segment it keeps at the peak of a merge (measured, 400,000 kept), the
# whole-array path ~16 bytes per corpus sentence: above ~7% the whole arrays are the smaller.
STREAM_SHARE = 1 / 16


def streams(ctx: "Context", factor: float = 1.0) -> bool:
    """Whether a selection's budget cut streams (`SentenceScored.budget_candidates`): a budget
    (times `factor`: a wider cut of candidates) of at most `STREAM_SHARE` of the sentences, at
    sentence context."""
    if ctx.budget is None or ctx.view.context != "sentence":
        return False
    return small_budget(ctx.view, ctx.budget, factor)


def small_budget(view: SegmentView, budget: Budget, factor: float = 1.0) -> bool:
    """Whether `budget` (times `factor`) is at most `STREAM_SHARE` of the sentences of `view`:
    a cut kept while scores stream is then smaller than the whole arrays."""
    return factor * budget_sentences(view, budget) <= STREAM_SHARE * float(view.lengths.sum())


def budget_cut(view: SegmentView, budget: Budget) -> topcut.Cut:
    """Where `budget` cuts a ranking of the segments of `view`."""
    return topcut.Cut.of(budget, budget_target(budget, view.lengths, view.tokens))


def cut_of_parts(view: SegmentView, parts: Iterable[tuple[int, np.ndarray]], cut: topcut.Cut,
                 progress: bool = False, total: int | None = None) -> topcut.Candidates:
    """The segments of `view` that `cut` keeps of the ranking by the mean of sentence scores
    given in consecutive parts (`topcut.parts_cut`), in rank order."""
    return topcut.parts_cut(parts, view.offsets, cut.measure(view.lengths, view.tokens), cut,
                            progress=progress, total=total)


def take(view: SegmentView, order: np.ndarray, scores: np.ndarray, budget: Budget | None,
         info: dict[str, Any], ranked: bool = False) -> Ranking:
    """The prefix of a segment ranking that fills `budget` (all of it without one).

    Args:
        view: The segments.
        order: Segment ids, best first.
        scores: Every segment's score, or (`ranked`) the scores of `order`, in its order (a
            ranking of a few candidates needs no score for every segment).
        budget: The budget (None: all of `order`).
        info: What the method reports (a budget's shortfall is added).
        ranked: Whether `scores` are in `order`'s order.
    """
    if budget is None:
        chosen = order
    else:
        target = budget_target(budget, view.lengths, view.tokens)
        chosen = cut(order, budget, target, view.lengths, view.tokens)
        note_shortfall(budget, target, view, chosen, info)
    kept = scores[:len(chosen)] if ranked else scores[chosen]
    return Ranking(chosen, kept, np.ones(len(chosen), dtype=np.float32), info)


def note_shortfall(budget: Budget, target: float, view: SegmentView, chosen: np.ndarray,
                   info: dict[str, Any]) -> None:
    """Record (and warn) when a budget got less than it asks for: fewer candidate segments
    than a segment count, or candidates holding fewer sentences or tokens than asked."""
    if budget.unit in ("fraction", "segments"):
        held, unit = len(chosen), "candidate segments"
    else:
        measure = view.tokens if budget.unit == "tokens" else view.lengths
        held, unit = int(np.asarray(measure)[chosen].sum()), f"{budget.unit} in the candidates"
    if held < target:
        info["budget_shortfall"] = f"only {held} {unit} for {int(target)}"
        info.setdefault("warnings", []).append(
            f"budget {budget.spec} got only {held} {unit}: the method's candidates hold no more")
        log.warning("%s", info["warnings"][-1])


def budget_sentences(view: SegmentView, budget: Budget) -> float:
    """About how many sentences a selection at `budget` holds (segments and tokens converted
    at the corpus's mean sentences per segment and tokens per sentence)."""
    target = budget_target(budget, view.lengths, view.tokens)
    sentences = float(view.lengths.sum())
    if budget.unit == "sentences":
        return target
    if budget.unit == "tokens":
        return target * sentences / max(float(view.tokens.sum()), 1.0)
    return target * sentences / max(len(view), 1)


def budget_order(view: SegmentView, seg_scores: np.ndarray, budget: Budget) -> np.ndarray:
    """The segments `budget` cuts of the ranking of `seg_scores`, in rank order
    (`topcut.ranked_prefix`, from a guess of the segments the budget holds): the same segments
    as a sort of every score."""
    where = topcut.Cut.of(budget, budget_target(budget, view.lengths, view.tokens))
    guess = int(np.ceil(budget_sentences(view, budget) * len(view)
                        / max(float(view.lengths.sum()), 1.0) * 1.25)) + 16
    return topcut.ranked_prefix(seg_scores, where, where.measure(view.lengths, view.tokens),
                                guess)


def by_sentence_scores(view: SegmentView, sentence_scores: np.ndarray, budget: Budget | None,
                       info: dict[str, Any], threshold: float | None = None) -> Ranking:
    """Segments ranked by the mean score of their sentences; without a budget, those whose mean
    is above `threshold` (a method without a threshold needs a budget)."""
    if view.context == "document":
        pooled = DocumentPooling(sentence_scores, view.doc_offsets)
        info["context"] = {"name": "document", **pooled.pooling.to_json()}
        if budget is not None and small_budget(view, budget):
            # the pooled scores stream into the cut: nothing more per sentence is held
            return Ranking.of(cut_of_parts(view, pooled.parts(), budget_cut(view, budget)), info)
        sentence_scores = pooled.all()
    seg_scores = scoring.segment_mean(sentence_scores, view.lengths)
    if budget is not None:
        return take(view, budget_order(view, seg_scores, budget), seg_scores, budget, info)
    if threshold is None:
        raise InputError("this method needs a budget", param="budget")
    # only the segments above the threshold are ranked (ascending ids, so ties keep the order
    # of a ranking of every segment)
    above = np.flatnonzero(seg_scores > threshold)
    return take(view, above[scoring.rank(seg_scores[above])], seg_scores, None, info)


# ----------------------------------------------------------------------------- parameters


def param(default: Any, help: str, *, choices: Sequence[str] | Callable[[], Sequence[str]] | None
          = None, minimum: float | None = None, maximum: float | None = None,
          short: str | None = None, requires: tuple[str, Any] | None = None) -> Any:
    """A method parameter: a dataclass field whose metadata drives validation and the CLI option.

    Args:
        default: The default value (its field's type annotation gives the type).
        help: One sentence for `--help` and the API docs; name other parameters in backticks.
        choices: The allowed values (or a function returning them, for lists known only once
            every method is registered). A `Literal[...]` annotation gives them too.
        minimum: The smallest allowed number.
        maximum: The largest allowed number.
        short: A one-letter CLI alias such as "-k".
        requires: (other parameter, value): the parameter only applies when the other one has
            that value; giving it explicitly otherwise is an error.

    Returns:
        A `dataclasses.field`.
    """
    return field(default=default, metadata={"help": help, "choices": choices, "minimum": minimum,
                                            "maximum": maximum, "short": short,
                                            "requires": requires})


@dataclass(frozen=True)
class Params:
    """Base of every method's parameters. Subclasses are frozen dataclasses of `param` fields;
    creating one checks every value (type, choices, minimum) and then `validate`.

    Raises:
        InputError: naming the parameter (`param=`) whose value cannot work.
    """

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            value = _checked(f.name, getattr(self, f.name), hints[f.name])
            object.__setattr__(self, f.name, value)
            choices = param_choices(f, hints[f.name])
            if choices is not None and value is not None and value not in choices:
                raise InputError(f"{value!r} is not one of {', '.join(map(str, choices))}",
                                 param=f.name)
            minimum = f.metadata.get("minimum")
            if minimum is not None and value is not None and value < minimum:
                raise InputError(f"must be at least {minimum:g}, got {value!r}", param=f.name)
            maximum = f.metadata.get("maximum")
            if maximum is not None and value is not None and value > maximum:
                raise InputError(f"must be at most {maximum:g}, got {value!r}", param=f.name)
        self.validate()

    def validate(self) -> None:
        """Checks that involve several fields or parsing (override; raise InputError)."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def param_choices(f: dataclasses.Field, hint: Any) -> tuple[Any, ...] | None:
    """The allowed values of a parameter field, if it has a fixed set."""
    choices = f.metadata.get("choices")
    if callable(choices):
        choices = choices()
    if choices is not None:
        return tuple(choices)
    if typing.get_origin(hint) is Literal:
        return typing.get_args(hint)
    return None


def param_type(hint: Any) -> tuple[type, bool]:
    """(int, float, str or bool; whether None is allowed) of a field's annotation."""
    optional = False
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        optional = len(args) < len(typing.get_args(hint))
        hint = args[0]
    if typing.get_origin(hint) is Literal:
        return type(typing.get_args(hint)[0]), optional
    return hint, optional


def _checked(name: str, value: Any, hint: Any) -> Any:
    kind, optional = param_type(hint)
    if value is None:
        if optional:
            return None
        raise InputError("needs a value", param=name)
    if kind is bool:
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
    elif kind is int:
        if isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)):
            return int(value)
    elif kind is float:
        if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
            value = float(value)
            if np.isfinite(value):
                return value
            raise InputError(f"must be a finite number, got {value!r}", param=name)
    elif kind is str:
        if isinstance(value, str):
            return value
    else:
        return value
    raise InputError(f"must be {'an integer' if kind is int else 'a ' + kind.__name__}, got "
                     f"{value!r}", param=name)


@dataclass(frozen=True)
class NoParams(Params):
    """A method without parameters of its own."""


@dataclass(frozen=True)
class ScanParams(Params):
    """Parameters of a `SentenceScored` method whose scorer can run on an index's int8 codes
    (its `scorer` returns an object with `for_codes`, such as `scoring.Linear`)."""

    scan: Literal["exact", "codes"] = param(
        "exact", "exact: score every stored embedding; codes: score every row on the index's "
                 "int8 codes (an index built or reindexed with `codes` int8; a method that "
                 "fits a classifier fits on them too), then rescore the best `rescore` x "
                 "budget exactly.")
    rescore: float = param(4.0, "With `scan` codes: how many times the budget is rescored from "
                                "the stored embeddings (the best segments by their code "
                                "scores, or sentences where a fit ranks every row).",
                           minimum=1.0, maximum=1e6, requires=("scan", "codes"))


def scans_codes(params: Params) -> bool:
    """Whether a method's parameters ask it to scan the int8 codes (`ScanParams`)."""
    return getattr(params, "scan", "exact") == "codes"


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


def rescored_rows(ctx: "Context", params: Params) -> int:
    """How many rows a `scan` codes selection rescores exactly: `rescore` x the budget's
    sentences. Checked before any fitting.

    Raises:
        InputError: the index has no codes, or the selection has no budget.
    """
    code_scale(ctx.index)
    if ctx.budget is None:
        raise InputError("scanning codes needs a budget", param="budget")
    return int(np.ceil(params.rescore * budget_sentences(ctx.view, ctx.budget)))


def scan_rows(ctx: "Context", params: Params) -> Callable[[Scorer], np.ndarray]:
    """How a method's full scans score every corpus row: exactly (`Index.score_rows`), or with
    `scan` codes on the int8 codes (`Index.score_codes` of the scorer's `for_codes`). A served
    index runs either in its actors."""
    if not scans_codes(params):
        return ctx.index.score_rows
    scale = code_scale(ctx.index)
    return lambda scorer: ctx.index.score_codes(scorer.for_codes(scale))


# ----------------------------------------------------------------------------- context


class Memo:
    """Intermediate scores several methods of one task share (Moore-Lewis scores, fused scores
    per budget), each computed once. `reused_seconds` adds up what the values taken from here
    cost when they were computed, so a method's time can be reported as if it ran alone."""

    def __init__(self) -> None:
        self._values: dict[Any, tuple[Any, float]] = {}
        self.reused_seconds = 0.0

    def __contains__(self, key: Any) -> bool:
        return key in self._values

    def get(self, key: Any, compute: Callable[[], Any]) -> Any:
        if key in self._values:
            value, seconds = self._values[key]
            self.reused_seconds += seconds
            return value
        t0, before = time.perf_counter(), self.reused_seconds
        value = compute()
        cost = time.perf_counter() - t0 + (self.reused_seconds - before)
        self._values[key] = (value, cost)
        return value


class CorpusCache:
    """Per-index data that selections reuse: segment views, the stored texts (for benchmarks
    that need them), and the vocabulary state of Moore-Lewis.

    Moore-Lewis's vocabulary is the corpus's words plus the task's, so a selection never depends
    on the ones before it. `share_vocabulary=True` lets the vocabulary grow across tasks instead
    (the words of earlier tasks count too): the published `tapt bench recall` numbers were made
    that way, and the benchmark keeps it.
    """

    def __init__(self, index: "Index", share_vocabulary: bool = False) -> None:
        self.index = index
        self.share_vocabulary = share_vocabulary
        self._views: dict[tuple[int | None, str], SegmentView] = {}
        self._texts: list[str] | None = None
        self.extra_words = np.empty(0, dtype=np.uint64)  # earlier tasks' words outside the corpus

    def view(self, size: int | None, context: str = "sentence") -> SegmentView:
        if (size, context) not in self._views:
            self._views[size, context] = SegmentView.of(self.index, size, context)
        return self._views[size, context]

    def texts(self) -> list[str]:
        if self._texts is None:
            self._texts = self.index.store.texts(range(self.index.n_sentences))
        return self._texts


@dataclass
class Context:
    """Everything a method ranks with.

    Attributes:
        index: The open index.
        view: Its segments at the selection's segment size.
        budget: The parsed budget, or None.
        seed: Seed of every random choice of the selection.
        task: The task's L2-normalised embeddings (None when the method needs none).
        texts: The task's sentences (None when the task was given as embeddings).
        corpus: Per-index caches shared between selections.
        memo: Per-task intermediate scores shared between the methods of one task.
        encoder: The index's model, when the task was embedded here (None when the task came
            as embeddings); for methods that embed or fine-tune.
        progress: Whether long steps may show progress bars.
    """

    index: "Index"
    view: SegmentView
    budget: Budget | None
    seed: int = 0
    task: np.ndarray | None = None
    texts: list[str] | None = None
    corpus: CorpusCache | None = None
    memo: Memo = field(default_factory=Memo)
    encoder: Any = None
    progress: bool = False

    def __post_init__(self) -> None:
        if self.corpus is None:
            self.corpus = CorpusCache(self.index)

    def need_task(self, method: str) -> np.ndarray:
        if self.task is None or len(self.task) == 0:
            raise InputError(f"{method} needs task sentences", param="task")
        return self.task

    def need_texts(self, method: str) -> list[str]:
        if not self.texts:
            raise InputError(f"{method} needs the task's text (give the task as files or as a "
                             "list of strings, not as embeddings)", param="task")
        return self.texts

    @property
    def n_positive(self) -> int | None:
        """The budget in sentences, when it is given in sentences (what self-training aims at)."""
        if self.budget is not None and self.budget.unit == "sentences":
            return int(self.budget.value)
        return None


# ----------------------------------------------------------------------------- methods


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
                    explicit: Iterable[str] | None = None) -> Params:
        """Validated parameters from keyword values.

        Args:
            values: Parameter values by name (missing ones take their defaults).
            explicit: The names the user gave (default: every key of `values`); a parameter
                that only applies with another's value is refused when given explicitly with
                a value other than its default (its default, as `describe_methods` lists it,
                is accepted wherever it does not apply).

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
                raise InputError(f"{self.name} has no parameter `{name}` ({takes})", param=name)
        params = self.Params(**values)
        given = set(values) if explicit is None else set(explicit)
        for f in dataclasses.fields(params):
            requires = f.metadata.get("requires")
            if (requires and f.name in given and getattr(params, requires[0]) != requires[1]
                    and getattr(params, f.name) != f.default):
                raise InputError(f"only applies with `{requires[0]}` {requires[1]}",
                                 param=f.name)
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
        can pool (see `retriever.context`)."""
        return False

    @property
    def scores_sentences(self) -> bool:
        """Whether the method implements `sentence_scores`."""
        return type(self).sentence_scores is not Method.sentence_scores

    def min_task(self, params: Params) -> int:
        """Fewest task sentences this method can work with, with these parameters."""
        return self.min_task_sentences

    def rank(self, ctx: Context, params: Params) -> Ranking:
        """Select: what `tapt select NAME` and `Index.select(NAME, ...)` run.

        Args:
            ctx: The index, the task and the budget.
            params: This method's validated parameters.

        Returns:
            The selected segments in rank order (cut at `ctx.budget` when there is one).
        """
        raise NotImplementedError

    def full_ranking(self, ctx: Context, params: Params) -> Ranking:
        """Every segment the method can rank, in order, uncut (for `can_prerank` methods).

        Args:
            ctx: The index and the task (its budget is ignored).
            params: This method's validated parameters.

        Returns:
            The whole ranking.
        """
        raise InputError(f"{self.name} cannot pre-rank candidates", param="prerank")

    def top_segments(self, ctx: Context, params: Params, count: int) -> np.ndarray:
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

    def sentence_scores(self, ctx: Context, params: Params
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

    def depends_on_budget(self, params: Params) -> bool:
        """Whether `sentence_scores` change with the budget (then they are computed per budget)."""
        return True

    def scorer(self, ctx: Context, task: np.ndarray, params: Params, heldout: bool = False
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

    def sentence_scores(self, ctx: Context, params: Params) -> tuple[np.ndarray, dict[str, Any]]:
        """Every row's score by the fitted `scorer`; with `scan` codes (`ScanParams`), every
        row's score on its int8 codes, the best `rescore` x budget sentences rescored exactly
        from the stored embeddings (the selection's segments mix both)."""
        if not scans_codes(params):
            scorer, info = self.scorer(ctx, ctx.need_task(self.name), params)
            return ctx.index.score_rows(scorer), info
        wanted = rescored_rows(ctx, params)
        scorer, approx, info = self.fitted_scores(ctx, params)
        scores, rescored = scoring.rescore_best(ctx.index.embeddings, scorer, approx, wanted)
        return scores, {**info, "scan": "codes", "rescored_sentences": int(len(rescored))}

    def fitted_scores(self, ctx: Context, params: Params
                      ) -> tuple[Scorer, np.ndarray, dict[str, Any]]:
        """The fitted scorer, its scores of every corpus row (`scan_rows`: on the codes with
        `scan` codes) and what the fit saw. A method whose fit ends with those scores (the
        classifier's last round) overrides this to return them instead of scanning again."""
        scorer, info = self.scorer(ctx, ctx.need_task(self.name), params)
        return scorer, scan_rows(ctx, params)(scorer), info

    def row_scorer(self, ctx: Context, params: Params) -> tuple[Scorer, dict[str, Any]] | None:
        """The fitted scorer whose scores of `ctx.index.embeddings` are `sentence_scores`, or
        None where they come another way (a method that overrides `sentence_scores` overrides
        this too; `scan` codes). With one, a budget's cut streams (`budget_candidates`)."""
        if type(self).sentence_scores is not SentenceScored.sentence_scores or scans_codes(params):
            return None
        return self.scorer(ctx, ctx.need_task(self.name), params)

    def budget_candidates(self, ctx: Context, scorer: Scorer, cut: topcut.Cut,
                          on: str = "rows") -> topcut.Candidates:
        """The segments `cut` keeps of the ranking by `scorer`'s mean sentence scores, in rank
        order: every row (`on` codes: every row's int8 codes) scored block by block on the
        global grid, only the running cut kept (`topcut.scan_cut`); the segments and scores of
        the whole-array path, bit for bit. An index with a `top_cut` (a served index) makes
        the cut itself, as its `score_rows` scores rows."""
        view = ctx.view
        top_cut = getattr(ctx.index, "top_cut", None)
        if top_cut is not None:          # a served index: its actors cut their own rows
            return top_cut(scorer, view, cut, on)
        measure = cut.measure(view.lengths, view.tokens)
        rows = ctx.index.codes if on == "codes" else ctx.index.embeddings
        kept, pieces = topcut.scan_cut(rows, scorer, view.offsets, 0, measure, cut,
                                       progress=ctx.progress)
        return topcut.merge(kept, topcut.join_pieces(pieces, view.offsets, measure), cut)

    def score_parts(self, ctx: Context, params: Params) -> ScoreParts | None:
        """`sentence_scores` as consecutive parts computed one at a time, for a method whose
        scores do not come from a row scorer of the embeddings; None (the default) where they
        come only whole. With parts, a budget's cut streams (`topcut.parts_cut`): no score per
        sentence is kept beyond what the method itself holds."""
        return None

    def parts_candidates(self, ctx: Context, parts: ScoreParts, cut: topcut.Cut
                         ) -> topcut.Candidates:
        """The segments `cut` keeps of the ranking by the mean of the scores in `parts`, in
        rank order (those of `by_sentence_scores`, bit for bit)."""
        if parts.cut is not None:
            return parts.cut(ctx.view, cut)
        return cut_of_parts(ctx.view, parts.parts, cut, ctx.progress, parts.count)

    def depends_on_budget(self, params: Params) -> bool:
        return scans_codes(params)         # how many rows are rescored

    def rank(self, ctx: Context, params: Params) -> Ranking:
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

    def code_rank(self, ctx: Context, params: Params) -> Ranking:
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
            approx = scoring.segment_mean(ctx.index.score_codes(on_codes), view.lengths)
            ids = topcut.ranked_prefix(approx, wide, wide.measure(view.lengths, view.tokens))
        ids = np.sort(np.asarray(ids, dtype=np.int64))
        rows = scoring.rows_of_segments(view.offsets, ids)
        exact = scoring.segment_mean(scoring.exact_scores(ctx.index.embeddings, scorer, rows),
                                     view.lengths[ids])
        order = scoring.rank(exact)                 # ties by ascending segment id
        chosen = cut(ids[order], budget, target, view.lengths, view.tokens)
        info = {**info, "scan": "codes", "rescored_sentences": int(len(rows))}
        note_shortfall(budget, target, view, chosen, info)
        return Ranking(chosen, exact[order[:len(chosen)]],
                       np.ones(len(chosen), dtype=np.float32), info)

    def full_ranking(self, ctx: Context, params: Params) -> Ranking:
        scores, info = self.sentence_scores(ctx, params)
        return by_sentence_scores(ctx.view, scores, None, dict(info), threshold=-np.inf)

    def top_segments(self, ctx: Context, params: Params, count: int) -> np.ndarray:
        """With a fitted row scorer, at sentence context, and at most `STREAM_SHARE` of the
        segments: a streamed cut of `count` segments (`budget_candidates`; no score per
        sentence kept), the same segments as `full_ranking`'s prefix."""
        if ctx.view.context != "sentence" or count > STREAM_SHARE * len(ctx.view):
            return super().top_segments(ctx, params, count)
        fitted = self.row_scorer(ctx, params)
        parts = self.score_parts(ctx, params) if fitted is None else None
        if fitted is None and parts is None:
            return super().top_segments(ctx, params, count)
        where = topcut.Cut(float(count), "segments")
        chosen = (self.budget_candidates(ctx, fitted[0], where) if fitted is not None
                  else self.parts_candidates(ctx, parts, where))
        return chosen.ids[chosen.scores > -np.inf]      # as full_ranking drops -inf and NaN
