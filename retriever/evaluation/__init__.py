"""Selections scored against an index's oracle labels."""
