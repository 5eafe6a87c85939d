"""`tapt.serve`: an index's shards held by Ray actors, answering selections in this process
or HTTP requests on Ray Serve (`tapt index serve`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tapt.api.arguments import PathLike
from tapt.api.index import Index
from tapt.api.served import ServedIndex
from tapt.errors import InputError

if TYPE_CHECKING:
    from tapt.api.http_serve import HTTPServer


def serve(path: PathLike, *, address: str | None = None, actors: int | None = None,
          cpus_per_actor: float = 1.0, hold: str = "rows",
          resources: dict[str, float] | None = None, http: str | None = None,
          token_file: PathLike | None = None, no_auth: bool = False,
          task_root: PathLike | None = None, out_root: PathLike | None = None,
          max_body: int | None = None, max_task: int | None = None,
          max_budget: int | None = None, max_concurrent: int | None = None,
          request_timeout: float | None = None) -> "ServedIndex | HTTPServer":
    """Load an index's shards into Ray actors and return a handle that selects from them
    (`tapt index serve`); with `http`, answer HTTP requests from them on Ray Serve (`tapt
    index serve --http`). Needs Ray (`pip install 'tapt[ray]'`).

    Args:
        path: The index directory (on a file system every node of the cluster sees).
        address: The Ray cluster: "auto", "HOST:PORT" (default: the one this process is
            connected to, else RAY_ADDRESS, else a local cluster started here).
        actors: How many actors, each holding consecutive shards (default: one per shard).
        cpus_per_actor: CPUs Ray reserves for each actor.
        hold: What the actors hold in RAM: "rows" (float16 embeddings) or "codes" (int8
            codes, half the RAM; see `ServedIndex`).
        resources: Ray custom resources each actor needs (see `ServedIndex`).
        http: "HOST:PORT": serve `POST /select` (the request object of the standard-input
            loop), `GET /health`, `GET /index`, `GET /openapi.json` and the page at `/` there
            (`service.SelectionService`), on Ray Serve.
        token_file: With `http`: a file holding the bearer token every request must carry
            (never on a command line).
        no_auth: With `http` on a loopback address only: no token.
        task_root: With `http`: the folder requests may name task files in (default: none,
            tasks only as sentences).
        out_root: With `http`: the folder requests may write selections to (default: none).
        max_body: With `http`: bytes of a request body (default `rooms.LIMITS`).
        max_task: With `http`: task sentences of a request.
        max_budget: With `http`: sentences a request's budget may reach.
        max_concurrent: With `http`: requests in flight (more are answered 429).
        request_timeout: Seconds a request may take (`http`: waiting included; answered
            503 past it); also each call to the actors (without `http`: None, no bound).

    Returns:
        A `ServedIndex`: `.select(method, task, budget, **params)` as `Index.select`,
            `.close()` when done; with `http` an `HTTPServer` (`.url`, `.close()`).

    Raises:
        InputError: Ray is not installed, or a setting cannot work (`no_auth` off loopback,
            no token, a root that is no folder).
        IndexFormatError: the index is damaged, or the actors see another generation of it.
        ExecutorError: with `http`, Ray Serve could not start (the port taken).

    Examples:
        >>> with tapt.serve(idx, actors=1) as served:        # doctest: +SKIP
        ...     sel = served.select("centroid", task=["A rash on both arms."], budget="50sent")
    """
    limits = {"max_body": max_body, "max_task": max_task, "max_budget": max_budget,
              "max_concurrent": max_concurrent, "request_timeout": request_timeout}
    http_only = {"token_file": token_file, "no_auth": no_auth or None, "task_root": task_root,
                 "out_root": out_root, **{k: v for k, v in limits.items()
                                          if k != "request_timeout"}}
    if http is None:
        given = [name for name, value in http_only.items() if value is not None]
        if given:
            raise InputError("only applies with `http`", param=given[0])
        return ServedIndex(path, address=address, actors=actors,
                           cpus_per_actor=cpus_per_actor, hold=hold, resources=resources,
                           request_timeout=request_timeout)
    from tapt.api.http_serve import HTTPServer, parse_address
    from tapt.api.rooms import rooms

    host, port = parse_address(http)
    bounds = rooms(host, token_file=token_file, no_auth=no_auth, task_root=task_root,
                   out_root=out_root, **limits)
    from tapt.indexer.store import integrity

    with integrity.hashing(0, False):      # a damaged index stops here, before Ray starts
        Index(path)
    options = {"actors": actors, "cpus_per_actor": cpus_per_actor, "hold": hold,
               # a call to the actors gets half the request's time: a hung actor fails the
               # request with the actors' own error, and is replaced, within the request's time
               "resources": resources, "request_timeout": bounds.request_timeout / 2}
    return HTTPServer(path, host, port, bounds, options, address=address)
