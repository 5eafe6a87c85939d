"""Selecting: a registered method ranks segments for a task; the chosen ones are read back with
their text and corpus metadata into a `Selection`.

    config = SelectConfig("fused", "500sent", rounds=1)       # validated against the registry
    selection = make_selection(index, config, task)           # embeds the task, ranks, reads
    ranking, view = rank(index, config, embeddings, texts)    # ranking only, no I/O
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Iterable

import numpy as np

from tapt.errors import InputError
from tapt.indexer.encoding.encoder import Encoder, LazyEncoder
from tapt.indexer.index import Index
from tapt.retriever.methods import (
    CorpusCache,
    Memo,
    Method,
    Params,
    Ranking,
    RankingInputs,
    SegmentView,
    get_method,
    methods,
)
from tapt.retriever.ranking.budget import parse_budget
from tapt.retriever.ranking.document_pooling import CONTEXT_CHOICES, ContextChoice, choose_context
from tapt.retriever.selections.file_format import SelectedSegment
from tapt.retriever.selections.selection import Selection
from tapt.retriever.selections.settings import SelectSettings
from tapt.retriever.tasks.embedding import embed_task
from tapt.retriever.tasks.forms import TaskInput
from tapt.util.checks import whole_number
from tapt.util.progress import showing_steps
from tapt.util.versions import library_versions, utc_now

log = logging.getLogger(__name__)


# The keywords of `tapt.Index.select` besides the method's own parameters: a misspelt one
# (`budjet=`) is named with the closest of these or of the method's parameters.
SELECT_KEYWORDS = ("task", "explicit", *(f.name for f in dataclasses.fields(SelectSettings)))


class SelectConfig:
    """One selection's method, budget, segment size, seed and method parameters, validated.

    Args:
        method: A registered method's name.
        budget: "0.2" (a fraction of segments), "5000" (segments), "20000sent", "2Mtok".
        segment_size: Re-cut segments at this many sentences (default: the index's).
        seed: Seed of every random choice.
        context: "auto" (the default: "document" where the index's documents mostly hold more
            than one sentence and the method pools sentence scores, "sentence" otherwise;
            decided per index by `document_pooling.choose_context`), "sentence" (each
            sentence's own score) or "document" (each sentence scored by its document's shrunk
            mean score, `retriever.ranking.document_pooling`; methods that score every
            sentence, `auto`, and `iforest` on such a pre-ranking).
        explicit: The parameters the user gave (default: every keyword in `params`).
        **params: The method's parameters (see `tapt.retriever.methods`).

    Raises:
        InputError: unknown method or parameter, a value that cannot work, a budget missing
            for a method that needs one (or given to one that takes none).
    """

    def __init__(self, method: str, budget: str | None = None, *, segment_size: int | None = None,
                 seed: int = 0, context: str = "auto", explicit: Iterable[str] | None = None,
                 **params: Any) -> None:
        self.spec: Method = get_method(method)
        self.method: str = self.spec.name
        # unknown names first: a misspelt `budjet=` is named, not taken for a missing budget
        self.params: Params = self.spec.make_params(params, explicit, also=SELECT_KEYWORDS)
        if budget is not None and not isinstance(budget, str):
            budget = str(budget)
        if budget is None and self.spec.budget == "required":
            raise InputError(f"{self.method} needs a budget", param="budget")
        if budget is not None and self.spec.budget == "none":
            raise InputError(f"{self.method} takes no budget", param="budget")
        self.budget = budget
        self.parsed_budget = parse_budget(budget) if budget is not None else None
        if segment_size is not None:
            segment_size = whole_number(segment_size, "segment_size", maximum=2**31 - 1)
        if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
            raise InputError(f"must be an integer, got {seed!r}", param="seed")
        if not 0 <= int(seed) < 2**32:      # what every seeded library here accepts
            raise InputError(f"must be in 0..{2**32 - 1}, got {seed}", param="seed")
        self.segment_size = segment_size
        self.seed = int(seed)
        if context not in CONTEXT_CHOICES:
            raise InputError(f"{context!r}: use one of {', '.join(CONTEXT_CHOICES)}",
                             param="context")
        if context == "document" and not self.spec.pools_documents(self.params):
            raise InputError(f"{self.method} does not rank by sentence scores, so there is "
                             "nothing to pool over documents", param="context")
        self.context = context

    def resolve_context(self, index: Index, corpus: CorpusCache | None = None) -> ContextChoice:
        """The context this selection uses on `index` ("auto" decided from the index's
        document offsets, counted once per `corpus` cache), with the reason."""
        pools = self.spec.pools_documents(self.params)
        shape = None
        if self.context == "auto" and pools:
            shape = (corpus or CorpusCache(index)).document_shape()
        return choose_context(self.context, pools, shape, self.method)

    @property
    def uses_embeddings(self) -> bool:
        return self.spec.uses_embeddings(self.params)

    @property
    def uses_text(self) -> bool:
        return self.spec.uses_text(self.params)

    @property
    def needs_task(self) -> bool:
        return self.uses_embeddings or self.uses_text

    def to_manifest(self) -> dict[str, Any]:
        return {"budget": self.budget, "segment_size": self.segment_size, "seed": self.seed,
                **({"context": self.context} if self.context != "auto" else {}),
                **self.params.to_dict()}

    def __repr__(self) -> str:
        return f"SelectConfig({self.method!r}, {self.budget!r}, {self.to_manifest()})"


def rank(index: Index, config: SelectConfig, task_embeddings: np.ndarray | None,
         task_texts: list[str] | None = None, *, corpus: CorpusCache | None = None,
         memo: Memo | None = None, encoder: Encoder | None = None,
         progress: bool = False) -> tuple[Ranking, SegmentView]:
    """Run the configured method on a task already embedded (no I/O beyond the index).

    Args:
        index: The open index.
        config: Method, budget, segment size, seed, parameters.
        task_embeddings: The task's embeddings (None for methods that need none).
        task_texts: The task's sentences, for methods that read text.
        corpus: Per-index caches to reuse between selections.
        memo: Per-task intermediate scores to share between methods.
        encoder: The index's model, for methods that use it beyond the task's embeddings.
        progress: Whether long steps may show progress bars.

    Returns:
        The ranking and the segment view it indexes (its `context` is the one used).
    """
    ctx = ranking_inputs(index, config, task_embeddings, task_texts, corpus=corpus, memo=memo,
                         encoder=encoder, progress=progress)
    return config.spec.rank(ctx, config.params), ctx.view


def ranking_inputs(index: Index, config: SelectConfig, task_embeddings: np.ndarray | None,
                   task_texts: list[str] | None = None, *, corpus: CorpusCache | None = None,
                   memo: Memo | None = None, encoder: Encoder | None = None,
                   progress: bool = False) -> RankingInputs:
    """What `rank` hands the method (the arguments as for `rank`), checked."""
    corpus = corpus or CorpusCache(index)
    view = corpus.view(config.segment_size, config.resolve_context(index, corpus).name)
    if config.uses_text and not task_texts:
        raise InputError(f"{config.method} needs the task's text (give the task as files or "
                         "strings, not as embeddings)", param="task")
    if config.uses_embeddings and (task_embeddings is None or len(task_embeddings) == 0):
        raise InputError(f"{config.method} needs task sentences", param="task")
    return RankingInputs(index, view, config.parsed_budget, config.seed,
                         task_embeddings if config.uses_embeddings else None,
                         list(task_texts) if task_texts else None, corpus, memo or Memo(),
                         encoder, progress)


def _check_task_size(config: SelectConfig, n: int, warn: bool = True) -> list[str]:
    minimum = config.spec.min_task(config.params)
    if n < minimum:
        any_size = [m.name for m in methods() if m.name != "random"
                    and m.min_task(m.make_params()) <= max(n, 1)]
        raise InputError(f"{config.method} needs at least {minimum} task sentences, the task has "
                         f"{n}; {', '.join(any_size)} work with {n}", param="task")
    if warn and n < config.spec.warn_task_sentences:
        warning = (f"{config.method} is fitted on only {n} task sentence(s) (fewer than "
                   f"{config.spec.warn_task_sentences}): its scores are unreliable")
        log.warning("%s", warning)
        return [warning]
    return []


def make_selection(index: Index, config: SelectConfig, task: TaskInput | None = None, *,
                   encoder: Encoder | LazyEncoder | None = None, batch_size: int = 64,
                   progress: bool = False, corpus: CorpusCache | None = None,
                   explain: bool = False) -> Selection:
    """Embed the task (cached), rank segments, read their text and metadata.

    Args:
        index: The open index.
        config: What to select.
        task: The task (None for methods that need none, such as random).
        encoder: The index's model; or a `LazyEncoder` (`Index.lazy_encoder`), loaded only
            when the task is not cached; None: the index's own model, loaded the same way.
        batch_size: Sentences per encoder batch.
        progress: Show progress bars: while the task is embedded, and the steps of the
            method's scoring (its fits and passes over the rows).
        corpus: Per-index caches to reuse between selections.
        explain: Keep why each segment was picked (`selections.explain`) in its line and a
            sample of the corpus's scores in the manifest.

    Returns:
        The selection, with its manifest (not written anywhere).

    Raises:
        InputError: a task missing, too small, unreadable for the model, or of the wrong kind.
    """
    timings: dict[str, Any] = {}
    start = time.perf_counter()
    warnings: list[str] = []
    embeddings, texts = None, None
    if config.needs_task:
        if task is None:
            raise InputError(f"{config.method} needs a task", param="task")
        _check_task_size(config, len(task), warn=False)  # refuse before loading a model
        texts = task.sentences
        if config.uses_embeddings and task.embeddings is not None:
            embeddings = task.embeddings
        elif config.uses_embeddings:
            if not isinstance(encoder, LazyEncoder):
                encoder = index.lazy_encoder(encoder=encoder)
            t0 = time.perf_counter()
            embedded = embed_task(encoder, texts, batch_size=batch_size, progress=progress)
            texts, embeddings = embedded.sentences, embedded.embeddings
            warnings += embedded.warnings
            timings["embed_task_seconds"] = round(time.perf_counter() - t0, 3)
            timings["task_embeddings_cached"] = embedded.cached
        warnings += _check_task_size(config, len(texts) if texts is not None else len(task))
    t0 = time.perf_counter()
    if isinstance(encoder, LazyEncoder):
        encoder = encoder.loaded
    corpus = corpus or CorpusCache(index)
    context = config.resolve_context(index, corpus)
    memo = Memo()
    with showing_steps(f"score {config.method}", progress):   # fits and passes over the rows
        ranking, view = rank(index, config, embeddings, texts, corpus=corpus, memo=memo,
                             encoder=encoder, progress=progress)
    timings["score_seconds"] = round(time.perf_counter() - t0, 3)
    warnings += ranking.info.pop("warnings", [])
    t0 = time.perf_counter()
    segments = materialise(index, view, ranking, config.method)
    timings["read_text_seconds"] = round(time.perf_counter() - t0, 3)
    explained = None
    if explain:
        from tapt.retriever.selections.explain import explain_segments

        t0 = time.perf_counter()
        ctx = ranking_inputs(index, config, embeddings, texts, corpus=corpus, memo=memo,
                             encoder=encoder, progress=progress)
        segments, explained = explain_segments(ctx, config.spec, config.params, segments,
                                               texts)
        timings["explain_seconds"] = round(time.perf_counter() - t0, 3)
    if not segments:
        warning = (f"{config.method} selected nothing: no segment of the index passed its "
                   "cut; give a budget to take the best segments whatever their scores")
        log.warning("%s", warning)
        warnings.append(warning)
    manifest = {
        "method": config.method,
        "params": config.to_manifest(),
        "budget": config.parsed_budget.to_json() if config.parsed_budget else None,
        "segment_size": int(config.segment_size or index.segment_size),
        "seed": config.seed,
        "context": context.to_json(),
        "task": None if not config.needs_task else {**task.to_manifest(),
                                                    "sentences": len(texts or task)},
        "index": index.identity(),
        "counts": {"segments": len(segments),
                   "sentences": int(view.lengths[ranking.segments].sum()),
                   "tokens": int(view.tokens[ranking.segments].sum()),
                   "corpus_segments": len(view), "corpus_sentences": index.n_sentences},
        "info": ranking.info,
        **({"explain": explained} if explained is not None else {}),
        "warnings": warnings,
        "created": utc_now(),
        "versions": library_versions(),
    }
    timings["total_seconds"] = round(time.perf_counter() - start, 3)
    manifest["timings"] = timings
    return Selection(segments, manifest)


def materialise(index: Index, view: SegmentView, ranking: Ranking,
                method: str) -> list[SelectedSegment]:
    """The ranked segments with their text, document key, source and metadata."""
    # the documents of the chosen segments only (not one per corpus segment)
    docs = index.docs_of_rows(view.offsets[ranking.segments]).tolist()
    out = []
    for rank_, seg in enumerate(ranking.segments.tolist()):
        lo, hi = int(view.offsets[seg]), int(view.offsets[seg + 1])
        records = index.store.records(range(lo, hi))
        sentences = [r["text"] for r in records]
        meta, sentence_meta = split_meta([r.get("meta") or {} for r in records])
        out.append(SelectedSegment(
            id=seg, rank=rank_, score=float(ranking.scores[rank_]),
            weight=float(ranking.weights[rank_]), method=method, doc=int(docs[rank_]),
            rows=(lo, hi),
            text=" ".join(sentences), sentences=sentences, doc_key=records[0].get("doc_key"),
            source=records[0].get("source"), meta=meta, sentence_meta=sentence_meta,
        ))
    return out


def split_meta(metas: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
    """(the fields every sentence shares with equal values, each sentence's other fields or
    None when there are none)."""
    if not metas:
        return {}, None
    first = metas[0]
    shared = {k: v for k, v in first.items() if all(k in m and m[k] == v for m in metas[1:])}
    rest = [{k: v for k, v in m.items() if k not in shared} for m in metas]
    return shared, (rest if any(rest) else None)
