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
              **settings: Any) -> Self:
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
            **settings: The build's settings, `BuildConfig`'s fields by name, each defaulting
                to the field's default (the options of `tapt index build`, `-` for `_`):
                segment_size, batch_size, part_size, split, text_field, doc_field, text_docs,
                input_format, hf_split, strict, invalid_utf8, overwrite, restart, progress,
                index (FAISS type: auto, flat, hnsw or ivfpq; `index_type`, its old name, is
                taken for one release with a warning), memory, opq, embedding_dtype, shards,
                shard_size, piece_size, codes; and the options of the executor named by
                `executor` (`Executor.Options`; for "ray", `RayOptions`: ray_address,
                ray_workers, gpus_per_worker, ray_timeout, ray_retries).

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

        options = _executor_settings(settings)
        settings = config_settings("build", BuildConfig, settings, ("executor",))
        inputs = _inputs(inputs, hf_datasets, settings.get("hf_split"))
        path_text(out, "out")
        config = BuildConfig(executor=executor if isinstance(executor, str) else "local",
                             **settings)
        check_index_output(out, inputs, config.overwrite)  # before the model is loaded
        with _runner(executor, config.progress, options) as runner:
            spec = EncoderSpec(model, device, backend)
            # the model loads once the corpus is scanned: its mistakes are refused first
            build_index(inputs, out, None, config,
                        executor=None if isinstance(runner, str) else runner, encoder_spec=spec)
        return cls(out)

    def add(self, inputs: PathLike | Sequence[PathLike], *, model: str | None = None,
            device: str = "auto", backend: str = "auto", hf_datasets: Sequence[str] = (),
            executor: Any = "local", **settings: Any) -> dict[str, Any]:
        """Append the documents of `inputs` the index does not hold yet, as new shards
        (`tapt index add`); existing ids never change.

        Args:
            inputs: Corpus files, folders or URLs, read as by `build`.
            model: The index's model directory, if it moved.
            device: auto, cpu or cuda.
            backend: auto (the build's backend where the device allows), torch, onnx, onnx-int8;
                one of another precision than the build's (onnx-int8 against torch or onnx)
                is refused: one index holds rows of one kind.
            hf_datasets: Hugging Face Hub datasets to stream too ("NAME" or "NAME:CONFIG").
            executor: What runs the add's stages: "local", "ray", or an `Executor`.
            **settings: The options of `tapt index add` that are `BuildConfig` fields, by the
                field's name: batch_size, text_field, doc_field, text_docs and invalid_utf8
                (each defaulting to the build's), input_format, hf_split, strict, shards,
                shard_size, piece_size, restart, progress; and the options of the executor,
                as for `build`.

        Returns:
            The record of this add (sentences and documents added, duplicates skipped);
                this object then reads the new generation.

        Raises:
            Interrupted: Ctrl-C; the embedded part is kept (`kept`, `work`) and the same call
                resumes it.
        """
        from tapt.indexer.building.add import add_to_index, check_add_inputs
        from tapt.indexer.building.build_config import BuildConfig

        options = _executor_settings(settings)
        settings = config_settings("add", BuildConfig, settings, ("executor",))
        inputs = _inputs(inputs, hf_datasets, settings.get("hf_split"))
        check_add_inputs(self.path, inputs)  # before the model is loaded
        self.check_add_backend(device, backend)
        # loaded (and checked) once the new inputs are scanned: their mistakes are refused first
        encoder = self._lazy_encoder(model, device, backend)
        with _runner(executor, settings.get("progress", True), options) as runner:
            manifest = add_to_index(self.path, inputs, encoder, executor=runner, **settings)
        self._reopen()
        return manifest["history"][-1]


def _executor_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """The executors' options (`Executor.Options`) among a call's keywords, taken out of
    `settings`."""
    from tapt.indexer.building.executors import executor_options

    names = executor_options()
    return {name: settings.pop(name) for name in list(settings) if name in names}


@contextlib.contextmanager
def _runner(executor: Any, progress: bool, options: dict[str, Any]) -> Iterator[Any]:
    """What runs a build's or add's stages: an `Executor` object or "local" itself (the build
    makes the local one), else the executor of that name made from its options (an option left
    None keeps its default) and `progress` where it takes one, closed afterwards. An option
    of another executor, or given with an object, is refused."""
    import inspect

    from tapt.indexer.building.executors import EXECUTORS, get_executor, make_options

    keywords = make_options(executor if isinstance(executor, str) else "", options)
    if not isinstance(executor, str) or executor == "local" or executor not in EXECUTORS.names():
        yield executor          # an unknown name is refused where the build names it
        return
    if "progress" in inspect.signature(EXECUTORS[executor]).parameters:
        keywords["progress"] = progress
    runner = get_executor(executor, **keywords)
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
