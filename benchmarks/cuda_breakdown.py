"""Where the CUDA encoding time goes: one run of every stage and variant, printed as it goes.

    python benchmarks/cuda_breakdown.py cuda MODEL_DIR [BUDGET_S]     # on a GPU machine

Embeds the bundled pool (20,007 sentences) stage by stage: tokenising, padding and copying,
the forward pass alone on batches already on the GPU (through sentence-transformers and
through the Hugging Face model directly, with the host's share of the time spent launching),
a torch profile, the encoder's whole CUDA path, `SentenceTransformer.encode`, threads with
their own streams, CUDA graphs, the attention kernels and torch.compile. Sections are skipped
once BUDGET_S (default 300) seconds have passed. Writes `$OUT/probe.json` (default /tmp) and
`$OUT/profile.txt`; `benchmarks/results/cuda_breakdown.json` is one such run. `cpu` as the
first argument runs the same on 300 sentences, to check the script without a GPU.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path

import numpy as np

DEVICE = sys.argv[1] if len(sys.argv) > 1 else "cuda"
MODEL = sys.argv[2] if len(sys.argv) > 2 else "/tmp/m"
BUDGET = float(sys.argv[3]) if len(sys.argv) > 3 else 300.0
OUT = os.environ.get("OUT", "/tmp")
START = time.perf_counter()
RESULTS: dict = {}

import torch  # noqa: E402

# internal: the encoder's length-sorted tokenising and padding, timed as one stage
from tapt.indexer.encoding.batching import SortedBatches  # noqa: E402

# internal: the encoder's whole CUDA path per dtype, and the padding length it uses
from tapt.indexer.encoding.encoder import CUDA_PAD_TO, SentenceTransformerEncoder  # noqa: E402

# internal: the profile and probe results written as tapt writes its files (temporary name, rename)
from tapt.util.files import atomic_write, write_json_atomic  # noqa: E402


def left() -> float:
    return BUDGET - (time.perf_counter() - START)


def say(*a):
    print(f"[{time.perf_counter() - START:6.1f}s]", *a, flush=True)


def record(key, value):
    RESULTS[key] = value
    say(key, value)
    write_json_atomic(os.path.join(OUT, "probe.json"), RESULTS)


def sync():
    if DEVICE.startswith("cuda"):
        torch.cuda.synchronize()


def section(name, need=20.0):
    def wrap(fn):
        if left() < need:
            say(f"SKIP {name}: {left():.0f} s left")
            return None
        say(f"== {name}")
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001
            record(f"{name}/error", f"{type(exc).__name__}: {exc}")
            traceback.print_exc()
            return None
    return wrap


with gzip.open("data/sample/pool.jsonl.gz", "rt", encoding="utf-8") as fh:
    TEXTS = [json.loads(line)["text"] for line in fh if line.strip()]
if DEVICE == "cpu":
    TEXTS = TEXTS[:300]
BIG = TEXTS * 5
NAMES = ("input_ids", "attention_mask", "token_type_ids")


@section("env", 0)
def _():
    import sentence_transformers
    import transformers
    env = {"python": sys.version.split()[0], "torch": torch.__version__,
           "transformers": transformers.__version__, "st": sentence_transformers.__version__,
           "cores": len(os.sched_getaffinity(0)), "texts": len(TEXTS)}
    if DEVICE.startswith("cuda"):
        env["gpu"] = torch.cuda.get_device_name(0)
    try:
        env["cpu"] = next(line.split(":", 1)[1].strip()
                          for line in Path("/proc/cpuinfo").read_text().splitlines()
                          if line.startswith("model name"))
    except Exception:  # noqa: BLE001
        pass
    record("env", env)


ENC = {}
for dt in ("float32", "float16", "bfloat16"):
    if DEVICE == "cpu" and dt != "float32":
        continue
    t0 = time.perf_counter()
    ENC[dt] = SentenceTransformerEncoder(MODEL, device=DEVICE, dtype=dt)
    say(f"loaded {dt} in {time.perf_counter() - t0:.1f} s")
E32 = ENC["float32"]
TOK = E32.model.tokenizer
AUTO = E32.model[0].auto_model
record("attn_implementation", getattr(AUTO.config, "_attn_implementation", None))
record("modules", [type(m).__name__ for m in E32.model])


@section("tokenize")
def _():
    out = {}
    SortedBatches(TOK, TEXTS[:2000], E32.max_length, NAMES)
    for threads in (None, 1):
        t0 = time.perf_counter()
        SortedBatches(TOK, BIG, E32.max_length, NAMES, threads=threads)
        s = time.perf_counter() - t0
        out[f"threads={threads}"] = {"us_per_sentence": round(1e6 * s / len(BIG), 2),
                                     "per_s": round(len(BIG) / s)}
    record("tokenize", out)


SB = SortedBatches(TOK, TEXTS, E32.max_length, NAMES)


def host_features(bs):
    return [SB.features(rows, pad_to=CUDA_PAD_TO) for rows in SB.batches(bs)]


@section("host prep")
def _():
    out = {}
    for bs in (256, 1024):
        t0 = time.perf_counter()
        feats = host_features(bs)
        t1 = time.perf_counter()
        pinned = [{k: torch.from_numpy(v).pin_memory() if DEVICE != "cpu" else torch.from_numpy(v)
                   for k, v in f.items()} for f in feats]
        t2 = time.perf_counter()
        on = [{k: v.to(DEVICE, non_blocking=True) for k, v in f.items()} for f in pinned]
        sync()
        t3 = time.perf_counter()
        widths = [f["input_ids"].shape[1] for f in feats]
        out[bs] = {"features_s": round(t1 - t0, 4), "pin_s": round(t2 - t1, 4),
                   "h2d_s": round(t3 - t2, 4), "batches": len(feats),
                   "mean_width": round(float(np.mean(widths)), 1), "max_width": max(widths),
                   "padded_tokens": int(sum(f["input_ids"].size for f in feats)),
                   "tokens": int(SB.lengths.sum())}
        del on
    record("host_prep", out)


def staged(bs):
    return [{k: torch.from_numpy(v).to(DEVICE) for k, v in f.items()} for f in host_features(bs)]


def st_forward(enc):
    def run(f):
        return enc.model(f)["sentence_embedding"]
    return run


def hf_forward(enc):
    auto = enc.model[0].auto_model

    def run(f):
        h = auto(input_ids=f["input_ids"], attention_mask=f["attention_mask"],
                 token_type_ids=f.get("token_type_ids")).last_hidden_state
        m = f["attention_mask"].unsqueeze(-1).to(h.dtype)
        return (h * m).sum(1) / m.sum(1).clamp(min=1)
    return run


def timed_loop(run, batches, repeats=3):
    with torch.inference_mode():
        for f in batches[:3]:
            run(f)
        sync()
        best, enqueue = float("inf"), None
        for _ in range(repeats):
            t0 = time.perf_counter()
            outs = [run(f) for f in batches]  # kept until synchronised, as an encoder keeps them
            t1 = time.perf_counter()
            sync()
            t2 = time.perf_counter()
            del outs
            if t2 - t0 < best:
                best, enqueue = t2 - t0, t1 - t0
    return best, enqueue


@section("forward only (staged on device)")
def _():
    out = {}
    for bs in (256, 1024):
        batches = staged(bs)
        for dt, enc in ENC.items():
            for name, make in (("st", st_forward), ("hf", hf_forward)):
                if left() < 30:
                    break
                s, q = timed_loop(make(enc), batches)
                out[f"{dt}/{name}/{bs}"] = {"per_s": round(len(TEXTS) / s),
                                           "enqueue_share": round(q / s, 3)}
                say(f"{dt}/{name}/{bs}", out[f"{dt}/{name}/{bs}"])
    record("forward_only", out)


@section("profile fp16 st forward, batch 256", 40)
def _():
    from torch.profiler import ProfilerActivity, profile
    enc = ENC.get("float16", E32)
    batches = staged(256)[20:40]
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if DEVICE != "cpu" else [])
    run = st_forward(enc)
    with torch.inference_mode():
        for f in batches[:3]:
            run(f)
        sync()
        with profile(activities=acts) as prof:
            for f in batches:
                run(f)
            sync()
    ka = prof.key_averages()
    print(ka.table(sort_by="self_cpu_time_total", row_limit=25), flush=True)
    for key in ("self_cuda_time_total", "self_device_time_total"):
        try:
            print(ka.table(sort_by=key, row_limit=15), flush=True)
            break
        except Exception:  # noqa: BLE001
            continue
    with atomic_write(os.path.join(OUT, "profile.txt")) as fh:
        fh.write(ka.table(sort_by="self_cpu_time_total", row_limit=60))


@section("full encode (tapt _encode_cuda / CPU encode)")
def _():
    out = {}
    for dt, enc in ENC.items():
        for bs in (256, 1024):
            enc.encode(TEXTS[:2 * bs], batch_size=bs)
            times = []
            for _ in range(2):
                sync()
                t0 = time.perf_counter()
                enc.encode(TEXTS, batch_size=bs)
                sync()
                times.append(time.perf_counter() - t0)
            out[f"{dt}/{bs}"] = round(len(TEXTS) / min(times))
            say(f"encode {dt}/{bs}", out[f"{dt}/{bs}"])
    if left() > 60:
        for dt in ("float32", "float16"):
            if dt in ENC:
                t0 = time.perf_counter()
                ENC[dt].encode(BIG, batch_size=1024)
                sync()
                out[f"{dt}/1024/x5"] = round(len(BIG) / (time.perf_counter() - t0))
    record("encode", out)


@section("st baseline (SentenceTransformer.encode)")
def _():
    out = {}
    for dt in ("float32", "float16"):
        if dt not in ENC:
            continue
        m = ENC[dt].model
        m.encode(TEXTS[:512], batch_size=256, show_progress_bar=False)
        sync()
        t0 = time.perf_counter()
        m.encode(TEXTS, batch_size=256, normalize_embeddings=True, convert_to_numpy=True,
                 show_progress_bar=False)
        sync()
        out[f"{dt}/256"] = round(len(TEXTS) / (time.perf_counter() - t0))
    record("st_baseline", out)


@section("threads with own streams (fp16 st forward)")
def _():
    out = {}
    enc = ENC.get("float16", E32)
    for bs in (256,):
        batches = staged(bs)
        for n in (2, 4):
            run = st_forward(enc)
            shares = [batches[i::n] for i in range(n)]

            def work(part):
                s = torch.cuda.Stream() if DEVICE != "cpu" else None
                with torch.inference_mode():
                    if s is not None:
                        with torch.cuda.stream(s):
                            for f in part:
                                run(f)
                        s.synchronize()
                    else:
                        for f in part:
                            run(f)
            work(batches[:4])
            sync()
            t0 = time.perf_counter()
            ts = [threading.Thread(target=work, args=(p,)) for p in shares]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            sync()
            out[f"{n}x/{bs}"] = round(len(TEXTS) / (time.perf_counter() - t0))
    record("threads", out)


@section("cuda graphs (fp16 hf forward, per shape)", 40)
def _():
    if DEVICE == "cpu":
        return
    enc = ENC["float16"]
    run = hf_forward(enc)
    out = {}
    for bs in (256, 1024):
        batches = staged(bs)
        graphs = {}
        t0 = time.perf_counter()
        with torch.inference_mode():
            for f in batches:
                shape = tuple(f["input_ids"].shape)
                if shape in graphs:
                    continue
                static = {k: v.clone() for k, v in f.items()}
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(2):
                        run(static)
                torch.cuda.current_stream().wait_stream(s)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    res = run(static)
                graphs[shape] = (g, static, res)
        capture = time.perf_counter() - t0

        def replay(f):
            g, static, res = graphs[tuple(f["input_ids"].shape)]
            for k, v in f.items():
                static[k].copy_(v)
            g.replay()
            return res.clone()
        s, q = timed_loop(replay, batches)
        with torch.inference_mode():  # the static inputs are inference tensors
            ref = torch.cat([run(f) for f in batches]).float()
            got = torch.cat([replay(f) for f in batches]).float()
        cos = torch.nn.functional.cosine_similarity(ref, got).min().item()
        out[bs] = {"per_s": round(len(TEXTS) / s), "enqueue_share": round(q / s, 3),
                   "shapes": len(graphs), "capture_s": round(capture, 2), "min_cos": cos}
        say("graphs", bs, out[bs])
    record("cuda_graphs", out)


@section("sdpa attention kinds (fp16 hf forward, batch 1024)", 30)
def _():
    if DEVICE == "cpu":
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel
    enc = ENC["float16"]
    batches = staged(1024)
    out = {}
    for kind in (SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH, SDPBackend.CUDNN_ATTENTION):
        try:
            with sdpa_kernel(kind):
                s, q = timed_loop(hf_forward(enc), batches, repeats=2)
            out[kind.name] = round(len(TEXTS) / s)
        except Exception as exc:  # noqa: BLE001
            out[kind.name] = f"{type(exc).__name__}: {str(exc)[:120]}"
    record("sdpa", out)


@section("torch.compile (fp16 hf forward, dynamic)", 90)
def _():
    if DEVICE == "cpu":
        return
    enc = ENC["float16"]
    fn = torch.compile(hf_forward(enc), dynamic=True)
    batches = staged(1024)
    t0 = time.perf_counter()
    with torch.inference_mode():
        for f in batches:
            fn(f)
    sync()
    compile_s = time.perf_counter() - t0
    s, q = timed_loop(fn, batches, repeats=2)
    record("compile", {"per_s": round(len(TEXTS) / s), "first_pass_s": round(compile_s, 1),
                       "enqueue_share": round(q / s, 3)})


say("done", RESULTS.keys())
