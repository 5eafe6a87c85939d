"""Building an index: stages, executors, checkpoints; add, reindex, upgrade, repair, verify."""
