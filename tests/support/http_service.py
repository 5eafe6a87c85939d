"""A `SelectionService` answering on a free loopback port from a thread of the test process
(uvicorn), and a small HTTP client for the tests."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
from typing import Any, Iterator


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def running(service: Any) -> Iterator[str]:
    """Serve `service` on 127.0.0.1 until the block ends; yields its base URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(service, host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


def call(base: str, method: str, path: str, body: Any = None, token: str | None = None,
         raw: bytes | None = None, headers: dict[str, str] | None = None,
         timeout: float = 120) -> tuple[int, Any, dict[str, str]]:
    """(status, parsed JSON or bytes, headers) of one request; `path` is sent as it is."""
    host, port = base.rsplit("/", 1)[-1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    sent = dict(headers or {})
    if token:
        sent["Authorization"] = f"Bearer {token}"
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    if data is not None:
        sent.setdefault("Content-Type", "application/json")
    conn.request(method, path, body=data, headers=sent)
    response = conn.getresponse()
    payload = response.read()
    got = {k.lower(): v for k, v in response.getheaders()}
    conn.close()
    if got.get("content-type", "").startswith("application/json"):
        return response.status, json.loads(payload), got
    return response.status, payload, got
