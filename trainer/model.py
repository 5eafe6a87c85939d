"""Load a masked-LM model and its tokenizer from a local directory, the packaged default or a hub name.

The code lives in `tapt.retriever.learned.mlm`, shared with the `perplexity` selection method (see
its docstring for how a base encoder without head weights, such as the packaged default, gets one).
"""

from __future__ import annotations

from tapt.retriever.learned.mlm import (TOKENIZER_FILES, check_max_length, load_mlm,
                                        load_tokenizer, max_positions)

__all__ = ["TOKENIZER_FILES", "check_max_length", "load_mlm", "load_tokenizer", "max_positions"]
