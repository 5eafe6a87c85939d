"""SelectSettings: the settings of one selection besides its method's own parameters, one name
each: the field is the keyword of `tapt.Index.select` and the option of `tapt select METHOD`
(`-` for `_`), with its default here only. Each field that is an option carries its
command-line description in its metadata, which `tapt.api.options.config_fields` hands to the
command line."""

from __future__ import annotations

from dataclasses import dataclass, field

from tapt.retriever.ranking.document_pooling import CONTEXT_CHOICES

BUDGET_HELP = "0.2 = 20% of segments; 5000 = segments; 20000sent = sentences; 2Mtok = tokens."


@dataclass(frozen=True)
class SelectSettings:
    """The settings of `Index.select` (and `tapt select METHOD`) beyond the method's own
    parameters; each is validated where it is used.

    Attributes:
        budget: "0.2" (a fraction of segments), "5000" (segments), "20000sent", "2Mtok"; None
            where the method allows it (knn: the whole union). A number with a decimal point is
            a fraction (1.0: every segment), an int a count.
        segment_size: Re-cut segments at this many sentences (default: the index's).
        seed: Seed of every random choice.
        context: "auto" is "document" where at least half of the index's sentences sit in
            documents of two or more sentences and the method ranks by sentence scores,
            "sentence" otherwise (knn, random); the selection's manifest (`context`) says which
            was used and why. "sentence" ranks by each sentence's own score; "document" by its
            document's shrunk mean score (usually more precise where corpus documents are
            about one thing each: web pages, articles, books; see the selecting guide for
            where it can hurt).
        text_field: The field with the text in JSONL task files.
        model: The index's model directory, if it moved.
        device: auto, cpu or cuda (for embedding the task).
        backend: auto (the index's), torch, onnx or onnx-int8.
        batch_size: Task sentences per encoder batch.
        progress: Show a progress bar while the task is embedded (the index's model is loaded
            on the first task that is not in the task cache, and kept for later calls).
        out: Also write the selection file there (`Selection.write`); the path is checked
            before any slow work.
        overwrite: Replace a selection tapt wrote at `out` that was edited since.
        explain: Keep why each segment was picked in its line (`explain`: each scorer's part of
            its score, its sentences' own score beside its document's pooled one, its nearest
            task sentences) and a seeded sample of the corpus's segment scores in the manifest
            (`explain.sample`, against the budget's `cut`), for `tapt show` and `tapt plot
            scores`. Costs a rescoring of the chosen rows.
    """

    budget: str | float | None = field(default=None, metadata={"help": BUDGET_HELP})
    segment_size: int | None = field(default=None, metadata={
        "help": "Re-cut segments at this size [default: the index's].", "minimum": 1})
    seed: int = field(default=0, metadata={
        "help": "Seed of every random choice (the same seed gives the same selection).",
        "minimum": 0, "maximum": 2**32 - 1, "show_default": True})
    context: str = field(default="auto", metadata={
        "help": "document: score each sentence by its whole document's (shrunk) mean score, "
                "so documents are kept or dropped together; usually more precise when corpus "
                "documents are about one thing each (web pages, articles, books), less where "
                "they mix topics. sentence: each sentence's own score. auto: document where "
                "at least half of the index's sentences are in documents of two or more "
                "sentences, else sentence (the manifest's `context` says which and why).",
        "choices": CONTEXT_CHOICES, "show_default": True})
    text_field: str = field(default="text", metadata={
        "help": "Field/column with the task's text (JSONL, Parquet, CSV/TSV, ...).",
        "show_default": True})
    model: str | None = field(default=None, metadata={
        "help": "Model directory if the index's recorded one cannot be found."})
    device: str = field(default="auto", metadata={
        "help": "Device that embeds the task.", "choices": ("auto", "cpu", "cuda"),
        "show_default": True})
    backend: str = field(default="auto", metadata={
        "help": "Backend that embeds the task [auto: the one the index was built with, where "
                "the device allows].", "choices": ("auto", "torch", "onnx", "onnx-int8"),
        "show_default": True})
    batch_size: int = field(default=64, metadata={
        "help": "Task sentences per encoder batch.", "minimum": 1, "show_default": True})
    progress: bool = False
    out: str | None = field(default=None, metadata={
        "help": "Selection JSONL to write (its manifest goes beside it); - writes the JSONL "
                "lines to stdout (no manifest then; the summary goes to stderr).",
        "short": "-o", "required": True, "path": {"dir_okay": False, "allow_dash": True}})
    overwrite: bool = field(default=False, metadata={
        "help": "Replace a selection tapt wrote at --out that was edited since (an unchanged "
                "one is always replaced; a file tapt did not write, or an input, never is)."})
    explain: bool = field(default=False, metadata={
        "help": "Keep why each segment was picked in its line (each scorer's part of its "
                "score, its own score beside its document's, its nearest task sentences) and "
                "a sample of the corpus's scores in the manifest: see tapt show and tapt plot "
                "scores."})
