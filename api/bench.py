"""The benchmarks' entries (`tapt bench recall`, `tapt bench downstream`): each checks its
arguments and forwards to `tapt.bench`, which does the work."""

from __future__ import annotations

from typing import Any, Sequence

from tapt.api.arguments import PathLike


def bench_recall(out: PathLike, *, seeds: PathLike, pool: PathLike | None = None,
                 index: PathLike | None = None, methods: Sequence[str] = ("all",),
                 seed_sizes: Sequence[int] = (100, 500, 2000), budgets: str = "oracle,0.5x,2x",
                 repeats: int = 3, segment_sizes: Sequence[int] = (1, 15),
                 domains: Sequence[str] | None = None, contexts: Sequence[str] = ("auto",),
                 label_field: str = "domain", cache: PathLike = ".cache/bench",
                 progress: bool = True) -> dict[str, Any]:
    """Precision, recall and F1 of selection methods against oracle selections, DSIR beside
    them (`tapt bench recall`); writes recall.json, recall.md and pr-<domain>.png into `out`.

    Args:
        out: The results directory (new, empty, or an earlier results directory).
        seeds: Directory of <domain>.jsonl.gz seed files.
        pool: Labelled pool JSONL(.gz): text, domain, doc, pos (indexed if no `index`).
        index: An index of the pool (built without splitting) to reuse.
        methods: Method or variant names, or "all".
        seed_sizes: Seed subset sizes.
        budgets: Multiples of the oracle's size in sentences ("oracle,0.5x,2x").
        repeats: Seed subsets per seed size smaller than the seed file.
        segment_sizes: Segment sizes for methods that score sentences.
        domains: Only these domains (default: all).
        contexts: How methods that pool sentence scores are cut: "auto" (the default: what
            `Index.select` uses on this index, document context where its documents mostly
            hold several sentences; rows `METHOD+document` then), "sentence" (rows `METHOD`)
            and/or "document" (rows `METHOD+document`).
        label_field: The metadata field holding the domain.
        cache: Where seed embeddings, DSIR features and a built index are kept.
        progress: Show progress bars.

    Returns:
        The report: results, aggregate, seconds.
    """
    from pathlib import Path

    from tapt.bench.recall_run import bench_recall as run_bench

    return run_bench(Path(pool) if pool else None, Path(seeds), Path(index) if index else None,
                     list(methods), list(seed_sizes), budgets, repeats, list(segment_sizes),
                     Path(out), Path(cache), label_field=label_field,
                     domains=list(domains) if domains else None, progress=progress,
                     contexts=tuple(contexts))


def bench_downstream(index: PathLike, labelled: PathLike, out: PathLike, *,
                     progress: bool = True, **settings: Any) -> dict[str, Any]:
    """Cross-validated accuracy on a labelled task after equal-compute continued pretraining on
    each condition's data (`tapt bench downstream`); resumable, one folder per configuration.

    Args:
        index: The index to select from.
        labelled: JSON Lines (optionally gzipped) of labelled examples.
        out: The report folder (new, empty, or an earlier report of the same settings).
        progress: Show progress bars.
        **settings: `DownstreamConfig`'s fields by name (each with its default there): task,
            task_name, text_field, label_field, group_field, oracle_field, oracle_value,
            conditions (none, random, task, oracle, or selection methods), seeds, folds,
            budget, model (a masked LM to start from instead of a general model), preset
            (the general model's size), steps, batch_size, max_length, lr (continued
            pretraining), ft_mode (full or probe), ft_epochs, ft_steps, ft_batch_size, ft_lr,
            device, keep_models.

    Returns:
        The report (also in OUT/report.json, OUT/report.md and OUT/gains.png).

    Raises:
        InputError: a bad setting (named) or labelled file, a folder of another configuration.
        OutputError: `out` holds something that is not such a report.
    """
    from pathlib import Path

    from tapt.api.index import Index
    from tapt.api.options import config_settings
    from tapt.api.training import pretrain, train
    from tapt.bench.downstream_config import DownstreamConfig
    from tapt.bench.downstream_run import ApiCalls, run_downstream
    from tapt.util.checks import path_text

    out_path = Path(path_text(out, "out"))
    labelled_path = path_text(labelled, "labelled")
    config = DownstreamConfig(**config_settings("downstream", DownstreamConfig, settings, ()))
    return run_downstream(index, labelled_path, out_path, config,
                          ApiCalls(open_index=Index.open, train=train, pretrain=pretrain),
                          progress=progress)
