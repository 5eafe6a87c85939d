"""The models tapt trains, and the one loop that trains them.

- `mlm`: loading a masked LM and its tokenizer, BERT masking, masked-token losses (what `tapt
  train`, `tapt pretrain`, `tapt eval-mlm` and the `perplexity` method share);
- `classifier`: an encoder with mean pooling and a linear head (Domain-Finetune's domain
  classifier, the downstream benchmark's label classifier);
- `scratch`: a masked LM and a WordPiece vocabulary made from nothing, by named size presets
  (the general model `tapt pretrain` trains);
- `loop`: the optimizer-step loop every one of them trains with (pretraining from scratch,
  continued pretraining, fine-tuning, the learned selection methods).

This package sits between the retriever and the indexer: the trainer and the retriever's
learned methods import it; it imports only the indexer's model resolution and batching, and
`util`. torch and transformers are imported where they are used.
"""
