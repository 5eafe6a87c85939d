"""`tapt.serve(..., http="HOST:PORT")`: a served index answering HTTP on Ray Serve.

One Serve application (`APP`) with one replica: the replica opens the index as a `ServedIndex`
(its shards held by the serving actors, as for the standard-input loop) and answers every
request through `service.SelectionService`. Serve's proxy listens on HOST:PORT on the head node.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from tapt.api.arguments import PathLike
from tapt.api.rooms import Rooms
from tapt.errors import InputError
from tapt.util.checks import renamed_keywords

log = logging.getLogger(__name__)

APP = "tapt"
# settings the replica and the actors must see as this process does
FORWARDED_ENV = ("HF_HUB_OFFLINE", "HF_HOME", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM",
                 "TAPT_CACHE")


def parse_address(http: str) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:PORT` for IPv6) as (host, port).

    Raises:
        InputError: not HOST:PORT with a port in 1..65535.
    """
    host, sep, port = str(http).rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError(f"{http!r} is not HOST:PORT (e.g. 127.0.0.1:8000)", param="http")
    return host, int(port)


class HTTPServer:
    """A served index answering HTTP at `url` (`serve(..., http=...)`); `close()` (or a `with`
    block) stops it and its actors.

    Args:
        path: The index directory (on a file system every node sees).
        host: The address Serve's proxy listens on.
        port: Its port.
        rooms: What requests may read, write and ask (`rooms.rooms`).
        serve_options: `ServedIndex`'s keywords but `path` and `ray_address`.
        ray_address: The Ray cluster (as for `serve`; `address`, its old name, is taken for
            one release with a warning).

    Raises:
        ExecutorError: Ray Serve could not start the application (the port taken, the index
            not loadable by the replica: the replica's own error in the message).
    """

    @renamed_keywords(address="ray_address")
    def __init__(self, path: PathLike, host: str, port: int, rooms: Rooms,
                 serve_options: dict[str, Any], ray_address: str | None = None) -> None:
        from tapt.indexer.building.executors.ray_executor import ExecutorError, connect, import_ray

        ray = import_ray("serving an index over HTTP", param="http")
        try:
            from ray import serve
        except ImportError as exc:
            raise InputError("needs Ray Serve: pip install 'tapt[ray]'", param="http") from exc
        self.url = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
        self._owned = connect(ray_address)
        self._serve, self._ray = serve, ray
        env = {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}
        began = time.perf_counter()
        try:
            serve.start(http_options={"host": host, "port": port,
                                      "request_timeout_s": rooms.request_timeout + 30})
            app = _deployment(serve).options(
                max_ongoing_requests=rooms.max_concurrent + 8,
                ray_actor_options={"num_cpus": 0, "runtime_env": {"env_vars": env}}
            ).bind(os.path.abspath(path), serve_options, rooms)
            serve.run(app, name=APP, route_prefix="/", blocking=False)
        except Exception as exc:  # noqa: BLE001 - one error line, Serve stopped
            self.close()
            raise ExecutorError(f"Ray Serve could not serve {path} at {self.url} "
                                f"({_first_line(exc)})", param="http") from exc
        self.start_seconds = time.perf_counter() - began
        log.info("serving %s at %s (started in %.1f s)", path, self.url, self.start_seconds)

    def wait(self) -> None:
        """Block until interrupted (Ctrl-C, SIGTERM as the command line maps it)."""
        while True:
            time.sleep(1.0)

    def close(self) -> None:
        """Stop the application, Serve, and the local Ray cluster this object started."""
        try:
            self._serve.shutdown()
        except Exception:  # noqa: BLE001 - stopping: nothing left to report to
            log.debug("serve.shutdown failed", exc_info=True)
        if self._owned and self._ray.is_initialized():
            self._ray.shutdown()
        self._owned = False

    def __enter__(self) -> "HTTPServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<tapt.HTTPServer {self.url}>"


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    tapt_lines = [line for line in lines if "Error: " in line and "tapt" in line]
    return (tapt_lines or lines or [type(exc).__name__])[-1][:400]


def _deployment(serve: Any) -> Any:
    """The Serve deployment: one replica holding the served index."""

    @serve.deployment(name="index", num_replicas=1, max_constructor_retry_count=1,
                      health_check_period_s=10, health_check_timeout_s=60)
    class IndexDeployment:
        def __init__(self, path: str, serve_options: dict[str, Any], rooms: Rooms) -> None:
            from tapt.api.served import ServedIndex
            from tapt.api.service import SelectionService

            self.service = SelectionService(ServedIndex(path, **serve_options), rooms)

        async def __call__(self, request: Any) -> Any:
            return await self.service.respond(request)

    return IndexDeployment
