"""Encoding text into embeddings: the encoder, its ONNX export and runtime, models, batching."""
