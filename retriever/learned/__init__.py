"""Scorers fitted on a task, and the held-out protocol that chooses among them."""
