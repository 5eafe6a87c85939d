"""Extending tapt: new selection methods, corpus formats, executors and encoders.

Every kind registers the same way: a class decorator. A class decorated in a module of its
package (`tapt/retriever/methods/`, `tapt/indexer/reading/formats/`,
`tapt/indexer/building/executors/`) is found there, since each registry imports every module
of its package the first time it is asked; a class decorated in any other module (your own)
counts from the moment that module is imported. The names here are the public ones:

- a selection method: subclass `Method` (or `SentenceScored`), give it `Params` made of
  `param` fields, decorate it with `register_method`; `tapt select NAME`, its options and
  `Index.select("NAME", ...)` follow from the class;
- a corpus format: subclass `Format`, implement `scan` and `rows`, decorate it with
  `register_format`; files with its suffixes are read with it, and `input_format` takes its
  name;
- an executor: subclass `Executor`, implement `map`, decorate it with `register_executor`;
  `executor="NAME"` (`--executor NAME`) runs a build's stages with it;
- an encoder (a model that is no sentence-transformers folder): a class with the members of
  `Encoder`, decorated with `register_encoder`; `model="NAME"` (`--model NAME`) builds an
  index with it, and the index loads it by that name for every later add and selection.

A module of your own reaches the `tapt` command as a plugin: an entry point of the group
`tapt.plugins` of an installed distribution, or a module named in the environment variable
TAPT_PLUGINS (`tapt.util.registry.load_plugins`). A worked example of each kind is in the
development guide (docs/development.md).
"""

from __future__ import annotations

from tapt.indexer.building.executor_base import EncoderSource, Executor, Stage
from tapt.indexer.building.executor_base import register as register_executor
from tapt.indexer.encoding.encoder import Encoder
from tapt.indexer.encoding.registered import register as register_encoder
from tapt.indexer.reading.formats.base import Format, InputFile, ReadOptions, Row, Scanned
from tapt.indexer.reading.formats.base import register as register_format
from tapt.retriever.methods.base import (
    Method,
    NoParams,
    Params,
    Ranking,
    RankingInputs,
    SentenceScored,
    param,
)
from tapt.retriever.methods.registry import register as register_method

__all__ = ["Method", "SentenceScored", "Params", "NoParams", "param", "Ranking",
           "RankingInputs", "register_method", "Format", "InputFile", "ReadOptions", "Row",
           "Scanned", "register_format", "Executor", "Stage", "EncoderSource",
           "register_executor", "Encoder", "register_encoder"]
