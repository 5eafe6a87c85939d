"""`tapt.bench_downstream` (`tapt bench downstream`): what continued pretraining on a selection
is worth on a labelled task of the domain.

For every seed and condition: select from the index (random, a selection method, or the oracle:
the index's own rows of the domain, by a metadata field), continue masked-LM pretraining of the
index's model on the selection (`tapt.train`, the same steps and seed for every condition), then
fine-tune the encoder with a classification head on a small labelled split and score it on a
held-out split (`trainer.downstream`). Condition `none` fine-tunes the model as it is.

The report folder holds `settings.json` (the configuration), `runs/<condition>-seed<k>/` (the
selection, `result.json`: the run's completion record with its scores and both loss curves) and
`report.json` + `report.md`. A run whose `result.json` exists is not run again; a folder made
with another configuration is refused.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from tapt.errors import InputError
from tapt.trainer.downstream import FinetuneSettings
from tapt.util.checks import choice, path_text, real_number, shown, whole_number

from .arguments import PathLike

CONDITIONS = ("none", "random", "centroid", "fused", "oracle")
SETTINGS = "settings.json"
RESULT = "result.json"
_FORMAT = "tapt-bench-downstream"


def _selection_methods() -> tuple[str, ...]:
    from .options import method_names

    return tuple(method_names())


def _check_conditions(conditions: Sequence[str]) -> tuple[str, ...]:
    if isinstance(conditions, str):
        conditions = [c.strip() for c in conditions.split(",") if c.strip()]
    known = ("none", "oracle", *_selection_methods())
    out = []
    for c in conditions:
        if not isinstance(c, str) or c not in known:
            raise InputError(f"unknown condition {shown(c)}; conditions are none, oracle or a "
                             f"selection method ({', '.join(known[2:])})", param="conditions")
        if c not in out:
            out.append(c)
    if not out:
        raise InputError("give at least one condition", param="conditions")
    return tuple(out)


def _check_seeds(seeds: Sequence[int] | str) -> tuple[int, ...]:
    if isinstance(seeds, str):
        try:
            seeds = [int(s) for s in seeds.split(",") if s.strip()]
        except ValueError as exc:
            raise InputError(f"must be whole numbers such as 0,1,2, got {seeds!r}",
                             param="seeds") from exc
    if isinstance(seeds, (int, np.integer)):
        seeds = [int(seeds)]
    out = tuple(dict.fromkeys(whole_number(s, "seeds", minimum=0) for s in seeds))
    if not out:
        raise InputError("give at least one seed", param="seeds")
    return out


def _settings_sha(settings: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


def _flat(settings: Any, prefix: str = "") -> dict[str, Any]:
    """Nested settings as {"pretrain.steps": 200, ...} (to name what differs)."""
    if not isinstance(settings, dict):
        return {prefix.rstrip("."): settings}
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, dict) and key != "index":
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _is_report_folder(path: Path) -> bool:
    try:
        return json.loads((path / SETTINGS).read_text(encoding="utf-8")).get("format") == _FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def _prepare_out(out: Path, settings: dict[str, Any], inputs: list[str]) -> None:
    """Refuse a folder that is not new, empty or a report of this configuration; write the
    settings of a new one."""
    from tapt.util.files import write_json_atomic
    from tapt.util.safety import check_output

    check_output(out, what="downstream report folder", inputs=inputs, directory=True,
                 ours=_is_report_folder)
    if (out / SETTINGS).exists():
        held = json.loads((out / SETTINGS).read_text(encoding="utf-8"))
        if held.get("settings_sha256") != _settings_sha(settings):
            before, now = _flat(held.get("settings", {})), _flat(settings)
            diffs = sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))
            raise InputError(f"{out} holds a downstream benchmark of another configuration "
                             f"(it differs in {', '.join(diffs) or 'its settings'}); choose "
                             "another folder or give the same settings to resume it",
                             param="out")
        return
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / SETTINGS, {"format": _FORMAT, "format_version": 1,
                                       "settings_sha256": _settings_sha(settings),
                                       "settings": settings})


def _oracle_selection(ix: Any, field: str, value: str, budget: str, seed: int) -> Any:
    """The index's own rows of the domain (segments whose every sentence has `field` ==
    `value`) in a seeded random order, cut at `budget`: what a perfect selector would take."""
    from tapt.retriever.evaluation.oracle import sentence_labels
    from tapt.retriever.methods import CorpusCache
    from tapt.retriever.methods.segments import take
    from tapt.retriever.selections.make import SelectConfig, materialise
    from tapt.retriever.selections.selection import Selection
    from tapt.util.versions import library_versions, utc_now

    config = SelectConfig("random", budget, seed=seed)
    view = CorpusCache(ix).view(None)
    inside = (sentence_labels(ix, field) == str(value)).astype(np.int64)
    starts = np.asarray(view.offsets[:-1], dtype=np.int64)
    per_segment = np.add.reduceat(inside, starts) if len(starts) else np.zeros(0, np.int64)
    candidates = np.flatnonzero(per_segment == np.asarray(view.lengths))
    if not len(candidates):
        raise InputError(f"no segment of index {ix.path} has {field} = {value!r}",
                         param="oracle_value")
    order = candidates[np.random.default_rng(seed).permutation(len(candidates))]
    ranking = take(view, order, np.zeros(len(view), dtype=np.float32), config.parsed_budget, {})
    segments = materialise(ix, view, ranking, "oracle")
    manifest = {
        "method": "oracle", "params": {"field": field, "value": str(value)},
        "budget": config.parsed_budget.to_json(), "segment_size": int(ix.segment_size),
        "seed": seed, "task": None, "index": ix.identity(),
        "counts": {"segments": len(segments),
                   "sentences": int(np.asarray(view.lengths)[ranking.segments].sum()),
                   "tokens": int(np.asarray(view.tokens)[ranking.segments].sum()),
                   "corpus_segments": len(view), "corpus_sentences": ix.n_sentences},
        "info": {**ranking.info, "oracle_segments": int(len(candidates))}, "warnings": [],
        "created": utc_now(), "versions": library_versions()}
    return Selection(segments, manifest)


def _oracle_share(selection: Any, field: str | None, value: str | None) -> float | None:
    """Share of the selection's sentences whose `field` is `value` (None without them)."""
    if not field or value is None or not len(selection):
        return None
    inside = total = 0
    for segment in selection:
        n = len(segment.sentences)
        total += n
        if (segment.meta or {}).get(field) is not None:
            inside += n * (str(segment.meta[field]) == str(value))
        elif segment.sentence_meta:
            inside += sum(str((m or {}).get(field)) == str(value) for m in segment.sentence_meta)
    return round(inside / total, 4) if total else None


def bench_downstream(index: PathLike, labelled: PathLike, out: PathLike, *,
                     task: PathLike | Sequence[str] | None = None, text_field: str = "text",
                     label_field: str = "label", group_field: str | None = None,
                     oracle_field: str = "domain", oracle_value: str | None = None,
                     conditions: Sequence[str] | str = CONDITIONS,
                     seeds: Sequence[int] | str = (0,), budget: str = "2000sent",
                     steps: int = 200, batch_size: int = 16, max_length: int = 64,
                     lr: float = 1e-4, train_size: int = 200, test_size: int = 400,
                     ft_epochs: int = 3, ft_steps: int | None = None, ft_batch_size: int = 16,
                     ft_lr: float = 5e-5, model: str | None = None, device: str = "cpu",
                     keep_models: bool = False, progress: bool = True,
                     encoder: Any = None) -> dict[str, Any]:
    """Fine-tune on a labelled task after continued pretraining on each condition's selection
    (`tapt bench downstream`); resumable, one folder per configuration.

    Args:
        index: The index to select from.
        labelled: JSON Lines (optionally gzipped) of labelled examples.
        out: The report folder (new, empty, or an earlier report of the same settings).
        task: The task text the selections are made for: a file, or a list of strings
            (default: every text of `labelled`).
        text_field: The field with the text in `labelled` (and in a JSONL `task`).
        label_field: The field with the label in `labelled`.
        group_field: A field of `labelled` (e.g. a document id) whose examples stay on one
            side of the train/test split.
        oracle_field: The index's metadata field that marks the domain's own rows.
        oracle_value: Its value for the domain (needed by the `oracle` condition).
        conditions: none (no continued pretraining), oracle, or selection methods.
        seeds: Seeds; each gives its own split, selections, pretraining and fine-tuning.
        budget: Selection budget of every condition ("2000sent", "0.01", "500", "1Mtok").
        steps: Continued-pretraining steps (the same for every condition).
        batch_size: Continued-pretraining examples per step.
        max_length: Tokens per example, in pretraining and fine-tuning.
        lr: Continued-pretraining peak learning rate.
        train_size: Labelled training examples (stratified by label).
        test_size: Labelled test examples (stratified by label).
        ft_epochs: Fine-tuning passes over the training split.
        ft_steps: Fine-tuning steps instead of epochs.
        ft_batch_size: Fine-tuning examples per step.
        ft_lr: Fine-tuning peak learning rate of the encoder (the head's is 1e-3).
        model: The masked-LM model to start from (default: the index's model).
        device: cpu or cuda.
        keep_models: Keep each run's continued-pretrained model (default: deleted once its
            classifier is scored; the loss curves are kept).
        progress: Show progress bars.
        encoder: An encoder object for embedding the task (for tests).

    Returns:
        The report (also in OUT/report.json and OUT/report.md).

    Raises:
        InputError: a bad argument or labelled file, a folder of another configuration.
        OutputError: `out` holds something that is not such a report.
    """
    from tqdm.auto import tqdm

    from tapt.retriever.ranking.budget import parse_budget
    from tapt.retriever.tasks.forms import task_paths
    from tapt.trainer.downstream_data import read_labelled, split
    from tapt.trainer.downstream_report import write_report
    from tapt.util.files import sha256_file

    from .index import Index

    out_path = Path(path_text(out, "out"))
    labelled_path = path_text(labelled, "labelled")
    conditions = _check_conditions(conditions)
    seeds = _check_seeds(seeds)
    whole_number(steps, "steps")
    whole_number(batch_size, "batch_size")
    real_number(lr, "lr", low=0.0, low_open=True)
    choice(device, "device", ("cpu", "cuda"))
    if not isinstance(budget, str):
        raise InputError(f"must be a budget such as 2000sent, got {shown(budget)}",
                         param="budget")
    parse_budget(budget)
    ft = FinetuneSettings(epochs=ft_epochs, steps=ft_steps, batch_size=ft_batch_size, lr=ft_lr,
                          max_length=max_length)
    if "oracle" in conditions and oracle_value is None:
        raise InputError("the oracle condition needs the domain's value of the oracle field "
                         f"({oracle_field})", param="oracle_value")
    data = read_labelled(labelled_path, text_field, label_field, group_field)
    for seed in seeds:     # every split must work before anything slow runs
        split(data, train_size, test_size, seed)
    ix = Index.open(index)
    base_model = model or ix.manifest["model"].get("source") or ix.manifest["model"]["name"]
    task_value: Any = list(data.texts) if task is None else task
    task_files = [str(p) for p in task_paths(task)] if task is not None else []
    settings = {
        "index": {k: v for k, v in ix.identity().items() if k in ("uuid", "manifest_sha256")},
        "labelled_sha256": data.sha256, "text_field": text_field, "label_field": label_field,
        "group_field": group_field, "labels": data.names,
        "task": ("labelled texts" if task is None else
                 {"files": [sha256_file(p) for p in task_files]} if task_files else
                 {"strings_sha256": _settings_sha({"t": list(task)})}),
        "oracle_field": oracle_field, "oracle_value": oracle_value, "budget": budget,
        "model": str(base_model), "pretrain": {"steps": steps, "batch_size": batch_size,
                                               "max_length": max_length, "lr": lr},
        "finetune": ft.to_json(), "train_size": train_size, "test_size": test_size,
    }
    _prepare_out(out_path, settings, [str(ix.path), labelled_path, *task_files])
    runs = [(c, s) for s in seeds for c in conditions]
    results = []
    with tqdm(total=len(runs), desc="downstream runs", unit="run", disable=not progress) as bar:
        for condition, seed in runs:
            bar.set_postfix(run=f"{condition} seed {seed}")
            results.append(_run(ix, data, out_path / "runs" / f"{condition}-seed{seed}",
                                condition, seed, settings, ft, task_value, base_model, encoder,
                                device, keep_models, progress))
            bar.update(1)
    return write_report(out_path, settings, results, conditions, seeds, device)


def _run(ix: Any, data: Any, run_dir: Path, condition: str, seed: int, settings: dict[str, Any],
         ft: FinetuneSettings, task: Any, base_model: str, encoder: Any, device: str,
         keep_models: bool, progress: bool) -> dict[str, Any]:
    """One (condition, seed): its completion record, read back when it was run before."""
    from tapt.retriever.selections.file_format import is_unchanged_selection
    from tapt.retriever.selections.selection import Selection
    from tapt.trainer.downstream import finetune_classifier
    from tapt.trainer.downstream_data import describe_split, split
    from tapt.util.files import write_json_atomic

    from .training import train

    sha = _settings_sha(settings)
    record_path = run_dir / RESULT
    if record_path.exists():
        try:
            done = json.loads(record_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            done = None
        if isinstance(done, dict) and done.get("settings_sha256") == sha:
            return {**done, "resumed": True}
    run_dir.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}
    selection_info: dict[str, Any] | None = None
    pretrain: dict[str, Any] | None = None
    model_for_finetune = base_model
    if condition != "none":
        t0 = time.perf_counter()
        sel_path = run_dir / "selection.jsonl"
        if is_unchanged_selection(sel_path):    # made before this run was interrupted
            selection = Selection.read(sel_path)
        elif condition == "oracle":
            selection = _oracle_selection(ix, settings["oracle_field"], settings["oracle_value"],
                                          settings["budget"], seed)
        else:
            selection = ix.select(condition, task=task, budget=settings["budget"], seed=seed,
                                  text_field=settings["text_field"], encoder=encoder,
                                  progress=progress)
        if selection.path is None:
            selection.write(sel_path, overwrite=True)
        seconds["select"] = round(time.perf_counter() - t0, 2)
        selection_info = {**selection.counts,
                          "oracle_share": _oracle_share(selection, settings["oracle_field"],
                                                        settings["oracle_value"])}
        t0 = time.perf_counter()
        p = settings["pretrain"]
        manifest = train(str(sel_path), run_dir / "model", model=base_model, steps=p["steps"],
                         batch_size=p["batch_size"], max_length=p["max_length"], lr=p["lr"],
                         seed=seed, device=device, resume=True, delete_checkpoints=True,
                         progress=progress)
        seconds["pretrain"] = round(time.perf_counter() - t0, 2)
        pretrain = {"steps": manifest.get("steps"), "train_loss": manifest.get("train_loss"),
                    "loss_curve": manifest.get("loss_curve", [])}
        model_for_finetune = str(run_dir / "model")
    train_rows, test_rows = split(data, settings["train_size"], settings["test_size"], seed)
    texts = data.texts
    result = finetune_classifier(
        model_for_finetune, [texts[i] for i in train_rows], data.labels[train_rows],
        [texts[i] for i in test_rows], data.labels[test_rows], n_labels=len(data.names),
        settings=ft, seed=seed, device=device, progress=progress,
        desc=f"fine-tune {condition} seed {seed}")
    seconds["finetune"] = result.pop("seconds")
    curve = result.pop("loss_curve")
    result["f1"] = {data.names[k]: round(v, 4) for k, v in result["f1"].items()}
    record = {"settings_sha256": sha, "condition": condition, "seed": seed, "device": device,
              "accuracy": result.pop("accuracy"), "macro_f1": result.pop("macro_f1"),
              "finetune": {**result, "loss_curve": curve}, "pretrain": pretrain,
              "selection": selection_info, "seconds": seconds,
              "split": {"train": describe_split(data, train_rows),
                        "test": describe_split(data, test_rows)}}
    write_json_atomic(record_path, record)   # the completion record: temporary name + rename
    if not keep_models and (run_dir / "model").is_dir():
        shutil.rmtree(run_dir / "model", ignore_errors=True)
    return {**record, "resumed": False}
