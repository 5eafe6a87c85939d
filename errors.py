"""Domain errors. The CLI turns these into one-line messages; library code raises them."""

from __future__ import annotations


class TaptError(Exception):
    """Base class for every error tapt reports to a user."""


class InputError(TaptError):
    """A corpus, task or selection file that cannot be read as documented."""


class IndexFormatError(TaptError):
    """An index directory that is missing, damaged or of another format version."""


class ModelMismatchError(TaptError):
    """A model that does not match the one an index was built with."""


class BudgetError(TaptError):
    """A selection budget that cannot be satisfied or parsed."""


class StorageError(TaptError):
    """The disk filled up or refused a write; committed work is kept for resuming."""
