"""An index whose shards Ray actors hold (`ServedIndex`, made by `tapt.serve`), and the
requests `tapt index serve` answers."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from tapt.api.arguments import PathLike
from tapt.api.index import Index
from tapt.api.serve_settings import ACTOR_SETTINGS, HTTP_SETTINGS, ServeSettings
from tapt.errors import InputError

log = logging.getLogger(__name__)


class ServedIndex(Index):
    """An index whose shards Ray actors hold in memory, for many selections (`serve`).

    `select` takes the arguments of `Index.select` and returns the same selection: sentence
    scores and FAISS searches are computed by the actors, one per shard or group of shards
    (see `tapt.retriever.serving.actors`), the rest here. Close it (or use it in a `with` block) to stop
    the actors.

    Each actor opens and verifies only its own shards (every file against the checksum in its
    shard's `shard.json`, once per version of its content), and a shard that fails stops the
    start with one error naming it; this process checks the index's headers and lengths and
    hashes its offsets and token counts, leaving the content to the actors. What only requests
    need is made ready after the start, in the background: each actor imports torch (its
    float16 and int8 scans), copies its rows into RAM and loads its FAISS parts; a request
    that comes first does (or waits for) the part it needs (`warmed` waits for all of it).

    Args:
        path: The index directory (on a file system every node of the cluster sees).
        grid: Rows per block of the scoring grid (default 65,536; smaller values spread a
            small index over the actors, with scores equal only to the last bit or so).
        **settings: The actors' settings of `ServeSettings` by name, each defaulting to the
            field's default (as `serve` takes them):
            ray_address: The Ray cluster (`address`, its old name, is taken for one release
                with a warning).
            actors: How many actors (default: one per shard).
            cpus_per_actor: CPUs Ray reserves for each actor.
            hold: What the actors hold in RAM: "rows" (the float16 embeddings) or "codes"
                (the int8 codes, half the bytes: for `scan` codes (centroid, distance,
                density, classifier, fused); other scans read the embeddings from disk or
                the page cache).
            resources: Ray custom resources each actor needs (e.g. {"index-node": 1} to place
                them only on the nodes that offer it).
            request_timeout: Seconds one call to the actors may take (None: as long as it
                takes); past it the selection fails (`serving.actors.Unavailable`) and
                `heal` replaces the actors that do not answer.

    Raises:
        InputError: a keyword that is none of these settings.
    """

    def __init__(self, path: PathLike, *, grid: int | None = None, **settings: Any) -> None:
        from tapt.api.options import config_settings
        from tapt.indexer.store import integrity

        given = ServeSettings(**config_settings("serve", ServeSettings, settings, HTTP_SETTINGS))
        # this process checks every header and length and hashes the offsets and token
        # counts; the content of every shard is verified by the actor that serves it, before
        # this returns (`ShardServers`)
        with integrity.hashing(0, False):
            super().__init__(path)
        self._serve_options = {**{name: getattr(given, name) for name in ACTOR_SETTINGS},
                               "grid": grid}
        self.servers = self._start(**self._serve_options)

    def _start(self, ray_address, actors, cpus_per_actor, grid, hold, resources,
               request_timeout):
        from tapt.retriever.serving.actors import GRID, ShardServers

        servers = ShardServers(self, ray_address, actors, cpus_per_actor, grid or GRID,
                               hold=hold, resources=resources, request_timeout=request_timeout)
        self.__dict__["faiss"] = servers.faiss(self)
        return servers

    def select(self, *args, **kwargs):
        """`Index.select`, refused once the served index is closed (before any work)."""
        self.servers.check_open()
        return super().select(*args, **kwargs)

    def top_cut(self, scorer, view, cut, on: str = "rows"):
        """A budget's cut of the segments ranked by a row scorer's mean sentence scores, made
        by the actors (`ShardServers.top`): what `SentenceScored.budget_candidates` computes in
        one process, for every method that streams a cut, nested ones (iforest's pre-ranking)
        included."""
        return self.servers.top(scorer, view, cut, on)

    def search(self, queries, k: int, nprobe: int | None = None,
               ef_search: int | None = None):
        """`Index.search`, each actor searching its parts and rescoring its candidates from
        its own rows (`ShardServers.search`): the same neighbours, no row read here."""
        return self.servers.search(queries, k, self.manifest.get("faiss", {}),
                                   self.n_sentences, self.dim, nprobe, ef_search)

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
        from tapt.indexer.store import integrity

        with integrity.hashing(0, False):       # as on open: the actors verify the shards
            super()._reopen()
        options = self._serve_options
        self.servers.close()
        self.servers = self._start(**options)

    def warmed(self, timeout: float | None = None) -> list[dict[str, float]]:
        """Wait until every actor has made ready what only requests need (torch imported, rows
        copied into RAM, FAISS parts loaded), which they begin when the start ends.

        Args:
            timeout: Seconds each actor waits at most (None: as long as it takes).

        Returns:
            Per actor, the seconds each step took ("torch", "held", "parts").
        """
        return self.servers.warmed(timeout)

    def heal(self, timeout: float = 10.0) -> list[str]:
        """Ask every actor whether it answers; replace each dead or hung one by a new actor
        on the same shards (later calls wait for it to load them).

        Args:
            timeout: Seconds an actor may take to answer.

        Returns:
            Per actor, "ok", or "dead" or "hung" (now replaced).
        """
        return self.servers.heal(timeout)

    def actor_reports(self) -> list[dict[str, Any]]:
        """What each actor opened when it started, in actor order: its shards (`shards`, by
        name), the shards whose files it compared with their checksums (`verified`: its own
        only), the shards past its own whose rows its scoring grid reaches (`reached`: mapped,
        headers checked, content verified by their own actor), its rows, its start's seconds,
        when it began (`began_at`), its process's age then (`process_s`: the Ray worker's own
        start) and the CPU seconds of its process before and during its start.

        Returns:
            One dict per actor.
        """
        return [dict(r) for r in self.servers.reports]

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


REQUEST_KEYS = ("id", "method", "task", "budget", "params", "segment_size", "seed", "out",
                "overwrite", "explain")
REQUEST_DEPTH = 64      # nesting of a request's arrays and objects
REQUEST_BYTES = 32 << 20    # one request line at most (a task's sentences inline included)
STDOUT = "-"            # "out": the selection's lines in the answer, as `tapt select --out -`
# `Index.select` keywords a request's `params` may hold besides the method's own parameters
PARAMS_OF_SELECT = ("context",)


def answer_stream(served: Index, stream: Any, limit: int = REQUEST_BYTES) -> Any:
    """Answer every request of a binary stream, one per line (`tapt index serve`): lines end
    at a line feed only (a bare carriage return inside one is JSON whitespace, never a line
    end), blank lines are skipped, and a line that is not UTF-8 or longer than `limit` bytes
    is answered with an error like any other bad request, and the next one is read.

    Args:
        served: The index.
        stream: A binary stream (`sys.stdin.buffer`, a file opened "rb").
        limit: Most bytes of one request line.

    Yields:
        Each request's answer, as `answer_request` returns it.
    """
    while True:
        line = stream.readline(limit + 1)
        if not line:
            return
        if len(line) > limit and not line.endswith(b"\n"):
            while line and not line.endswith(b"\n"):      # the rest of the line is dropped
                line = stream.readline(1 << 20)
            yield {"id": None, "error": f"request: longer than {limit:,} bytes; give a long "
                                        "task as a file's path"}
            continue
        if line.strip():
            yield answer_request(served, line)


def answer_request(served: Index, request: dict[str, Any] | str | bytes) -> dict[str, Any]:
    """Answer one selection request (`tapt index serve` reads them line by line).

    Args:
        served: The index (a `ServedIndex`, or any `Index`).
        request: A JSON object (or its text, or that text's UTF-8 bytes) with `method`, `task`
            (a task file's path or URL, a list of them under "files", or a list of sentences;
            paths are used as written: no `~` or `$VARIABLE` is expanded), `budget`, and
            optionally `params`
            (the method's parameters), `segment_size`, `seed`, `out` (write the selection file
            there; "-": return its lines in the answer, as `tapt select --out -` writes them
            to standard output), `overwrite`, `explain` (why each segment was picked, in
            its line; the manifest's `explain` in the answer) and `id` (a string, a number or
            null, echoed).
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
    that is not finite anywhere (its answer could echo it, and JSON has no spelling for it), or
    a string or key with a lone surrogate (`"\\ud800"`: JSON can spell one, UTF-8 cannot, so
    no path, file or answer could carry it)."""
    stack: list[tuple[Any, str, int]] = [(request, "", 0)]
    while stack:
        value, where, depth = stack.pop()
        if depth > REQUEST_DEPTH:
            raise InputError(f"nested more than {REQUEST_DEPTH} deep", param="request")
        if isinstance(value, (float, np.floating)) and not np.isfinite(value):
            raise InputError(f"{_shown(value)} is not a finite number (JSON has none)",
                             param=where or "request")
        for text in (value, *value) if isinstance(value, dict) else (value,):
            if isinstance(text, str) and not _utf8(text):
                raise InputError("holds a lone surrogate (a \\ud800-\\udfff escape alone), "
                                 "which UTF-8 cannot carry", param=where or "request")
        if isinstance(value, dict):
            stack += [(v, f"{where}.{k}" if where else str(k), depth + 1)
                      for k, v in value.items()]
        elif isinstance(value, (list, tuple)):
            stack += [(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value)]


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _literal_path(value: str, param: str) -> str:
    """A path of a request, used as written: a shell's `~` or `$VARIABLE` is refused rather
    than taken as a folder named `~` (or `$HOME`) under the server's working directory, and
    never expanded with the server's own environment."""
    from tapt.util.checks import path_text

    path_text(value, param)
    if value.startswith("~") or "$" in value:
        raise InputError(f"{value!r}: a request's paths are used as written, never expanded "
                         "as a shell would (no ~, no $VARIABLE): give the path itself",
                         param=param)
    return value


def _request_params(params: Any) -> dict[str, Any]:
    """The request's `params`: the method's parameters (and PARAMS_OF_SELECT), never a key
    of the request itself nor another keyword of `Index.select`."""
    from tapt.retriever.selections.make import SELECT_KEYWORDS

    if not isinstance(params, dict):
        raise InputError("must be a JSON object of the method's parameters", param="params")
    keywords = {"method", *SELECT_KEYWORDS}     # every keyword of `Index.select` but params
    for key in params:
        if key in REQUEST_KEYS:
            raise InputError(f"{key} is a key of the request, not a method parameter: give it "
                             "beside params", param=f"params.{key}")
        if key in keywords and key not in PARAMS_OF_SELECT:
            raise InputError(f"{key} is not a parameter a request sets (the server's own "
                             "setting)", param=f"params.{key}")
    return params


def _answer_request(served: Index, request: dict[str, Any] | str | bytes) -> dict[str, Any]:
    """`answer_request` before its answer is checked to be strict JSON."""
    import json
    import time

    from tapt.errors import TaptError

    start = time.perf_counter()
    rid = None
    try:
        if isinstance(request, (bytes, bytearray)):
            try:
                request = bytes(request).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(f"not valid UTF-8 (byte {exc.start + 1}); send requests as "
                                 "UTF-8 JSON", param="request") from None
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
        if isinstance(task, str):           # a path or URL, read as `tapt select --task` reads it
            task = {"files": [_literal_path(task, "task")]}
        elif isinstance(task, dict):
            files = task.get("files")
            if set(task) != {"files"} or not isinstance(files, list) or not files or not all(
                    isinstance(p, str) for p in files):
                raise InputError('a task object is {"files": [paths, ...]}', param="task")
            task = {"files": [_literal_path(p, "task") for p in files]}
        elif task is not None and not (isinstance(task, list) and task
                                       and all(isinstance(t, str) for t in task)):
            raise InputError("a task file's path, {\"files\": [paths]}, or a list of "
                             "sentences", param="task")
        params = _request_params(request.get("params") or {})
        out = request.get("out")
        if out is not None and not isinstance(out, str):
            raise InputError("must be a path (a string)", param="out")
        if out is not None and out != STDOUT:
            _literal_path(out, "out")
        overwrite, explain = request.get("overwrite", False), request.get("explain", False)
        for name, flag in (("overwrite", overwrite), ("explain", explain)):
            if not isinstance(flag, bool):
                raise InputError("must be true or false", param=name)
        selection = served.select(request["method"], task, request.get("budget"),
                                  segment_size=request.get("segment_size"),
                                  seed=request.get("seed", 0), explain=explain, **params)
        lines = None
        if out == STDOUT:
            lines = [segment.to_dict() for segment in selection.segments]
        elif out is not None:
            out = str(selection.write(out, overwrite=overwrite))
        answer = {"id": rid, "method": selection.method, "segments": len(selection),
                  "sentences": selection.counts["sentences"],
                  "ids": [int(i) for i in selection.ids], "out": out,
                  "seconds": round(time.perf_counter() - start, 3),
                  **({"explain": selection.manifest.get("explain")} if explain else {})}
        return answer if lines is None else {**answer, "selection": lines}
    except TaptError as exc:
        return {"id": rid, "error": str(exc)}
    except OSError as exc:  # a task or output path the system refuses
        return {"id": rid, "error": f"{exc.strerror or exc}: {exc.filename or ''}".rstrip(": ")}
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        # a value of a type no check above foresaw: this request fails, the server goes on
        log.debug("request %r failed", rid, exc_info=True)
        return {"id": rid, "error": f"request: cannot be answered ({type(exc).__name__}: {exc})"}
