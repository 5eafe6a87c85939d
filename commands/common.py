"""What the command line's entry point (tapt.cli) and its commands both use: the click
settings, the state of the running invocation, and turning failures into one-line errors.

Here, not in tapt.cli, so that the commands never import the module that assembles them.
"""

from __future__ import annotations

import errno
import functools

import click

from tapt.errors import TaptError

CLICK_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
_STATE = {"verbose": 0}  # -v count of the running invocation, for tracebacks of internal errors
# SIGTERM: `terminated` once one arrived; `stopping` once _Terminated was raised or the command's
# outcome is decided (later signals only set `terminated`); `reported` once an Error line is out
_STATE.update(terminated=False, stopping=False, reported=False, code=None)


def _flag_of(param: str, ctx: click.Context | None = None) -> str:
    """A command's flag for a library parameter name (`budget` -> `--budget`)."""
    ctx = ctx or click.get_current_context(silent=True)
    for option in (ctx.command.params if ctx is not None else []):
        if option.name == param and isinstance(option, click.Option):
            longs = [o for o in option.opts if o.startswith("--")]
            return (longs or option.opts)[0]
        if option.name == param:
            return option.human_readable_name
    return "--" + param.replace("_", "-")


def _one_line(message: str) -> str:
    return " ".join(part.strip() for part in str(message).splitlines() if part.strip())


def _tapt_error(exc: TaptError, ctx: click.Context | None = None) -> click.ClickException:
    """A tapt error as a one-line ClickException naming this command's flags."""
    return click.ClickException(_one_line(exc.render(lambda p: _flag_of(p, ctx))))


def _domain_errors(func):
    """Turn tapt's own errors into a one-line `Error: ...` and exit status 1."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except TaptError as exc:
            raise _tapt_error(exc) from exc

    return wrapper


class _Interrupted(click.ClickException):
    """Ctrl-C: exit 130 like an interrupted shell job, with one line saying what was kept."""

    exit_code = 130


class _BrokenPipe(Exception):
    """Whoever read stdout stopped reading (`tapt ... | head`)."""


class TaptCommand(click.Command):
    """A command whose failures become one line: tapt errors name this command's flags,
    Ctrl-C exits 130."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except TaptError as exc:
            raise _tapt_error(exc, ctx) from exc
        except KeyboardInterrupt as exc:
            raise _Interrupted("interrupted") from exc
        except OSError as exc:
            if exc.errno == errno.EPIPE:
                raise _BrokenPipe() from exc
            raise


class CommandGroup(click.Group):
    """A group of commands whose failures become one line (its commands are `TaptCommand`s)."""

    command_class = TaptCommand
    group_class = type
