"""Building an index and adding to one: `Index.build` and `Index.add` (`tapt index build`,
`tapt index add`), with the executor and the corpus inputs they share."""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator, Self, Sequence

from tapt.api.arguments import PathLike
from tapt.api.options import config_settings
from tapt.errors import InputError
from tapt.util.checks import path_text, shown


class IndexBuilding:
    """`Index.build` and `Index.add` (a part of `tapt.Index`)."""

    @classmethod
    def build(cls, inputs: PathLike | Sequence[PathLike], out: PathLike, *,
              model: str | None = None, device: str = "auto", backend: str = "auto",
              hf_datasets: Sequence[str] = (), executor: Any = "local",
              ray_address: str | None = None, ray_workers: int | None = None,
              gpus_per_worker: float | None = None, ray_timeout: float | None = None,
              ray_retries: int | None = None, **settings: Any) -> Self:
        """Embed a corpus into a new index (the options of `tapt index build`).

        An interrupted build is resumed by the same call.

        Args:
            inputs: Corpus files, folders or fsspec URLs (any corpus format: JSONL, text,
                CSV/TSV, Parquet, Arrow, Hugging Face save_to_disk folders; compressed too).
            out: The index directory to create.
            model: Sentence-transformers model directory or hub name (default: the packaged
                all-MiniLM-L6-v2), or the name of an encoder registered with
                `tapt.extend.register_encoder`.
            device: auto, cpu or cuda.
            backend: auto, torch, onnx or onnx-int8.
            hf_datasets: Hugging Face Hub datasets to stream too ("NAME" or "NAME:CONFIG").
            executor: What runs the build's stages: "local", "ray", or an `Executor`.
            ray_address: executor "ray": the cluster to join (default: RAY_ADDRESS, else a
                local cluster); `ray_workers`, `gpus_per_worker`, `ray_timeout` and
                `ray_retries` (`tapt index build --help`) likewise only apply with "ray".
            ray_workers: executor "ray": embedding actors.
            gpus_per_worker: executor "ray": GPUs per embedding actor.
            ray_timeout: executor "ray": seconds without a finished task before a stage fails.
            ray_retries: executor "ray": restarts of a dead actor and retries of a task.
            **settings: The build's settings, `BuildConfig`'s fields by name, each defaulting
                to the field's default (the options of `tapt index build`, `-` for `_`):
                segment_size, batch_size, part_size, split, text_field, doc_field, text_docs,
                input_format, hf_split, strict, invalid_utf8, overwrite, restart, progress,
                index (FAISS type: auto, flat, hnsw or ivfpq; `index_type`, its old name, is
                taken for one release with a warning), memory, opq, embedding_dtype, shards,
                shard_size, piece_size, codes.

        Returns:
            The new index, open.

        Raises:
            InputError: an unknown keyword, or a setting out of range (named).
            Interrupted: Ctrl-C; the embedded part is kept (`kept`, `work`) and the same call
                resumes it.
        """
        from tapt.indexer.building.build_config import BuildConfig
        from tapt.indexer.building.executors import EncoderSpec
        from tapt.indexer.building.pipeline import build_index, check_index_output

        settings = config_settings("build", BuildConfig, settings, ("executor",))
        inputs = _inputs(inputs, hf_datasets, settings.get("hf_split"))
        path_text(out, "out")
        config = BuildConfig(executor=executor if isinstance(executor, str) else "local",
                             **settings)
        check_index_output(out, inputs, config.overwrite)  # before the model is loaded
        with _runner(executor, config.progress, ray_address=ray_address, ray_workers=ray_workers,
                     gpus_per_worker=gpus_per_worker, ray_timeout=ray_timeout,
                     ray_retries=ray_retries) as runner:
            spec = EncoderSpec(model, device, backend)
            # the model loads once the corpus is scanned: its mistakes are refused first
            build_index(inputs, out, None, config,
                        executor=None if isinstance(runner, str) else runner, encoder_spec=spec)
        return cls(out)

    def add(self, inputs: PathLike | Sequence[PathLike], *, model: str | None = None,
            device: str = "auto", backend: str = "auto", hf_datasets: Sequence[str] = (),
            executor: Any = "local", ray_address: str | None = None,
            ray_workers: int | None = None, gpus_per_worker: float | None = None,
            ray_timeout: float | None = None, ray_retries: int | None = None,
            **settings: Any) -> dict[str, Any]:
        """Append the documents of `inputs` the index does not hold yet, as new shards
        (`tapt index add`); existing ids never change.

        Args:
            inputs: Corpus files, folders or URLs, read as by `build`.
            model: The index's model directory, if it moved.
            device: auto, cpu or cuda.
            backend: auto (the build's backend where the device allows), torch, onnx, onnx-int8.
            hf_datasets: Hugging Face Hub datasets to stream too ("NAME" or "NAME:CONFIG").
            executor: What runs the add's stages: "local", "ray", or an `Executor`.
            ray_address: executor "ray": the cluster to join; the other `ray_*` options and
                `gpus_per_worker` as for `build`.
            ray_workers: executor "ray": embedding actors.
            gpus_per_worker: executor "ray": GPUs per embedding actor.
            ray_timeout: executor "ray": seconds without a finished task before a stage fails.
            ray_retries: executor "ray": restarts of a dead actor and retries of a task.
            **settings: The options of `tapt index add` that are `BuildConfig` fields, by the
                field's name: batch_size, text_field, doc_field, text_docs and invalid_utf8
                (each defaulting to the build's), input_format, hf_split, strict, shards,
                shard_size, piece_size, restart, progress.

        Returns:
            The record of this add (sentences and documents added, duplicates skipped);
                this object then reads the new generation.

        Raises:
            Interrupted: Ctrl-C; the embedded part is kept (`kept`, `work`) and the same call
                resumes it.
        """
        from tapt.indexer.building.add import add_to_index, check_add_inputs
        from tapt.indexer.building.build_config import BuildConfig

        settings = config_settings("add", BuildConfig, settings, ("executor",))
        inputs = _inputs(inputs, hf_datasets, settings.get("hf_split"))
        check_add_inputs(self.path, inputs)  # before the model is loaded
        # loaded (and checked) once the new inputs are scanned: their mistakes are refused first
        encoder = self._lazy_encoder(model, device, backend)
        with _runner(executor, settings.get("progress", True), ray_address=ray_address,
                     ray_workers=ray_workers, gpus_per_worker=gpus_per_worker,
                     ray_timeout=ray_timeout, ray_retries=ray_retries) as runner:
            manifest = add_to_index(self.path, inputs, encoder, executor=runner, **settings)
        self._reopen()
        return manifest["history"][-1]


@contextlib.contextmanager
def _runner(executor: Any, progress: bool, **ray_options: Any) -> Iterator[Any]:
    """What runs a build's or add's stages: `executor` itself, or (for "ray") a RayExecutor
    made from the `ray_*` options, closed afterwards; an option left None keeps its default."""
    given = {name: value for name, value in ray_options.items() if value is not None}
    if executor != "ray":
        for name in given:
            raise InputError("only applies with `executor` ray", param=name)
        yield executor
        return
    from tapt.indexer.building.executors import get_executor

    runner = get_executor("ray", progress=progress,
                          **{name.removeprefix("ray_"): value for name, value in given.items()})
    try:
        yield runner
    finally:
        runner.close()


def _inputs(inputs: Any, hf_datasets: Sequence[str], hf_split: str | None) -> list[Any]:
    """Corpus inputs as the reader takes them: paths and URLs, plus Hub dataset specs."""
    from tapt.indexer.reading.reader import HubDataset

    if isinstance(inputs, (str, os.PathLike, HubDataset)):
        items = [inputs]
    elif inputs is None or isinstance(inputs, (list, tuple)):
        items = list(inputs or ())
    else:
        raise InputError(f"must be a path or a list of paths, got {shown(inputs)}",
                         param="corpus")       # as every error about the corpus names it
    out = [i if isinstance(i, HubDataset) else path_text(i, "corpus") for i in items]
    out += [HubDataset.parse(spec, hf_split) for spec in hf_datasets]
    if not out:
        raise InputError("give corpus files, folders or URLs, or `hf_datasets`", param="inputs")
    return out
