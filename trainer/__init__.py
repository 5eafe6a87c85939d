"""Continued masked-LM pretraining on selected data (`tapt train`, `tapt eval-mlm`).

Importing this package is cheap: torch and transformers are imported by the submodules that need them
(`trainer.loop.train`, `trainer.evaluate.evaluate_text`).
"""
