"""Load and faults of a served index over HTTP (`tapt.serve(..., http=...)` on Ray Serve),
loopback only, every loop bounded in count and time.

On a synthetic index (`benchmarks/synthetic_index.py`, its manifest recording the packaged
all-MiniLM-L6-v2 so that requests give their task as sentences; the rows stay synthetic):

- load: for each method and each number of concurrent clients, every client sends its share
  of `--requests` (at least one each) one after another, over one token-authenticated server;
  requests per second (answered, over the wall time of the round) and latency percentiles,
  with every status seen. Each request's task is one of `--tasks` seeded sets of sentences,
  so the task cache helps as it would with repeated tasks;
- faults: an actor killed (SIGKILL) while a request is under way (that request's status and
  time, then the next request's), and malformed, oversized, unauthenticated and
  path-escaping requests, each with the status it got, and whether anything outside the
  server's rooms was read into an answer or written (a canary file beside the task root, the
  out root's listing before and after).

Regenerate (the index first: 1M rows in 8 shards, then the run):

    nice -n 10 .venv/bin/python -c "from pathlib import Path; from benchmarks.synthetic_index \\
        import Spec, make_index; from tapt.indexer.encoding.encoder import load_encoder; \\
        make_index(Path('.cache/bench/w1m'), Spec(rows=1_000_000, shards=8), \\
        model=load_encoder(device='cpu'))"
    nice -n 10 .venv/bin/python -m benchmarks.serve_http --index .cache/bench/w1m/index \\
        --requests 16 --out benchmarks/results/scale/serve_http
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger("serve_http")
CANARY = "canary words that no answer may hold"


def _post(url: str, path: str, body: bytes | None, token: str | None, method: str = "POST",
          timeout: float = 1200) -> tuple[int, Any]:
    import http.client

    host, port = url.rsplit("/", 1)[-1].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    data = response.read()
    conn.close()
    try:
        return response.status, json.loads(data)
    except ValueError:
        return response.status, data[:200]


def _tasks(count: int, seed: int) -> list[list[str]]:
    """`count` seeded task sets of 8 sentences of made-up words."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = ["".join(rng.choice(letters, size=rng.integers(3, 9))) for _ in range(400)]
    return [[" ".join(rng.choice(words, size=rng.integers(6, 16))).capitalize() + "."
             for _ in range(8)] for _ in range(count)]


def _percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p90": None, "p99": None, "max": None}
    q = np.percentile(values, [50, 90, 99])
    return {"p50": round(float(q[0]), 3), "p90": round(float(q[1]), 3),
            "p99": round(float(q[2]), 3), "max": round(max(values), 3)}


def load_round(url: str, token: str, method: str, clients: int, requests: int, budget: str,
               tasks: list[list[str]], deadline_s: float) -> dict[str, Any]:
    """`clients` threads, each sending its share of `requests` one after another (none new
    past `deadline_s`)."""
    per = max(1, -(-requests // clients))
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    lock = threading.Lock()
    began = time.perf_counter()

    def client(i: int) -> None:
        for j in range(per):
            if time.perf_counter() - began > deadline_s:
                return
            task = tasks[(i * per + j) % len(tasks)]
            body = json.dumps({"method": method, "task": task, "budget": budget,
                               "id": f"{i}-{j}"}).encode()
            t0 = time.perf_counter()
            status, _ = _post(url, "/select", body, token)
            took = time.perf_counter() - t0
            with lock:
                statuses[str(status)] = statuses.get(str(status), 0) + 1
                if status == 200:
                    latencies.append(took)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - began
    return {"method": method, "clients": clients, "sent": sum(statuses.values()),
            "statuses": statuses, "wall_s": round(wall, 2),
            "requests_per_s": round(len(latencies) / wall, 3) if wall else None,
            "latency_s": _percentiles(latencies), "load_after": os.getloadavg()[0]}


def _actor_processes() -> list[int]:
    """The process ids of this machine's serving actors (`ShardServer`)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and b"ray::ShardServer" in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def killed_mid_request(url: str, token: str, method: str, budget: str, task: list[str],
                       after_s: float) -> dict[str, Any]:
    """A request under way when one serving actor is killed (`after_s` in), then the next."""
    out: dict[str, Any] = {}

    def first() -> None:
        t0 = time.perf_counter()
        out["status"], answer = _post(url, "/select", json.dumps(
            {"method": method, "task": task, "budget": budget}).encode(), token)
        out["seconds"] = round(time.perf_counter() - t0, 2)
        out["error"] = answer.get("error") if isinstance(answer, dict) else None

    thread = threading.Thread(target=first)
    thread.start()
    time.sleep(after_s)
    victims = _actor_processes()
    out["killed_pid_alive_before"] = bool(victims) and thread.is_alive()
    if victims:
        os.kill(victims[0], signal.SIGKILL)
    thread.join()
    t0 = time.perf_counter()
    status, answer = _post(url, "/select", json.dumps(
        {"method": method, "task": task, "budget": budget}).encode(), token)
    out["next"] = {"status": status, "seconds": round(time.perf_counter() - t0, 2),
                   "segments": answer.get("segments") if isinstance(answer, dict) else None}
    health_status, health = _post(url, "/health", None, None, method="GET")
    out["health_after"] = {"status": health_status, "body": health}
    return out


def hostile(url: str, token: str, task_root: Path, out_root: Path, canary: Path,
            max_body: int) -> list[dict[str, Any]]:
    """Each hostile request, its status and whether anything outside the rooms leaked."""
    ok = {"method": "centroid", "task": ["A plain sentence of a task."], "budget": "10"}
    relative_canary = os.path.relpath(canary, task_root)
    cases = [
        ("malformed JSON", b'{"method": "centroid", "task": [', token, 400),
        ("not an object", b"[1, 2, 3]", token, 400),
        ("NaN in the request", b'{"method": "centroid", "budget": "10", "seed": NaN}', token,
         400),
        ("oversized body", json.dumps({**ok, "task": ["x" * max_body]}).encode(), token, 413),
        ("task over its bound", json.dumps({**ok, "task": ["A sentence."] * 5000}).encode(),
         token, 413),
        ("budget over its bound", json.dumps({**ok, "budget": "0.5"}).encode(), token, 413),
        ("no token", json.dumps(ok).encode(), None, 401),
        ("wrong token", json.dumps(ok).encode(), "x" * 32, 401),
        ("task path escaping with ..", json.dumps({**ok, "task": relative_canary}).encode(),
         token, 403),
        ("task path absolute", json.dumps({**ok, "task": str(canary)}).encode(), token, 403),
        ("task files escaping", json.dumps({**ok, "task": {"files": ["../" + canary.name]}}
                                           ).encode(), token, 403),
        ("task by a symbolic link out of the room", json.dumps({**ok, "task": "leak.txt"}
                                                               ).encode(), token, 403),
        ("output path escaping", json.dumps({**ok, "out": "../escaped.jsonl"}).encode(),
         token, 403),
        ("output path absolute", json.dumps({**ok, "out": str(canary.parent / "abs.jsonl")}
                                            ).encode(), token, 403),
    ]
    if not (task_root / "leak.txt").is_symlink():
        (task_root / "leak.txt").symlink_to(canary)
    before = sorted(os.listdir(canary.parent)), sorted(os.listdir(out_root))
    rows = []
    for name, body, key, wanted in cases:
        t0 = time.perf_counter()
        status, answer = _post(url, "/select", body, key)
        rows.append({"case": name, "status": status, "expected": wanted,
                     "seconds": round(time.perf_counter() - t0, 3),
                     "canary_in_answer": CANARY in json.dumps(answer, default=str),
                     "error": answer.get("error", "")[:160] if isinstance(answer, dict) else
                     str(answer)[:160]})
    status, answer = _post(url, "/files/%2e%2e/" + canary.name, None, token, method="GET")
    rows.append({"case": "download escaping", "status": status, "expected": 403,
                 "seconds": None, "canary_in_answer": CANARY in str(answer),
                 "error": answer.get("error", "") if isinstance(answer, dict) else ""})
    after = sorted(os.listdir(canary.parent)), sorted(os.listdir(out_root))
    for row in rows:
        row["written_outside"] = after != before
        row["error"] = row["error"].replace(str(canary.parent), "WORK")   # no machine's path
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True, help="OUT.json and OUT.md")
    parser.add_argument("--methods", default="centroid,fused")
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--requests", type=int, default=32,
                        help="requests of a round (at least one per client)")
    parser.add_argument("--round-seconds", type=float, default=900.0,
                        help="no new request of a round past this")
    parser.add_argument("--budget", default="1000sent")
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--actors", type=int, default=8)
    parser.add_argument("--cpus-per-actor", type=float, default=0.25)
    parser.add_argument("--ray-cpus", type=int, default=2)
    parser.add_argument("--request-timeout", type=float, default=1800.0)
    parser.add_argument("--kill-after", type=float, default=1.0,
                        help="seconds into a request when an actor is killed")
    parser.add_argument("--render", action="store_true",
                        help="only write OUT.md again from OUT.json")
    parser.add_argument("--kill-method", default="fused",
                        help="the method of that request (one that takes longer than that)")
    args = parser.parse_args(argv)
    if args.render:
        _write(json.loads(args.out.with_suffix(".json").read_text()), args.out)
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    import ray

    import tapt

    work = Path(tempfile.mkdtemp(prefix="serve-http-"))
    task_root, out_root = work / "tasks", work / "outs"
    task_root.mkdir()
    out_root.mkdir()
    canary = work / "canary.txt"
    canary.write_text(CANARY + "\n")
    token = os.urandom(24).hex()
    (work / "token").write_text(token)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    ray.init(address="local", num_cpus=args.ray_cpus, include_dashboard=False,
             logging_level="WARNING", log_to_driver=False)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    methods = [m for m in args.methods.split(",") if m]
    tasks = _tasks(args.tasks, 0)
    meta = {"command": " ".join(["python -m benchmarks.serve_http"] + sys.argv[1:]),
            "index": str(args.index), "rows": tapt.Index.open(args.index).n_sentences,
            "actors": args.actors, "cpus_per_actor": args.cpus_per_actor,
            "ray_cpus": args.ray_cpus, "budget": args.budget, "cpu_cores": os.cpu_count(),
            "request_timeout": args.request_timeout,
            "uptime_before": subprocess.run(["uptime"], capture_output=True, text=True
                                            ).stdout.strip(),
            "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    results: dict[str, Any] = {"meta": meta, "load": [], "warm": []}
    try:
        t0 = time.perf_counter()
        with tapt.serve(args.index, http=f"127.0.0.1:{port}", token_file=work / "token",
                        task_root=task_root, out_root=out_root, actors=args.actors,
                        cpus_per_actor=args.cpus_per_actor,
                        request_timeout=args.request_timeout) as server:
            meta["start_s"] = round(time.perf_counter() - t0, 1)
            for method in methods:          # the model loaded, the actors warm, fits cached
                t1 = time.perf_counter()
                status, answer = _post(server.url, "/select", json.dumps(
                    {"method": method, "task": tasks[0], "budget": args.budget}).encode(),
                    token)
                results["warm"].append({"method": method, "status": status,
                                        "seconds": round(time.perf_counter() - t1, 2)})
                log.info("warm %s: %s", method, results["warm"][-1])
            for method in methods:
                for clients in [int(c) for c in args.clients.split(",")]:
                    row = load_round(server.url, token, method, clients,
                                     max(args.requests, clients), args.budget, tasks,
                                     args.round_seconds)
                    results["load"].append(row)
                    log.info("%s", row)
                    _write(results, args.out)
            results["killed"] = killed_mid_request(server.url, token, args.kill_method,
                                                   args.budget, tasks[1], args.kill_after)
            log.info("killed: %s", results["killed"])
            results["hostile"] = hostile(server.url, token, task_root, out_root, canary,
                                         1 << 20)
            meta["uptime_after"] = subprocess.run(["uptime"], capture_output=True,
                                                  text=True).stdout.strip()
            _write(results, args.out)
    finally:
        ray.shutdown()
        import shutil

        shutil.rmtree(work, ignore_errors=True)      # the rooms and token made above


def _write(results: dict[str, Any], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    meta = results["meta"]
    lines = ["## Measured: a served index over HTTP, load and faults", "",
             f"Measured {meta['measured']} on this machine ({meta['cpu_cores']} cores, shared "
             f"with other developers' jobs): `{meta['command']}`, a local Ray cluster of "
             f"{meta['ray_cpus']} CPUs, {meta['actors']} serving actors of "
             f"{meta['cpus_per_actor']:g} CPU, the synthetic index of {meta['rows']:,} rows "
             "(8 shards, float16 rows), over loopback with a bearer token; budget "
             f"{meta['budget']}; each task 8 sentences embedded by all-MiniLM-L6-v2 on the CPU "
             "(cached after its first use). Load before: "
             f"`{meta['uptime_before']}`; after: `{meta.get('uptime_after', '(running)')}`.",
             "", "Selections run one at a time in the replica (the actors spread each over "
             "the shards): beyond overlapping the HTTP work of one request with the selection "
             "of another, more clients wait longer, they add no throughput. The request "
             f"timeout was {meta.get('request_timeout', 1800):g} s, so that every request of "
             "a round is answered and timed (at the default 120 s the later requests of a "
             "long queue are answered 503).", "",
             "| method | clients | requests | statuses | requests/s | p50 s | p90 s | p99 s | "
             "max s | load (1 min) after |", "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for row in results["load"]:
        lat = row["latency_s"]
        lines.append(f"| {row['method']} | {row['clients']} | {row['sent']} | "
                     f"{row['statuses']} | {row['requests_per_s']} | {lat['p50']} | "
                     f"{lat['p90']} | {lat['p99']} | {lat['max']} | {row['load_after']:.2f} |")
    if results.get("warm"):
        lines += ["", "First request of each method (the model loaded, the actors' rows "
                  "made ready): " + ", ".join(f"{w['method']} {w['seconds']} s (status "
                                               f"{w['status']})" for w in results["warm"])]
    killed = results.get("killed")
    if killed:
        when = ("while a request was under way" if killed["killed_pid_alive_before"]
                else "after the request had ended")
        lines += ["", f"An actor killed (SIGKILL) {when}: that request answered "
                  f"{killed['status']} in {killed['seconds']} s ({killed.get('error')}); the "
                  f"next answered {killed['next']['status']} in {killed['next']['seconds']} s; "
                  f"/health then {killed['health_after']['status']}."]
    if results.get("hostile"):
        lines += ["", "| hostile request | status | expected | canary in answer | written "
                  "outside the rooms | error |", "|---|---:|---:|---|---|---|"]
        for row in results["hostile"]:
            lines.append(f"| {row['case']} | {row['status']} | {row['expected']} | "
                         f"{row['canary_in_answer']} | {row['written_outside']} | "
                         f"{row['error'].replace('|', '/')} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
