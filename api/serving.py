"""`tapt.serve`: an index's shards held by Ray actors, answering selections in this process
or HTTP requests on Ray Serve (`tapt index serve`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tapt.api.arguments import PathLike
from tapt.api.index import Index
from tapt.api.serve_settings import ACTOR_SETTINGS, HTTP_SETTINGS, ServeSettings
from tapt.api.served import ServedIndex
from tapt.errors import InputError

if TYPE_CHECKING:
    from tapt.api.http_serve import HTTPServer

def serve(path: PathLike, **settings: Any) -> "ServedIndex | HTTPServer":
    """Load an index's shards into Ray actors and return a handle that selects from them
    (`tapt index serve`); with `http`, answer HTTP requests from them on Ray Serve (`tapt
    index serve --http`). Needs Ray (`pip install 'tapt[ray]'`).

    Args:
        path: The index directory (on a file system every node of the cluster sees).
        **settings: `ServeSettings`' fields by name, each defaulting to the field's default
            (the options of `tapt index serve`, `-` for `_`): ray_address (`address`, its old
            name, is taken for one release with a warning), actors, cpus_per_actor, hold,
            resources, http, token_file, no_auth, task_root, out_root, max_body, max_task,
            max_budget, max_concurrent, request_timeout.

    Returns:
        A `ServedIndex`: `.select(method, task, budget, **params)` as `Index.select`,
            `.close()` when done; with `http` an `HTTPServer` (`.url`, `.close()`).

    Raises:
        InputError: Ray is not installed, or a setting cannot work (`no_auth` off loopback,
            no token, a root that is no folder), or an unknown keyword.
        IndexFormatError: the index is damaged, or the actors see another generation of it.
        ExecutorError: with `http`, Ray Serve could not start (the port taken).

    Examples:
        >>> with tapt.serve(idx, actors=1) as served:        # doctest: +SKIP
        ...     sel = served.select("centroid", task=["A rash on both arms."], budget="50sent")
    """
    from tapt.api.options import config_settings

    s = ServeSettings(**config_settings("serve", ServeSettings, settings, ()))
    if s.http is None:
        given = [name for name in HTTP_SETTINGS
                 if getattr(s, name) is not None and getattr(s, name) is not False]
        if given:
            raise InputError("only applies with `http`", param=given[0])
        return ServedIndex(path, **{name: getattr(s, name) for name in ACTOR_SETTINGS})
    from tapt.api.http_serve import HTTPServer, parse_address
    from tapt.api.rooms import rooms

    limits = {"max_body": s.max_body, "max_task": s.max_task, "max_budget": s.max_budget,
              "max_concurrent": s.max_concurrent, "request_timeout": s.request_timeout}
    host, port = parse_address(s.http)
    bounds = rooms(host, token_file=s.token_file, no_auth=s.no_auth, task_root=s.task_root,
                   out_root=s.out_root, **limits)
    from tapt.indexer.store import integrity

    with integrity.hashing(0, False):      # a damaged index stops here, before Ray starts
        Index(path)
    options = {name: getattr(s, name) for name in ACTOR_SETTINGS if name != "ray_address"}
    # a call to the actors gets half the request's time: a hung actor fails the request with
    # the actors' own error, and is replaced, within the request's time
    options["request_timeout"] = bounds.request_timeout / 2
    return HTTPServer(path, host, port, bounds, options, ray_address=s.ray_address)
