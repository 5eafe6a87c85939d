"""Approximate nearest-neighbour search: FAISS index types, their choice, recall and rescoring."""
