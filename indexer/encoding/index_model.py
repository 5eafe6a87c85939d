"""The model an index was built with, as the index checks and loads it: `IndexModel`, the part of
`tapt.indexer.index.Index` that refuses another model (by its fingerprint, or its files before
a load) and loads the index's own, eagerly or on first use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tapt.errors import InputError, ModelMismatchError
from tapt.indexer.encoding.encoder import Encoder, LazyEncoder, model_differences
from tapt.util.checks import path_text


class IndexModel:
    """What `Index` knows of its model; it reads only `manifest`, `path` and `dim`."""

    manifest: dict[str, Any]
    path: Path
    dim: int

    def check_encoder(self, encoder: Encoder) -> None:
        """Refuse a model other than the one the index was built with: its full fingerprint
        (weights, module configs, tokenizer, maximum length) must match the manifest's."""
        model = self.manifest["model"]
        diffs = model_differences(model, encoder)
        if diffs:
            raise ModelMismatchError(
                f"model {encoder.name} is not the model index {self.path} was built with "
                f"({model['name']}): it has {'; '.join(diffs)}")

    def load_encoder(self, model: str | None = None, device: str = "auto",
                     backend: str = "auto") -> Encoder:
        """The index's own model (or `model`, which must have the same weights), checked.

        `backend="auto"` embeds with the backend the index was built with (the same embedding
        function for corpus and task) where the device allows it, else the device's default.
        """
        from tapt.indexer.encoding.encoder import file_differences, load_encoder
        from tapt.indexer.encoding.models import display_name, file_facts

        recorded = self.manifest["model"]
        spec = model if model is not None else (recorded.get("source") or recorded["name"])
        if model is not None:
            self._refuse_missing_model(model)   # the index's own: load_encoder refuses it
        backend = self._task_backend(device, backend)
        diffs = file_differences(recorded, file_facts(spec))    # seconds before a load would
        if diffs:
            raise ModelMismatchError(
                f"model {display_name(spec)} is not the model index {self.path} was built with "
                f"({recorded['name']}): it has {'; '.join(diffs)}")
        try:
            encoder = load_encoder(spec, device=device, backend=backend,
                                   check=self.check_encoder)
        except InputError as exc:
            raise ModelMismatchError(
                f"{exc.message}; index {self.path} was built with {recorded['name']}: pass "
                "`model` with its directory"
            ) from exc
        self.check_encoder(encoder)
        return encoder

    def _refuse_missing_model(self, spec: str | None) -> None:
        """Refuse a model argument that names no model (an empty one, a folder that is not
        there: `models.missing_model`) before anything is loaded or read from a cache."""
        from tapt.indexer.encoding.models import missing_model

        if spec is not None:
            path_text(spec, "model")
        missing = missing_model(spec)
        if missing:
            raise ModelMismatchError(f"{missing}; index {self.path} was built with "
                                     f"{self.manifest['model']['name']}: pass `model` with its "
                                     "directory")

    def _task_backend(self, device: str, backend: str) -> str:
        """`load_encoder`'s backend before `resolve_backend`: `auto` is the index's own."""
        from tapt.indexer.encoding.encoder import pick_device

        if backend != "auto":
            return backend
        built = self.manifest.get("build", {}).get("backend", "torch")
        on_cuda = pick_device(device).startswith("cuda")
        return "auto" if on_cuda and built.startswith("onnx") else built

    def check_add_backend(self, device: str, backend: str) -> None:
        """Refuse an add whose backend would embed its rows at another precision than the
        index's (int8 weights against float ones: rows a few percent apart in one index).

        Raises:
            InputError: one side is onnx-int8 and the other is not.
        """
        from tapt.errors import InputError

        built = self.manifest.get("build", {}).get("backend", "torch")
        wanted = self._task_backend(device if built == "onnx-int8" else "cpu", backend)
        if wanted == "auto":        # an int8 index's own backend, on CUDA: torch there
            wanted = "torch"
        if (wanted == "onnx-int8") != (built == "onnx-int8"):
            raise InputError(f"this index's sentences were embedded with the {built} backend; "
                             f"rows embedded with {wanted} differ from them by a few percent, "
                             "and one index holds rows of one kind: leave `backend` out"
                             + (" and add on the CPU (`device` cpu)" if built == "onnx-int8"
                                else ""), param="backend")

    def lazy_encoder(self, model: str | None = None, device: str = "auto",
                     backend: str = "auto", encoder: Encoder | None = None) -> LazyEncoder:
        """The encoder `load_encoder` would return, loaded only when it is first used.

        With the index's own model (`model` None) in a local directory, its cache key comes
        from the manifest's fingerprint, so a task embedded before is served without loading
        the model (those embeddings were made by a model with this index's fingerprint) while
        the model directory's files are unchanged; any change loads and checks it again.

        Args:
            model: As for `load_encoder`.
            device: As for `load_encoder`.
            backend: As for `load_encoder`.
            encoder: An encoder object to use instead (checked now).

        Returns:
            The lazy encoder.
        """
        from tapt.indexer.encoding.encoder import embedding_key_of, pick_device, resolve_backend
        from tapt.indexer.encoding.models import model_files_stamp

        if encoder is not None:
            self.check_encoder(encoder)
            return LazyEncoder.of(encoder)
        if model is not None:
            self._refuse_missing_model(model)       # given: refused now, not on first use
        recorded = self.manifest["model"]
        key = stamp = None
        if model is None and recorded.get("fingerprint"):
            resolved = resolve_backend(self._task_backend(device, backend), pick_device(device))
            key = embedding_key_of(recorded["fingerprint"], resolved)
            stamp = model_files_stamp(recorded.get("source") or recorded["name"])
        return LazyEncoder(key, self.dim, lambda: self.load_encoder(model, device, backend),
                           stamp)
