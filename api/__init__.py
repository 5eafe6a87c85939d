"""tapt's Python API: index a corpus once, select training data for a task in seconds, train.

Example (the README's; `tests/api/test_api.py` runs the README's copy and checks that this one is
the same):

    import tapt

    ix = tapt.Index.open("idx")                       # built once: tapt.Index.build(...)
    sel = ix.select("fused", task=["Fever and a persistent cough.",
                                   "Reduced blood flow to the kidneys.",
                                   "A rash on both arms."], budget="500sent")
    print(sel.to_pandas().head())                     # text, weight, score, tapt_..., corpus fields
    sel.write("sel-fever.jsonl")                      # the selection file `tapt train` reads
    sel.export("train-fever.parquet")                 # or hf / jsonl / txt, for any trainer
    tapt.train("sel-fever.jsonl", "model-fever", steps=10)  # MLM pretraining: a short try

Everything the command line does is here, and the command line does it by calling this module:
`Index.build/open/add/verify/repair/upgrade/reindex/info/recall/select`, `Index.rank_detectors/
cluster_purity/plot_domains`, `Selection` (to pandas, Arrow, a Hugging Face dataset, files),
`serve`, `evaluate`, `export`, `train`, `pretrain`, `evaluate_mlm` and `bench_recall`, with the command
line's options and defaults; every call that takes a task or text reads it by one rule
(`retriever.tasks.forms.task_form`). Errors are `tapt.errors.TaptError` subclasses that name the
parameter at fault (`err.param`). Nothing here imports torch, FAISS or transformers until a call
needs them.
"""

from __future__ import annotations

from tapt.api.bench import bench_downstream, bench_recall
from tapt.api.http_serve import HTTPServer
from tapt.api.index import Index
from tapt.api.options import describe_methods, method_names
from tapt.api.selections import evaluate, export, plot_scores, show
from tapt.api.served import ServedIndex
from tapt.api.serving import serve
from tapt.api.training import evaluate_mlm, model_path, pretrain, train
from tapt.retriever.selections.selection import Selection

# tapt's public API: `tapt.__all__` lists these names (and the errors); what the command line
# builds its options from is `tapt.api.options`, not part of it
__all__ = ["Index", "Selection", "ServedIndex", "serve", "train", "pretrain", "model_path",
           "evaluate_mlm", "evaluate", "export", "show", "plot_scores", "HTTPServer",
           "bench_recall", "bench_downstream", "method_names", "describe_methods"]
