"""A task: read as the user gives it, split as the index was, embedded and cached."""
