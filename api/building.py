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
              segment_size: int = 15, batch_size: int | None = None, split: bool = True,
              text_field: str = "text", doc_field: str | None = "doc", text_docs: str = "auto",
              input_format: str | None = None, hf_datasets: Sequence[str] = (),
              hf_split: str | None = None, strict: bool = False,
              invalid_utf8: str = "error", overwrite: bool = False,
              restart: bool = False, embedding_dtype: str = "auto", shards: int | None = None,
              shard_size: int | str | None = None, codes: str = "none",
              executor: Any = "local", index_type: str = "auto",
              memory: str | int | None = None, opq: bool = False, part_size: int | str = "4096",
              ray_address: str | None = None, ray_workers: int | None = None,
              gpus_per_worker: float | None = None, ray_timeout: float | None = None,
              ray_retries: int | None = None, progress: bool = True,
              encoder: Any = None, **settings: Any) -> Self:
        """Embed a corpus into a new index (the options of `tapt index build`).

        An interrupted build is resumed by the same call.

        Args:
            inputs: Corpus files, folders or fsspec URLs (any corpus format: JSONL, text,
                CSV/TSV, Parquet, Arrow, Hugging Face save_to_disk folders; compressed too).
            out: The index directory to create.
            model: Sentence-transformers model directory or hub name (default: the packaged
                all-MiniLM-L6-v2).
            device: auto, cpu or cuda.
            backend: auto, torch, onnx or onnx-int8.
            segment_size: Sentences per segment (the selection unit).
            batch_size: Sentences per encoder batch (default: 1024 on CUDA, 64 on the CPU).
            split: Split records into sentences (False: each record is one sentence).
            text_field: The field holding the text in JSONL records.
            doc_field: The field whose equal consecutive values join records into a document.
            text_docs: Plain text: one document per line ("line"), per blank-line block
                ("block"), or "auto".
            input_format: Read every file as this format instead of by its suffix.
            hf_datasets: Hugging Face Hub datasets to stream too ("NAME" or "NAME:CONFIG").
            hf_split: The split of `hf_datasets` and of DatasetDict folders.
            strict: Refuse folders holding files of no known format (default: skip them).
            invalid_utf8: Text that is not valid UTF-8: "error" (default) stops with its file
                and line; "replace" reads each invalid byte as U+FFFD and counts the records
                (`counts["invalid_utf8_records"]` in the manifest).
            overwrite: Replace an existing index at `out`.
            restart: Discard an interrupted build of `out` instead of resuming it.
            embedding_dtype: auto (float16 when the index has several shards or its corpus 1M
                records or more, else float32), float32, or float16 (half the disk; cosine
                error ~1e-4).
            shards: Split the input files into this many shards (whole files each).
            shard_size: Or: a new shard before a file would take a shard past this many
                input records ("2M", 500000).
            codes: "int8": also store int8 codes for `select(..., scan="codes")`.
            executor: What runs the build's stages: "local", or an `Executor`.
            index_type: FAISS index: auto, flat, hnsw or ivfpq.
            memory: RAM budget for the FAISS index ("8G", "512M", bytes, or "auto", the
                default: half the memory available where the build runs).
            opq: IVF-PQ only: rotate with OPQ before quantising.
            part_size: Sentences per embed part: the unit a resumed build redoes and a Ray
                embed task embeds ("64k", 4096).
            ray_address: executor "ray": the cluster to join (default: RAY_ADDRESS, else a
                local cluster); `ray_workers`, `gpus_per_worker`, `ray_timeout` and
                `ray_retries` (`tapt index build --help`) likewise only apply with "ray".
            ray_workers: executor "ray": embedding actors.
            gpus_per_worker: executor "ray": GPUs per embedding actor.
            ray_timeout: executor "ray": seconds without a finished task before a stage fails.
            ray_retries: executor "ray": restarts of a dead actor and retries of a task.
            progress: Show progress bars.
            encoder: An encoder object to use instead of loading `model` (for tests).
            **settings: Any other option of `tapt index build` that is a `BuildConfig` field,
                by the field's name.

        Returns:
            The new index, open.

        Raises:
            InputError: an unknown keyword, or a setting out of range (named).
            Interrupted: Ctrl-C; the embedded part is kept (`kept`, `work`) and the same call
                resumes it.
        """
        from tapt.indexer.ann.index_choice import DEFAULT_MEMORY
        from tapt.indexer.building import build_config
        from tapt.indexer.building.build_config import parse_count
        from tapt.indexer.building.executors import EncoderSpec
        from tapt.indexer.building.pipeline import build_index, check_index_output

        inputs = _inputs(inputs, hf_datasets, hf_split)
        path_text(out, "out")
        own = dict(segment_size=segment_size, batch_size=batch_size, split=split,
                   text_field=text_field, doc_field=doc_field or None,
                   text_docs=text_docs, input_format=input_format,
                   hf_split=hf_split, strict=strict, invalid_utf8=invalid_utf8,
                   overwrite=overwrite, restart=restart,
                   progress=progress, index=index_type,
                   memory=DEFAULT_MEMORY if memory is None else memory, opq=opq,
                   embedding_dtype=embedding_dtype, shards=shards,
                   shard_size=shard_size, codes=codes,
                   executor=executor if isinstance(executor, str) else "local",
                   window=parse_count(part_size, param="part_size"))
        config_class = build_config.BuildConfig     # looked up here: tests swap in a variant
        config = config_class(**own, **config_settings("build", config_class, settings, own))
        check_index_output(out, inputs, overwrite)  # before the model is loaded
        with _runner(executor, progress, ray_address=ray_address, ray_workers=ray_workers,
                     gpus_per_worker=gpus_per_worker, ray_timeout=ray_timeout,
                     ray_retries=ray_retries) as runner:
            spec = None if encoder is not None else EncoderSpec(model, device, backend)
            # the model loads once the corpus is scanned: its mistakes are refused first
            build_index(inputs, out, encoder, config,
                        executor=None if isinstance(runner, str) else runner, encoder_spec=spec)
        return cls(out)

    def add(self, inputs: PathLike | Sequence[PathLike], *, model: str | None = None,
            device: str = "auto", backend: str = "auto", batch_size: int | None = None,
            text_field: str | None = None, doc_field: str | None = None,
            text_docs: str | None = None, input_format: str | None = None,
            hf_datasets: Sequence[str] = (), hf_split: str | None = None, strict: bool = False,
            invalid_utf8: str | None = None, shards: int | None = None,
            shard_size: int | str | None = None,
            executor: Any = "local", restart: bool = False, ray_address: str | None = None,
            ray_workers: int | None = None, gpus_per_worker: float | None = None,
            ray_timeout: float | None = None, ray_retries: int | None = None,
            progress: bool = True, encoder: Any = None, **settings: Any) -> dict[str, Any]:
        """Append the documents of `inputs` the index does not hold yet, as new shards
        (`tapt index add`); existing ids never change.

        Args:
            inputs: Corpus files, folders or URLs, read as by `build`.
            model: The index's model directory, if it moved.
            device: auto, cpu or cuda.
            backend: auto (the build's backend where the device allows), torch, onnx, onnx-int8.
            batch_size: Sentences per encoder batch (default: the build's, else 1024 on CUDA
                and 64 on the CPU).
            text_field: The field or column with the text (default: the build's).
            doc_field: The field joining records into documents (default: the build's).
            text_docs: Plain-text documents: line, block or auto (default: the build's).
            input_format: Read every file as this format instead of by its suffix.
            hf_datasets: Hugging Face Hub datasets to stream too ("NAME" or "NAME:CONFIG").
            hf_split: The split of `hf_datasets` and of DatasetDict folders.
            strict: Refuse folders holding files of no known format.
            invalid_utf8: "error" or "replace", as for `build` (default: the build's).
            shards: Split the new files into this many shards (default: one).
            shard_size: Or: a new shard every this many input records.
            executor: What runs the add's stages: "local", "ray", or an `Executor`.
            restart: Discard an interrupted add instead of resuming it.
            ray_address: executor "ray": the cluster to join; the other `ray_*` options and
                `gpus_per_worker` as for `build`.
            ray_workers: executor "ray": embedding actors.
            gpus_per_worker: executor "ray": GPUs per embedding actor.
            ray_timeout: executor "ray": seconds without a finished task before a stage fails.
            ray_retries: executor "ray": restarts of a dead actor and retries of a task.
            progress: Show progress bars.
            encoder: An encoder object to use instead of loading the model (for tests).
            **settings: Any other option of `tapt index add` that is a `BuildConfig` field, by
                the field's name.

        Returns:
            The record of this add (sentences and documents added, duplicates skipped);
                this object then reads the new generation.

        Raises:
            Interrupted: Ctrl-C; the embedded part is kept (`kept`, `work`) and the same call
                resumes it.
        """
        from tapt.indexer.building import build_config
        from tapt.indexer.building.add import add_to_index, check_add_inputs

        own = ("batch_size", "text_field", "doc_field", "text_docs", "input_format", "hf_split",
               "strict", "invalid_utf8", "shards", "shard_size", "executor", "restart")
        config_settings("add", build_config.BuildConfig, settings, own)
        inputs = _inputs(inputs, hf_datasets, hf_split)
        check_add_inputs(self.path, inputs)  # before the model is loaded
        # loaded (and checked) once the new inputs are scanned: their mistakes are refused first
        encoder = self._checked_encoder(encoder, model, device, backend)
        with _runner(executor, progress, ray_address=ray_address, ray_workers=ray_workers,
                     gpus_per_worker=gpus_per_worker, ray_timeout=ray_timeout,
                     ray_retries=ray_retries) as runner:
            manifest = add_to_index(self.path, inputs, encoder, batch_size=batch_size,
                                    restart=restart, progress=progress, text_field=text_field,
                                    doc_field=doc_field, text_docs=text_docs,
                                    input_format=input_format, hf_split=hf_split, strict=strict,
                                    invalid_utf8=invalid_utf8, shards=shards,
                                    shard_size=shard_size, executor=runner, **settings)
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
