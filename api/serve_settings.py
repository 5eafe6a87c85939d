"""ServeSettings: the settings of `tapt.serve` and `tapt index serve`, one name each, with
their defaults here only."""

from __future__ import annotations

from dataclasses import dataclass, field

from tapt.api.rooms import LIMITS

_PATH_IN = {"file_okay": False}
_CPUS_PER_ACTOR = 1.0


@dataclass(frozen=True)
class ServeSettings:
    """The settings of `tapt.serve` (and `tapt index serve`), one name each: the field is the
    keyword and the option (`-` for `_`), with its default here only.

    Attributes:
        ray_address: The Ray cluster: "auto", "HOST:PORT" (default: the one this process is
            connected to, else RAY_ADDRESS, else a local cluster started here; `address`, its
            old name, is taken for one release with a warning).
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
    """

    # `select`: how `tapt select METHOD --executor ray` offers the field (`config_fields`)
    ray_address: str | None = field(default=None, metadata={
        "help": "The Ray cluster [default: RAY_ADDRESS, else a local cluster on this machine].",
        "metavar": "auto|HOST:PORT", "was": "address",
        "select": {"help": "--executor ray: the cluster to join [default: RAY_ADDRESS, else a "
                           "local cluster on this machine]."}})
    actors: int | None = field(default=None, metadata={
        "help": "Ray actors holding the shards (consecutive groups) [default: one per shard].",
        "minimum": 1,
        "select": {"help": "--executor ray: actors holding the shards [default: one per "
                           "shard]."}})
    cpus_per_actor: float = field(default=_CPUS_PER_ACTOR, metadata={
        "help": "CPUs Ray reserves for each actor.", "minimum": 0, "min_open": True,
        "show_default": True,
        "select": {"help": "--executor ray: CPUs Ray reserves for each actor [default: "
                           f"{_CPUS_PER_ACTOR:g}].", "default": None, "show_default": False}})
    hold: str = field(default="rows", metadata={
        "help": "What the actors keep in RAM: the float16 embeddings, or the int8 codes (half "
                "the RAM; for --scan codes of the methods that have it: other scans then read "
                "the embeddings from disk).", "choices": ("rows", "codes"), "show_default": True})
    resources: dict[str, float] | None = None
    http: str | None = field(default=None, metadata={
        "help": "Answer HTTP on Ray Serve instead: POST /select, GET /health, GET /index, "
                "GET /openapi.json and the page at / (no standard input read).",
        "metavar": "HOST:PORT"})
    token_file: str | None = field(default=None, metadata={
        "help": "--http: file holding the bearer token every request must carry.",
        "path": {"dir_okay": False}})
    no_auth: bool = field(default=False, metadata={
        "help": "--http on a loopback address only: no token (refused elsewhere)."})
    task_root: str | None = field(default=None, metadata={
        "help": "--http: the folder requests may name task files in [default: none, tasks "
                "only as sentences].", "path": _PATH_IN})
    out_root: str | None = field(default=None, metadata={
        "help": "--http: the folder requests may write selections to [default: none].",
        "path": _PATH_IN})
    max_body: int | None = field(default=None, metadata={
        "help": f"--http: bytes of a request body [default: {LIMITS['max_body']:,}].",
        "minimum": 1})
    max_task: int | None = field(default=None, metadata={
        "help": f"--http: task sentences of a request [default: {LIMITS['max_task']:,}].",
        "minimum": 1})
    max_budget: int | None = field(default=None, metadata={
        "help": "--http: sentences a request's budget may reach [default: "
                f"{LIMITS['max_budget']:,}].", "minimum": 1})
    max_concurrent: int | None = field(default=None, metadata={
        "help": "--http: requests in flight, more are answered 429 [default: "
                f"{LIMITS['max_concurrent']}].", "minimum": 1})
    request_timeout: float | None = field(default=None, metadata={
        "help": "Seconds a request may take, answered 503 past it (--http: waiting included) "
                f"[default: --http {LIMITS['request_timeout']:g}, else none].",
        "minimum": 0, "min_open": True})


# the fields `ServedIndex` takes (the actors' settings); the others apply with `http` only
ACTOR_SETTINGS = ("ray_address", "actors", "cpus_per_actor", "hold", "resources",
                  "request_timeout")
HTTP_SETTINGS = tuple(name for name in ServeSettings.__dataclass_fields__
                      if name not in ACTOR_SETTINGS)
