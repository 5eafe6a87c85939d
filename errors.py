"""tapt's errors. Library code raises them; the CLI prints each as one `Error:` line.

An error about one argument names it with `param` (the Python parameter name, e.g. "budget").
`str(error)` then reads "budget: must be positive" for library users, and the CLI renders the
same error with its own flag ("--budget: must be positive"), so messages never hard-code flags.
A message that mentions another parameter writes its Python name in backticks ("pass
`overwrite` to replace it"); the CLI shows the flag there ("pass --overwrite ..."). Backticks
are for parameter names only.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

_PARAM = re.compile(r"`([a-z][a-z0-9_]*)`")


class TaptError(Exception):
    """Base class for every error tapt reports to a user.

    Args:
        message: What is wrong and, where it helps, what to do about it.
        param: The parameter the error is about (its Python name), if any.
    """

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param

    def render(self, name_of: Callable[[str], str] | None = None) -> str:
        """The message, prefixed with the parameter under the caller's name for it.

        Args:
            name_of: Maps a parameter name to how the caller spells it (the CLI: its flag).

        Returns:
            One line of text.
        """
        message = self.message
        if name_of is not None:
            message = _PARAM.sub(lambda m: name_of(m.group(1)), message)
        if self.param is None:
            return message
        return f"{name_of(self.param) if name_of is not None else self.param}: {message}"

    def __str__(self) -> str:
        return self.render()


class InputError(TaptError):
    """An argument, corpus, task or selection that cannot be used as documented."""


class OutputError(TaptError):
    """An output path tapt refuses to write: it is an input, or it holds something tapt did
    not create."""


class IndexFormatError(TaptError):
    """An index directory that is missing, damaged or of another format version."""


class ModelMismatchError(TaptError):
    """A model that does not match the one an index was built with."""


class BudgetError(TaptError):
    """A selection budget that cannot be satisfied or parsed."""


class StorageError(TaptError):
    """The disk filled up or refused a write; committed work is kept for resuming."""


class DeadlineExceeded(TaptError):
    """The time given to a piece of work (a served request's) ran out: it stopped at its next
    step (`tapt.util.progress.deadline`)."""


class PluginError(TaptError):
    """A plugin (an entry point of the group `tapt.plugins`, or a module named in
    TAPT_PLUGINS) that failed to import."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM, as the CLI maps it) during a build or an add: the embedded part is
    kept for resuming. A `KeyboardInterrupt`, so code that stops on Ctrl-C still stops.

    Args:
        job: What was interrupted ("build", "add").
        kept: Sentences embedded and kept (0 when nothing was).
        work: The folder holding the kept work, or None when nothing was kept.
        earlier: Of `kept`, the sentences earlier, interrupted runs had kept (this one resumed
            them): the message counts what this run kept.
    """

    def __init__(self, job: str, kept: int, work: str | None, earlier: int = 0) -> None:
        ours = max(kept - earlier, 0)
        if work is None:
            message = f"interrupted before the {job} kept anything"
        elif earlier and ours:
            message = (f"interrupted: this run kept {ours:,} more embedded sentences in {work} "
                       f"({kept:,} with those of earlier runs); run the same command again to "
                       "resume")
        elif earlier:
            message = (f"interrupted before this run kept anything; the {earlier:,} embedded "
                       f"sentences of earlier runs are still kept in {work}; run the same "
                       "command again to resume")
        elif kept:
            message = (f"interrupted: {kept:,} embedded sentences of this {job} are kept in "
                       f"{work}; run the same command again to resume")
        else:
            message = (f"interrupted: the {job}'s prepared shards are kept in {work}; run the "
                       "same command again to resume")
        super().__init__(message)
        self.job = job
        self.kept = kept
        self.work = work

    def __str__(self) -> str:
        return str(self.args[0])


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) during training: a checkpoint was saved at `step` in `checkpoint`;
    `train(..., resume=True)` with the same arguments continues from it.

    Args:
        step: The last step trained.
        checkpoint: The checkpoint's folder.
        signum: The signal that stopped the run (SIGINT or SIGTERM).
    """

    def __init__(self, step: int, checkpoint: Path, signum: int = 2) -> None:
        super().__init__(f"interrupted at step {step}; checkpoint saved in {checkpoint}")
        self.step = step
        self.checkpoint = checkpoint
        self.signum = signum
