"""The index format and its stores: manifest, LMDB text store, shards, embeddings, integrity."""
