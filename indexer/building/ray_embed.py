"""The embed stage's steps on a Ray cluster (run by `ray_executor.RayExecutor`): Ray Data
operators over one row per part, with the part's pickled `EmbedTask` in `task` and a pickled
`payload` that changes from step to step:

    tokenize (CPU tasks)   ("done", record) | ("texts", texts) | ("tokens", Pretokenized)
    model (actor pool)     ("done", record) | ("embedded", (embeddings, counts, seconds, dim, max))
    save (CPU tasks)       -> the part's completion record (JSON), in `record`

Reading a part's texts, tokenising them (the encoder's own tokenisation,
`encoding.batching.Tokenizing`: length-sorted, the same token ids) and writing its files run on
CPUs apart from the model, whose actors run the forward pass only; every part keeps its own
rows in order and is written by the same `stages.save_part` as in one process, so the files are
the same bytes.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable

from tapt.errors import InputError
from tapt.indexer.building.executor_base import EncoderSource


def granted_cpus() -> int:
    """The CPUs this Ray task was granted (its assigned resources), else the cores this process
    may run on; at least 1."""
    try:
        import ray

        cpus = float(ray.get_runtime_context().get_assigned_resources().get("CPU", 0))
    except Exception:  # noqa: BLE001 - not in a Ray task (or another Ray): the affinity decides
        cpus = 0.0
    if cpus < 1:
        try:
            cpus = float(len(os.sched_getaffinity(0)))
        except (AttributeError, OSError):     # pragma: no cover - no affinity on this platform
            cpus = float(os.cpu_count() or 1)
    return max(1, int(cpus))


_TOKENIZING: dict[str, Any] = {}    # per worker process: the stage's tokenisation, loaded once


def tokenize_parts(batch: dict[str, Any], steps: tuple, tokenizing: bytes, key: str
                   ) -> dict[str, Any]:
    """Ray Data task: each part's texts read from its shard's text store and tokenised by the
    encoder's own tokenisation (or passed on as texts, for an encoder that tokenises itself);
    a part already done passes its record on.

    Args:
        batch: Rows `i` (the place of the row's first part) and `task` (its parts' pickled
            `EmbedTask`s: a group of consecutive parts, one Ray Data row, so the driver's
            scheduling does not grow with the parts).
        steps: The stage function's `steps`: (part_done, part_texts, save_part).
        tokenizing: The pickled `batching.Tokenizing`, or pickled None.
        key: Names this stage's tokenisation: unpickled once per worker process.

    Returns:
        One row per part (`i`, its own pickled `task`, its `payload`): the next steps see
        parts, in one block per group.
    """
    import pickle

    from ray import cloudpickle

    if key not in _TOKENIZING:
        _TOKENIZING.clear()
        _TOKENIZING[key] = cloudpickle.loads(tokenizing)
    tokenize, (done_of, texts_of, _) = _TOKENIZING[key], steps
    places, blobs, payloads = [], [], []
    for first, blob in zip(batch["i"], batch["task"]):
        for k, task in enumerate(cloudpickle.loads(bytes(blob))):
            done = done_of(task)
            if done is not None:
                payload: tuple = ("done", done)
            elif tokenize is None:
                payload = ("texts", texts_of(task))
            else:
                payload = ("tokens", tokenize(texts_of(task), threads=granted_cpus()))
            places.append(int(first) + k)
            blobs.append(cloudpickle.dumps(task))
            payloads.append(pickle.dumps(payload, protocol=5))
    return {"i": places, "task": blobs, "payload": payloads}


class ModelActor:
    """One actor of the embed pool: the model loaded once; per part the forward pass only
    (`encode_tokens` of pre-tokenised texts), or, for an encoder that tokenises itself,
    `encode_counted` of its texts. Without a `payload` column (a stage not split into steps)
    it runs the stage's function, `fn(task, encoder)`, whole.

    Args:
        fn: The stage's function.
        source: Where the actor loads its model from (`ray_executor.worker_source`).
    """

    def __init__(self, fn: Callable[..., Any], source: EncoderSource) -> None:
        self.fn = fn
        self.encoder = source.get()

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        import pickle
        import time

        from ray import cloudpickle

        from tapt.indexer.encoding.encoder import encode_counted, preferred_batch_size

        if "payload" not in batch:
            return {"i": batch["i"], "record": [
                json.dumps(self.fn(cloudpickle.loads(bytes(blob)), self.encoder))
                for blob in batch["task"]]}
        enc, out = self.encoder, []
        for blob, payload in zip(batch["task"], batch["payload"]):
            kind, value = pickle.loads(bytes(payload))
            if kind != "done":
                task = cloudpickle.loads(bytes(blob))
                size = task.batch_size or preferred_batch_size(enc)
                t0 = time.perf_counter()
                if kind == "texts":
                    embeddings, counts = encode_counted(enc, value, batch_size=size)
                elif hasattr(enc, "encode_tokens"):
                    embeddings, counts = enc.encode_tokens(value, batch_size=size)
                else:
                    raise InputError(f"the encoder {type(enc).__name__} on this Ray worker "
                                     "cannot embed pre-tokenised texts", param="executor")
                value = (embeddings, counts, time.perf_counter() - t0, enc.dim, enc.max_length)
                payload = pickle.dumps(("embedded", value), protocol=5)
            out.append(payload)
        return {"i": batch["i"], "task": batch["task"], "payload": out}


def save_parts(batch: dict[str, Any], steps: tuple) -> dict[str, Any]:
    """Ray Data task: each embedded part's files and completion record written (`save_part`).

    Args:
        batch: Rows `i`, `task` and the model's `payload`.
        steps: The stage function's `steps`: (part_done, part_texts, save_part).

    Returns:
        Rows `i` and `record` (the part's completion record as JSON).
    """
    import pickle

    from ray import cloudpickle

    records = []
    for blob, payload in zip(batch["task"], batch["payload"]):
        kind, value = pickle.loads(bytes(payload))
        if kind != "done":
            value = steps[2](cloudpickle.loads(bytes(blob)), *value)
        records.append(json.dumps(value))
    return {"i": batch["i"], "record": records}
