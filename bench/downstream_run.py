"""The downstream benchmark (`tapt.bench_downstream`, `tapt bench downstream`): what continued
pretraining on a selection is worth on a labelled task of the domain, at equal compute.

Protocol (Don't Stop Pretraining's, at a size that runs where you are):

- the starting point is a general model of the corpus: `model`, or (by default) a masked LM
  trained from scratch on a random sample of the index's own rows by `tapt.pretrain` at the
  `preset` size, made once and cached under the user cache directory, keyed by the index and
  its settings;
- every condition continues it with the same steps, batch size, length and learning rate:
  `random` (random corpus rows: the control for the extra training), `task` (the task's own
  unlabelled text only: TAPT), selection methods (centroid, knn, fused, ...: their selection for
  the task) and `oracle` (the index's own rows of the task's domain), all at one budget; `none`
  is the general model as it is;
- each continued model's held-out masked-LM loss on the labelled texts (held out from the index
  by document) is measured with the same masks for all;
- each is fine-tuned on the labelled task by k-fold cross-validation over documents, so every
  labelled example is a test example once per seed;
- per condition: accuracy, its paired difference from `random` and `none` with 95% intervals
  of a bootstrap over seeds and documents, and each method's share of the oracle's gain.

The report folder holds `settings.json`, `runs/<condition>-seed<k>/` (the selection, and
`result.json`: the run's completion record with its predictions, held-out losses and loss
curves) and `report.json`, `report.md`, `gains.png`. A run whose `result.json` exists is not
run again; a folder made with another configuration is refused.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from tapt.bench.downstream_config import DownstreamConfig
from tapt.errors import InputError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ApiCalls:
    """What the benchmark takes from the Python API above it (`tapt.api` hands them down):
    opening an index that selects, `tapt.train` and `tapt.pretrain`."""

    open_index: Callable[..., Any]
    train: Callable[..., dict[str, Any]]
    pretrain: Callable[..., dict[str, Any]]

SETTINGS = "settings.json"
RESULT = "result.json"
_FORMAT = "tapt-bench-downstream"
_FORMAT_VERSION = 2


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
    write_json_atomic(out / SETTINGS, {"format": _FORMAT, "format_version": _FORMAT_VERSION,
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


def general_model(ix: Any, preset: str, *, pretrain: Callable[..., dict[str, Any]],
                  device: str = "cpu", fallback: Path,
                  progress: bool = True) -> tuple[str, dict[str, Any]]:
    """The general model of an index at a preset size: made once by `pretrain` (seed 0) and
    kept in the user cache directory (`general-models/<key>`, keyed by the index's identity and
    the preset's settings), or in `fallback` where no cache can be written. An entry whose
    weights no longer match the digest recorded when it was made is made again.

    Args:
        ix: The open index.
        preset: The size (`tapt.modeling.scratch.PRESETS`).
        pretrain: `tapt.pretrain`.
        device: cpu or cuda (where it trains; not part of the key).
        fallback: Where to make it without a writable cache.
        progress: Show progress bars.

    Returns:
        (its directory, a record: key, preset, steps, seconds, loss curve, whether reused).
    """
    import fcntl

    from tapt.trainer.outdir import finished_manifest
    from tapt.trainer.pretrain import PretrainConfig
    from tapt.util.cache import warn_once, writable_cache
    from tapt.util.files import sha256_file, write_json_atomic

    identity = {k: v for k, v in ix.identity().items() if k in ("uuid", "manifest_sha256")}
    settings = PretrainConfig(out="-", preset=preset).identity_fields()
    key = _settings_sha({"format": 1, "index": identity, "pretrain": settings})[:32]
    root = writable_cache("general-models")
    path = (root / key) if root is not None else fallback
    entry = path.parent / f"{path.name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f"{path.name}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)     # one process makes it; the others wait and reuse
        done = finished_manifest(path)
        reused = False
        if done is not None:
            try:
                recorded = json.loads(entry.read_text(encoding="utf-8"))
                reused = recorded.get("weights_sha256") == sha256_file(
                    path / "model.safetensors")
            except (OSError, ValueError, AttributeError):
                reused = False
            if not reused:
                warn_once(f"general:{path}", "the cached general model %s does not match what "
                          "was recorded when it was made; making it again", path)
                shutil.rmtree(path, ignore_errors=True)     # tapt's own cache entry
        t0 = time.perf_counter()
        if not reused:
            done = pretrain(ix.path, path, preset=preset, device=device, resume=True,
                            delete_checkpoints=True, progress=progress)
            write_json_atomic(entry, {"key": key, "index": identity, "pretrain": settings,
                                      "weights_sha256": sha256_file(path / "model.safetensors")})
    curve = done.get("loss_curve", [])
    return str(path), {"key": key, "preset": preset, "path": str(path), "reused": reused,
                       "steps": done.get("steps"), "seconds": done.get("seconds"),
                       "wait_seconds": round(time.perf_counter() - t0, 1),
                       "loss_start": round(float(np.mean(curve[:20])), 4) if curve else None,
                       "loss_end": done.get("train_loss"),
                       "loss_curve": [round(float(np.mean(curve[i:i + 50])), 4)
                                      for i in range(0, len(curve), 50)],
                       "sample": done.get("pretrain", {}).get("sample"),
                       "shape": done.get("pretrain", {}).get("shape")}


def run_downstream(index: str, labelled_path: str, out_path: Path, config: DownstreamConfig,
                   calls: ApiCalls, *, progress: bool = True) -> dict[str, Any]:
    """Run the benchmark of `config` (`tapt.bench_downstream`, which checks the arguments)
    into the report folder `out_path`: the runs not finished before, then the report.

    Args:
        index: The index's path.
        labelled_path: The labelled examples' file.
        out_path: The report folder.
        config: The settings.
        calls: The API's calls the runs make.
        progress: Show progress bars.

    Returns:
        The report (also in OUT/report.json, OUT/report.md and OUT/gains.png).
    """
    from tqdm.auto import tqdm

    from tapt.bench.downstream_data import describe_folds, group_folds, read_labelled
    from tapt.bench.downstream_report import build_report, write_report
    from tapt.retriever.tasks.forms import task_paths
    from tapt.util.files import sha256_file

    ft = config.finetune()
    data = read_labelled(labelled_path, config.text_field, config.label_field,
                         config.group_field)
    fold_of = [group_folds(data, config.folds, seed) for seed in config.seeds]  # refused first
    ix = calls.open_index(index)
    task = config.task
    task_value: Any = list(data.texts) if task is None else task
    task_files = [str(p) for p in task_paths(task)] if task is not None else []
    settings = {
        "index": {k: v for k, v in ix.identity().items() if k in ("uuid", "manifest_sha256")},
        "labelled_sha256": data.sha256, "text_field": config.text_field,
        "label_field": config.label_field, "group_field": config.group_field,
        "labels": data.names, "folds": config.folds,
        "task": ("labelled texts" if task is None else
                 {"files": [sha256_file(p) for p in task_files]} if task_files else
                 {"strings_sha256": _settings_sha({"t": list(task)})}),
        "oracle_field": config.oracle_field, "oracle_value": config.oracle_value,
        "budget": config.budget, "model": config.model,
        "preset": None if config.model else config.preset,
        "pretrain": {"steps": config.steps, "batch_size": config.batch_size,
                     "max_length": config.max_length, "lr": config.lr},
        "finetune": ft.to_json(),
    }
    _prepare_out(out_path, settings, [str(ix.path), labelled_path, *task_files])
    if config.model is None:
        start, general = general_model(ix, config.preset, pretrain=calls.pretrain,
                                       device=config.device, fallback=out_path / "general",
                                       progress=progress)
        general["description"] = (f"a general model pretrained from scratch ({config.preset} "
                                  f"preset: {general['steps']:,} steps on "
                                  f"{(general.get('sample') or {}).get('sentences', 0):,} "
                                  "random sentences of the index)")
    else:
        start, general = config.model, {"description": f"`{config.model}`"}
    keys, group_of = np.unique(np.asarray(data.groups, dtype=object), return_inverse=True)
    documents: list[list[str]] = [[] for _ in keys]
    for i, g in enumerate(group_of):
        documents[g].append(data.texts[i])
    context = {"ix": ix, "data": data, "settings": settings, "ft": ft, "task": task_value,
               "documents": documents, "start": start, "train": calls.train,
               "device": config.device, "keep_models": config.keep_models,
               "progress": progress}
    runs = [(c, s, f) for s, f in zip(config.seeds, fold_of) for c in config.conditions]
    results = []
    with tqdm(total=len(runs), desc="downstream runs", unit="run", disable=not progress) as bar:
        for condition, seed, folds_of_seed in runs:
            bar.set_postfix(run=f"{condition} seed {seed}")
            results.append(_run(context, out_path / "runs" / f"{condition}-seed{seed}",
                                condition, seed, folds_of_seed))
            bar.update(1)
    report = build_report({**settings, "general_model": general}, results, config.conditions,
                          config.seeds, data.labels, group_of, fold_of, data.names,
                          config.task_name or Path(labelled_path).name.split(".")[0],
                          config.device)
    report["folds_per_seed"] = {str(s): describe_folds(data, f)
                                for s, f in zip(config.seeds, fold_of)}
    return write_report(out_path, report)


def _run(context: dict[str, Any], run_dir: Path, condition: str, seed: int,
         fold_of: np.ndarray) -> dict[str, Any]:
    """One (condition, seed): its completion record, read back when it was run before."""
    from tapt.bench.downstream_finetune import cross_validate
    from tapt.retriever.selections.file_format import is_unchanged_selection
    from tapt.retriever.selections.selection import Selection
    from tapt.trainer.evaluate import document_losses
    from tapt.util.files import write_json_atomic

    ix, data, settings = context["ix"], context["data"], context["settings"]
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
    model = context["start"]
    p = settings["pretrain"]
    if condition != "none":
        t0 = time.perf_counter()
        train_args: dict[str, Any] = {}
        if condition == "task":
            train_args["task"] = [" ".join(doc) for doc in context["documents"]]
        else:
            sel_path = run_dir / "selection.jsonl"
            if is_unchanged_selection(sel_path):    # made before this run was interrupted
                selection = Selection.read(sel_path)
            elif condition == "oracle":
                selection = _oracle_selection(ix, settings["oracle_field"],
                                              settings["oracle_value"], settings["budget"], seed)
            else:
                selection = ix.select(condition, task=context["task"],
                                      budget=settings["budget"], seed=seed,
                                      text_field=settings["text_field"],
                                      progress=context["progress"])
            if selection.path is None:
                selection.write(sel_path, overwrite=True)
            selection_info = {**selection.counts,
                              "oracle_share": _oracle_share(selection, settings["oracle_field"],
                                                            settings["oracle_value"])}
            train_args["selections"] = str(sel_path)
        seconds["select"] = round(time.perf_counter() - t0, 2)
        t0 = time.perf_counter()
        manifest = context["train"](train_args.pop("selections", []), run_dir / "model", model=model,
                         steps=p["steps"], batch_size=p["batch_size"],
                         max_length=p["max_length"], lr=p["lr"], seed=seed,
                         device=context["device"], resume=True, delete_checkpoints=True,
                         progress=context["progress"], **train_args)
        seconds["pretrain"] = round(time.perf_counter() - t0, 2)
        pretrain = {"steps": manifest.get("steps"), "train_loss": manifest.get("train_loss"),
                    "loss_curve": manifest.get("loss_curve", [])}
        model = str(run_dir / "model")
    t0 = time.perf_counter()
    mlm = document_losses(model, context["documents"], max_length=p["max_length"],
                          device=context["device"])
    seconds["mlm_eval"] = round(time.perf_counter() - t0, 2)
    t0 = time.perf_counter()
    result = cross_validate(model, data.texts, data.labels, fold_of, n_labels=len(data.names),
                            settings=context["ft"], seed=seed, device=context["device"],
                            progress=context["progress"], desc=f"fine-tune {condition} seed {seed}")
    seconds["finetune"] = round(time.perf_counter() - t0, 2)
    record = {"settings_sha256": sha, "condition": condition, "seed": seed,
              "device": context["device"], "accuracy": result["accuracy"],
              "macro_f1": result["macro_f1"], "predicted": result["predicted"].tolist(),
              "fold_accuracy": result["fold_accuracy"],
              "finetune_loss_curves": result["loss_curves"], "mlm": mlm,
              "pretrain": pretrain, "selection": selection_info, "seconds": seconds}
    write_json_atomic(record_path, record)   # the completion record: temporary name + rename
    if not context["keep_models"] and (run_dir / "model").is_dir():
        shutil.rmtree(run_dir / "model", ignore_errors=True)
    return {**record, "resumed": False}
