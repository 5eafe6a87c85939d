"""RecallConfig: every setting of `tapt bench recall` (`tapt.bench_recall`) beyond the seeds and
the results folder, its default and help in one place (the command's options are made from
them), normalised when constructed (InputError naming the setting)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tapt.errors import InputError
from tapt.retriever.ranking.document_pooling import CONTEXTS
from tapt.util.checks import path_text, shown, whole_number, whole_numbers


def _names(value: Any, param: str) -> tuple[str, ...]:
    """Names given comma-separated or as a list, in order."""
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise InputError(f"must be names, comma-separated or a list, got {shown(value)}",
                         param=param)
    return tuple(v.strip() for v in value if v.strip())


@dataclass(frozen=True)
class RecallConfig:
    """The settings of one recall benchmark (see `tapt.bench_recall`)."""

    pool: str | None = field(default=None, metadata={
        "help": "Labelled pool JSONL(.gz): text, domain, doc, pos (indexed if no --index).",
        "path": {"exists": True, "dir_okay": False}})
    index: str | None = field(default=None, metadata={
        "help": "An index of the pool (built with --no-split) to reuse.",
        "path": {"exists": True, "file_okay": False}})
    methods: Any = field(default="all", metadata={
        "help": "Comma-separated names, or all: every selection method at its defaults, the "
                "benchmark's named variants of them and the dsir baseline (an unknown name "
                "lists them all).", "show_default": True, "type": "str"})
    seed_sizes: Any = field(default="100,500,2000", metadata={
        "help": "", "show_default": True, "type": "str"})
    budgets: str = field(default="oracle,0.5x,2x", metadata={
        "help": "Multiples of the oracle's size in sentences.", "show_default": True})
    repeats: int = field(default=3, metadata={
        "help": "Seed subsets per seed size smaller than the seed file.", "show_default": True})
    segment_sizes: Any = field(default="1,15", metadata={
        "help": "Segment sizes for methods that score sentences (others rank at size 1).",
        "show_default": True, "type": "str"})
    domains: Any = field(default=None, metadata={
        "help": "Only these domains (comma-separated).", "type": "str"})
    context: Any = field(default="auto", metadata={
        "help": "How methods that score sentences are cut: by each sentence's own score, by its "
                "document's (rows named METHOD+document, see select --context), both side by "
                "side, or auto: what `tapt select` uses by default on this index (document "
                "where most sentences share a document).",
        "choices": ("auto", *CONTEXTS, "both"), "show_default": True, "type": "str",
        "was": "contexts"})
    label_field: str = field(default="domain", metadata={"help": "", "show_default": True})
    cache: str = field(default=".cache/bench", metadata={
        "help": "Seed embeddings, DSIR features and a built index are kept here (a new, empty "
                "or earlier bench cache directory).", "show_default": True,
        "path": {"file_okay": False}})

    def __post_init__(self) -> None:
        for name in ("pool", "index"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, path_text(getattr(self, name), name))
        object.__setattr__(self, "cache", path_text(self.cache, "cache"))
        object.__setattr__(self, "methods", _names(self.methods, "methods"))
        object.__setattr__(self, "seed_sizes", whole_numbers(self.seed_sizes, "seed_sizes"))
        object.__setattr__(self, "segment_sizes",
                           whole_numbers(self.segment_sizes, "segment_sizes"))
        if self.domains is not None:
            object.__setattr__(self, "domains", _names(self.domains, "domains") or None)
        object.__setattr__(self, "context",
                           _names(CONTEXTS if self.context == "both" else self.context, "context"))
        whole_number(self.repeats, "repeats", minimum=1)
        if not isinstance(self.budgets, str):
            raise InputError(f"must be budgets such as oracle,0.5x,2x, got {shown(self.budgets)}",
                             param="budgets")
        if not isinstance(self.label_field, str) or not self.label_field:
            raise InputError(f"must name a field, got {shown(self.label_field)}",
                             param="label_field")
