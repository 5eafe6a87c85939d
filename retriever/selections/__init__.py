"""A selection: made for a task by a method, held in memory, written to its file, exported."""
