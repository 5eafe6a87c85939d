"""The benchmarks' entries (`tapt bench recall`, `tapt bench downstream`): each checks its
arguments and forwards to `tapt.bench`, which does the work."""

from __future__ import annotations

from typing import Any

from tapt.api.arguments import PathLike


def bench_recall(out: PathLike, *, seeds: PathLike, progress: bool = True,
                 **settings: Any) -> dict[str, Any]:
    """Precision, recall and F1 of selection methods against oracle selections, DSIR beside
    them (`tapt bench recall`); writes recall.json, recall.md and pr-<domain>.png into `out`.

    Args:
        out: The results directory (new, empty, or an earlier results directory).
        seeds: Directory of <domain>.jsonl.gz seed files.
        progress: Show progress bars.
        **settings: `RecallConfig`'s fields by name (each with its default there): pool
            (labelled pool JSONL(.gz): text, domain, doc, pos; indexed if no `index`), index
            (an index of the pool, built without splitting, to reuse), methods (method or
            variant names, or "all"), seed_sizes (seed subset sizes), budgets (multiples of
            the oracle's size in sentences: "oracle,0.5x,2x"), repeats (seed subsets per seed
            size smaller than the seed file), segment_sizes (for methods that score
            sentences), domains (only these; default: all), context (how methods that pool
            sentence scores are cut: "auto", what `Index.select` uses on this index, document
            context where its documents mostly hold several sentences, rows
            `METHOD+document` then; "sentence", rows `METHOD`; "document", rows
            `METHOD+document`; "both", or a list of them; formerly `contexts`), label_field
            (the metadata field holding the domain), cache (where seed embeddings, DSIR
            features and a built index are kept). Lists may be given comma-separated.

    Returns:
        The report: results, aggregate, seconds.
    """
    from pathlib import Path

    from tapt.api.options import config_settings
    from tapt.bench.recall_config import RecallConfig
    from tapt.bench.recall_run import bench_recall as run_bench
    from tapt.util.checks import path_text

    config = RecallConfig(**config_settings("recall", RecallConfig, settings, ()))
    seeds_dir, out_dir = Path(path_text(seeds, "seeds")), Path(path_text(out, "out"))
    return run_bench(Path(config.pool) if config.pool else None, seeds_dir,
                     Path(config.index) if config.index else None, list(config.methods),
                     list(config.seed_sizes), config.budgets, config.repeats,
                     list(config.segment_sizes), out_dir, Path(config.cache),
                     label_field=config.label_field,
                     domains=list(config.domains) if config.domains else None,
                     progress=progress, contexts=config.context)


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
