"""The HTTP answers of a served index (`tapt index serve --http`, `tapt.serve(..., http=...)`).

`SelectionService` answers every request of the API and the page (`ROUTES`) from one index;
`http_serve.HTTPServer` runs it as a Ray Serve deployment over the index's serving actors.
Selections run one at a time (the actors spread each over the shards); the other requests in
flight wait their turn, up to the request timeout. Rooms and bounds: `rooms`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from importlib import resources
from typing import Any

from tapt.api.index import Index
from tapt.api.rooms import Refused, Rooms, checked, inside
from tapt.api.served import answer_line, answer_request
from tapt.util.progress import deadline

log = logging.getLogger(__name__)

PAGE_FILES = {"/": ("index.html", "text/html; charset=utf-8"),
              "/page.js": ("page.js", "text/javascript; charset=utf-8"),
              "/page.css": ("page.css", "text/css; charset=utf-8")}
# (method, path) -> (handler name, needs the token)
ROUTES = {("POST", "/select"): ("select", True), ("GET", "/health"): ("health", False),
          ("GET", "/index"): ("summary", True), ("GET", "/context"): ("context", True),
          ("GET", "/openapi.json"): ("openapi", False)}
CONTEXT_AROUND = 10         # sentences either side of a segment, at most
HEADERS = {"cache-control": "no-store", "x-content-type-options": "nosniff"}


# a selection's manifest is small; a larger file of that name is served as it is
MAX_MANIFEST = 16 << 20


class SelectionService:
    """Answers HTTP requests for one index.

    Args:
        index: The index (a `ServedIndex` on Ray Serve; any `Index` where one process serves).
        rooms: What requests may read, write and ask (`rooms.rooms`).
    """

    def __init__(self, index: Index, rooms: Rooms) -> None:
        self.index, self.rooms = index, rooms
        self._turn = threading.Lock()           # one selection at a time
        self._in_flight = 0
        self.failures = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """The service as an ASGI application, for any ASGI server where one process serves
        (`uvicorn.run(SelectionService(tapt.Index.open(idx), rooms), ...)`)."""
        from starlette.requests import Request

        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                kind = message["type"].rsplit(".", 1)[-1]
                await send({"type": f"lifespan.{kind}.complete"})
                if kind == "shutdown":
                    return
        if scope["type"] == "http":
            response = await self.respond(Request(scope, receive))
            await response(scope, receive, send)

    async def respond(self, request: Any) -> Any:
        """A Starlette request's response (what the Serve deployment and the page's tests
        call)."""
        from starlette.responses import Response

        method, path = request.method, request.url.path
        try:
            if method == "GET" and path in PAGE_FILES:
                name, kind = PAGE_FILES[path]
                page = resources.files("tapt.api").joinpath("page", name).read_bytes()
                return Response(page, 200, {**HEADERS, "content-security-policy":
                                            "default-src 'self'; style-src 'self'"}, kind)
            if method == "GET" and path.startswith("/files/"):
                return self._file(request, path[len("/files/"):])
            if (method, path) not in ROUTES:
                known = {p for _, p in ROUTES} | set(PAGE_FILES)
                raise Refused(405 if path in known else 404,
                              f"{method} {path}: not an endpoint (see /openapi.json)")
            name, needs_token = ROUTES[(method, path)]
            if needs_token and not self.rooms.allows(request.headers.get("authorization")):
                raise Refused(401, "a bearer token is required (Authorization: Bearer TOKEN)")
            status, body = await getattr(self, "_" + name)(request)
        except Refused as exc:
            status, body = exc.status, {"error": str(exc)}
        except Exception:  # noqa: BLE001 - this request fails in one line, the server goes on
            log.exception("%s %s failed", method, path)
            status, body = 500, {"error": "the server failed on this request (its log says "
                                          "why)"}
        extra = {"www-authenticate": "Bearer"} if status == 401 else {}
        if status == 429:
            extra["retry-after"] = "1"
        return Response(answer_line(body) + "\n", status, {**HEADERS, **extra},
                        "application/json")

    async def _body(self, request: Any) -> Any:
        """The body as JSON, read no further than `max_body` bytes."""
        limit = self.rooms.max_body
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            raise Refused(413, f"request: a body of at most {limit:,} bytes")
        data = bytearray()

        async def read() -> None:
            async for chunk in request.stream():
                data.extend(chunk)
                if len(data) > limit:
                    raise Refused(413, f"request: a body of at most {limit:,} bytes")

        wait = self.rooms.request_timeout
        try:           # a client that sends its body slowly holds a request's place
            await asyncio.wait_for(read(), wait)
        except asyncio.TimeoutError:
            raise Refused(408, f"request: the body did not arrive within {wait:g} s") from None
        try:
            return json.loads(bytes(data).decode("utf-8"))
        except (ValueError, RecursionError) as exc:
            raise Refused(400, f"request: not a JSON object ({type(exc).__name__})") from None

    async def _select(self, request: Any) -> tuple[int, dict[str, Any]]:
        if self._in_flight >= self.rooms.max_concurrent:
            raise Refused(429, f"busy: {self.rooms.max_concurrent} requests in flight, the "
                               "most this server takes; try again")
        self._in_flight += 1
        try:
            body = await self._body(request)
            order, relative = checked(body, self.index.n_sentences, self.index.segment_size,
                                      self.rooms)
            begun = time.monotonic()
            work = asyncio.get_running_loop().run_in_executor(None, self._answer, order,
                                                              begun)
            limit = self.rooms.request_timeout
            try:
                answer = await asyncio.wait_for(asyncio.shield(work), limit)
            except asyncio.TimeoutError:
                raise Refused(503, f"the selection did not finish within {limit:g} s (the "
                                   "server goes on)") from None
        finally:
            self._in_flight -= 1
        if "error" in answer:
            answer["error"] = self._without_server_paths(str(answer["error"]))
            return answer.pop("status", 400), answer
        if relative is not None:
            answer["out"] = relative
            answer["download"] = f"/files/{relative}"
        return 200, answer

    def _without_server_paths(self, message: str) -> str:
        """An error's words with the server's own folders left out: a path under a room as
        the client names it (relative to the room), the index as "the served index"."""
        places = []
        for root in (self.rooms.task_root, self.rooms.out_root):
            if root is not None:
                places += [(f"{root}{os.sep}", ""), (str(root), ".")]
        path = getattr(self.index, "path", None)
        if path is not None:
            places += [(os.path.realpath(path), "the served index"),
                       (str(path), "the served index")]
        for where, shown in sorted(places, key=lambda p: -len(p[0])):
            message = message.replace(where, shown)
        return message

    def _answer(self, order: dict[str, Any], begun: float) -> dict[str, Any]:
        """One selection, in its turn (a worker thread)."""
        left = self.rooms.request_timeout - (time.monotonic() - begun)
        if not self._turn.acquire(timeout=max(0.0, left)):
            return {"id": order.get("id"), "status": 503,
                    "error": "busy: the selections before this one took the request's time"}
        try:
            watch = _Watch(self.index)
            with deadline(self.rooms.request_timeout - (time.monotonic() - begun)):
                answer = answer_request(watch, order)     # stops at a step past its time
            if "error" in answer and time.monotonic() - begun >= self.rooms.request_timeout:
                answer["status"] = 503
            if watch.unavailable:       # this request fails; the next finds the actors healed
                self.failures += 1
                answer["status"] = 503
                self._heal()
            return answer
        finally:
            self._turn.release()

    def _heal(self) -> list[str] | None:
        heal = getattr(self.index, "heal", None)
        try:
            return heal(min(10.0, self.rooms.request_timeout / 4)) if heal is not None else None
        except Exception:  # noqa: BLE001 - the health check says so; the server goes on
            log.warning("healing the serving actors failed", exc_info=True)
            return None

    async def _health(self, request: Any) -> tuple[int, dict[str, Any]]:
        actors = len(getattr(getattr(self.index, "servers", None), "actors", []))
        body: dict[str, Any] = {"status": "ok", "actors": actors,
                                "in_flight": self._in_flight}
        if self._turn.acquire(blocking=False):  # idle: ask the actors, replace the lost
            try:
                states = await asyncio.get_running_loop().run_in_executor(None, self._heal)
            finally:
                self._turn.release()
            if states is not None and any(s != "ok" for s in states):
                body.update(status="replaced", actors_replaced=states)
                return 503, body
        else:
            body["status"] = "busy"
        return 200, body

    async def _summary(self, request: Any) -> tuple[int, dict[str, Any]]:
        from tapt.api.options import method_names

        m, r = self.index.manifest, self.rooms
        return 200, {"sentences": self.index.n_sentences,
                     "documents": (m.get("counts") or {}).get("documents"),
                     "shards": len(self.index.shards), "segment_size": self.index.segment_size,
                     "model": (m.get("model") or {}).get("name"), "dim": self.index.dim,
                     "generation": m.get("generation", 1),
                     "methods": method_names(),
                     "limits": {"max_body": r.max_body, "max_task": r.max_task,
                                "max_budget": r.max_budget, "max_concurrent": r.max_concurrent,
                                "request_timeout": r.request_timeout,
                                "task_files": r.task_root is not None,
                                "out_files": r.out_root is not None}}

    async def _context(self, request: Any) -> tuple[int, dict[str, Any]]:
        query = request.query_params
        try:
            start, stop = int(query["start"]), int(query["stop"])
            around = int(query.get("around", 3))
        except (KeyError, ValueError):
            raise Refused(400, "context: give start and stop (rows) and around") from None
        if not 0 <= start < stop <= self.index.n_sentences or stop - start > 1000 \
                or not 0 <= around <= CONTEXT_AROUND:
            raise Refused(400, f"context: rows in [0, {self.index.n_sentences}), at most "
                               f"1,000 of them, around in 0..{CONTEXT_AROUND}")
        return 200, document_context(self.index, start, stop, around)

    async def _openapi(self, request: Any) -> tuple[int, dict[str, Any]]:
        from tapt.api.openapi import schema

        return 200, schema(self.rooms)

    def _file(self, request: Any, name: str) -> Any:
        from starlette.responses import FileResponse

        if not self.rooms.allows(request.headers.get("authorization")):
            raise Refused(401, "a bearer token is required (Authorization: Bearer TOKEN)")
        path = inside(self.rooms.out_root, name, "file")
        if not path.is_file():
            raise Refused(404, f"file: {name!r} is not there")
        if path.name.endswith(".manifest.json") and path.stat().st_size <= MAX_MANIFEST:
            from starlette.responses import Response

            # a selection's manifest records where the server read and wrote: not shown
            text = self._without_server_paths(path.read_text(encoding="utf-8"))
            return Response(text, headers={
                **HEADERS, "Content-Disposition": f'attachment; filename="{path.name}"'},
                media_type="application/json")
        return FileResponse(path, headers=HEADERS, media_type="application/x-ndjson",
                            filename=path.name)


class _Watch:
    """The index as `answer_request` sees it, noting whether a selection failed because a
    serving actor died or hung (answered 503, not 400)."""

    def __init__(self, index: Index) -> None:
        self.index, self.unavailable = index, False

    def select(self, *args: Any, **kwargs: Any) -> Any:
        from tapt.retriever.serving.actors import Unavailable

        try:
            return self.index.select(*args, **kwargs)
        except Unavailable:
            self.unavailable = True
            raise


def document_context(index: Index, start: int, stop: int, around: int) -> dict[str, Any]:
    """The sentences of rows [start, stop) with up to `around` sentences of the same document
    either side.

    Returns:
        {"doc", "before": [...], "rows": [...], "after": [...]}.
    """
    import numpy as np

    shard_at = int(np.searchsorted(np.asarray(index.row_offsets), start, side="right")) - 1
    shard = index.shards[shard_at]
    local = start - shard.row_offset
    d = int(np.searchsorted(shard.docs, local, side="right")) - 1
    lo = max(int(shard.docs[d]) + shard.row_offset, start - around)
    hi = min(int(shard.docs[d + 1]) + shard.row_offset, stop + around)
    records = index.store.records(range(lo, max(hi, stop)))
    texts = [r["text"] for r in records]
    return {"doc": d + shard.doc_offset, "before": texts[:start - lo],
            "rows": texts[start - lo:stop - lo], "after": texts[stop - lo:]}
