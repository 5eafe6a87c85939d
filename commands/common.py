"""What the command line's entry point (tapt.cli) and its commands both use: the click
settings, the registry of commands, the state of the running invocation, and turning failures
into one-line errors.

Here, not in tapt.cli, so that the commands never import the module that assembles them.
"""

from __future__ import annotations

import errno
import functools
from typing import TypeVar

import click

from tapt.errors import TaptError
from tapt.util.registry import Registry

CLICK_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
_STATE = {"verbose": 0}  # -v count of the running invocation, for tracebacks of internal errors
# SIGTERM: `terminated` once one arrived; `stopping` once _Terminated was raised or the command's
# outcome is decided (later signals only set `terminated`); `reported` once an Error line is out
_STATE.update(terminated=False, stopping=False, reported=False, code=None)

# Every module of this package but these holds commands: `tapt.cli` adds each one registered.
COMMANDS: Registry[click.Command] = Registry(
    "command", __name__.rpartition(".")[0], ("common", "options"),
    origin=lambda c: f"{c.callback.__module__}.{c.callback.__qualname__}" if c.callback else "")
C = TypeVar("C", bound=click.Command)


def register(command: C) -> C:
    """Decorator (over click's): make a command a command of `tapt` (`tapt NAME`).

    A subcommand is added to its group with the group's own decorator (`@index.command`).
    """
    COMMANDS.add(command.name, command)
    return command


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
    Ctrl-C exits 130. It takes `-q` and `-v` after its name too, and `--json` before it
    (`tapt --json COMMAND`) where it has `--json`; an out-of-range number is status 1."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        taken = {opt for param in self.params for opt in getattr(param, "opts", [])}
        self.params += [o for o in common_options() if not set(o.opts) & taken]
        for param in self.params:
            if isinstance(param.type, click.types._NumberRangeBase):
                param.type = _InRange(param.type)

    def invoke(self, ctx: click.Context):
        root = ctx.find_root().obj
        if isinstance(root, dict) and root.get("json"):
            if "as_json" not in ctx.params:
                raise click.UsageError(f"{ctx.command_path} has no --json", ctx=ctx)
            ctx.params["as_json"] = True
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


class ValueRefused(click.BadParameter):
    """An option value of the right type that the command refuses (out of its range): exit
    status 1, as every refusal of a value the library makes (`--budget 0`, `--lr nan`); a value
    that is not of the option's type at all (`--steps x`, a choice not offered) is a usage
    error, status 2 (docs/reference/reliability.md, Exit statuses)."""

    exit_code = 1

    def format_message(self) -> str:
        if isinstance(self.param_hint, str):
            return f"{self.param_hint}: {self.message}"
        if self.param is None:
            return self.message
        return f"{_flag_of(self.param.name, self.ctx)}: {self.message}"


class _InRange(click.ParamType):
    """A click number range whose out-of-range values are `ValueRefused` (status 1); its
    values that are not numbers stay usage errors (status 2). `TaptCommand` wraps every
    `click.IntRange` and `click.FloatRange` of its options in one."""

    def __init__(self, inner: click.types._NumberRangeBase) -> None:
        self.inner = inner
        self.name = inner.name

    def convert(self, value, param, ctx):
        number = (click.INT if isinstance(self.inner, click.IntRange) else click.FLOAT
                  ).convert(value, param, ctx)      # not a number: a usage error (status 2)
        try:
            return self.inner.convert(number, param, ctx)
        except click.BadParameter:
            raise ValueRefused(f"must be in the range {self.inner._describe_range()}, got "
                               f"{number}", ctx=ctx, param=param) from None

    def get_metavar(self, param, ctx=None):
        return self.inner.get_metavar(param, ctx)

    def to_info_dict(self):
        return self.inner.to_info_dict()

    def __repr__(self) -> str:
        return repr(self.inner)


def _quiet(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """`-q` after the command: as `tapt -q COMMAND` (no progress bars, warnings and errors
    only)."""
    import logging

    if value:
        root = ctx.find_root()
        if isinstance(root.obj, dict):
            root.obj["progress"] = False
        logging.getLogger().setLevel(logging.WARNING)


def _verbose(ctx: click.Context, param: click.Parameter, value: int) -> None:
    """`-v` after the command: as `tapt -v COMMAND` (added to any given before it)."""
    import logging

    if value:
        _STATE["verbose"] = _STATE.get("verbose", 0) + value
        logging.getLogger().setLevel(logging.DEBUG if _STATE["verbose"] > 1 else logging.INFO)


def common_options() -> list[click.Option]:
    """The options every command takes after its name as well as before (`tapt -q select ...`
    and `tapt select ... -q`)."""
    return [click.Option(["-q", "--quiet"], is_flag=True, expose_value=False, callback=_quiet,
                         help="Warnings and errors only, no progress bars (as tapt -q)."),
            click.Option(["-v", "--verbose"], count=True, expose_value=False,
                         callback=_verbose, help="More log output (as tapt -v; -vv for debug "
                                                 "and tracebacks).")]


class CommandGroup(click.Group):
    """A group of commands whose failures become one line (its commands are `TaptCommand`s)."""

    command_class = TaptCommand
    group_class = type
