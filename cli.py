"""tapt: choose continued-pretraining data for a task from a corpus embedded once.

The command line's entry point: what must run first (the signal handlers, installed before
click is imported), the `tapt` group assembled from the commands registered in the modules of
`tapt.commands` (`tapt.commands.common.register`), and every
failure turned into one line, `Error: ...`, and a non-zero exit status. The commands parse,
print and call the Python API (`tapt.api`, whose option metadata their options are built from)
and nothing deeper: import-linter contracts in pyproject.toml and tests/api/test_api_parity.py
keep it so.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import logging
import os
import signal
import sys
import threading
import time
import traceback
from typing import Any


def _stopped_while_starting(signum: int, frame: object) -> None:
    """Ctrl-C or SIGTERM while the command line is still importing (before `main` installs
    its handlers, and before anything is written): one line, not an import's traceback."""
    interrupted = signum == signal.SIGINT
    os.write(2, b"Error: interrupted\n" if interrupted else b"Error: terminated (SIGTERM)\n")
    os._exit(130 if interrupted else 143)


if (os.path.basename(sys.argv[0] if sys.argv else "") == "tapt"   # the console script only
        and threading.current_thread() is threading.main_thread()):
    signal.signal(signal.SIGINT, _stopped_while_starting)
    signal.signal(signal.SIGTERM, _stopped_while_starting)

import click  # noqa: E402 - after the handlers above: importing takes a few tenths of a second

from tapt.commands.common import (
    _STATE,
    CLICK_SETTINGS,
    COMMANDS,
    CommandGroup,
    _BrokenPipe,
    _Interrupted,
    _one_line,
)
from tapt.errors import PluginError, TaptError  # noqa: E402


class _Terminated(KeyboardInterrupt):
    """SIGTERM (a job scheduler's stop, `kill`), raised where the process is, so that every
    cleanup that runs for Ctrl-C runs for it too; the command exits 143 with one Error line."""


def _importing(frame: object) -> bool:
    """True while Python imports a module: an exception raised there may reach the importing
    code (C code in particular) as an ImportError, then reported as a missing package."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _on_sigterm(signum: int, frame: object) -> None:
    """Raise _Terminated where the process is, once; inside an import, a moment later (the
    signal is sent again until it lands outside one)."""
    _STATE["terminated"] = True
    if _STATE["stopping"]:          # raised once already, or at exit: the exit status says it
        return
    first = _STATE.setdefault("deferred", time.monotonic())
    if _importing(frame) and time.monotonic() - first < 5:     # an import that hangs: not forever
        again = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGTERM))
        again.daemon = True
        again.start()
        return
    _STATE["stopping"] = True
    raise _Terminated()


def _interrupted_at_exit(signum: int, frame: object) -> None:
    _STATE["interrupted"] = True


def _terminated_at_exit() -> None:
    """The last atexit handler of the `tapt` command (`main` ran): a SIGTERM (or Ctrl-C) while
    the interpreter exits is status 143 (130) and the one line, never a traceback of an atexit
    handler and status 0. The process then ends here: past this point the interpreter restores
    the default handlers, and a SIGTERM during its teardown would kill it."""
    if _STATE["code"] is None:       # imported as a library, not run as the command
        return
    code = _STATE["code"] if isinstance(_STATE["code"], int) else 1
    logging.shutdown()
    with contextlib.suppress(OSError, ValueError, AttributeError):
        sys.stdout.flush()
    if _STATE["terminated"] and code != 143:
        code, what = 143, b"terminated (SIGTERM)"
    elif _STATE.get("interrupted") and code not in (130, 143):
        code, what = 130, b"interrupted"
    else:
        what = b""
    if what and not _STATE["reported"]:
        os.write(2, b"Error: " + what + b" as the command finished; what it wrote is complete\n")
    with contextlib.suppress(OSError, ValueError, AttributeError):
        sys.stderr.flush()
    os._exit(code)


atexit.register(_terminated_at_exit)    # at import: it runs after every atexit handler since


def _terminated(exc: BaseException) -> bool:
    while exc is not None:
        if isinstance(exc, _Terminated):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


class TaptGroup(CommandGroup):
    """The command tree: subcommands are `TaptCommand`s, and `main` prints every failure as
    one `Error:` line (usage errors point to the command's -h; internal errors say how to see
    the traceback, which -vv prints)."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        _STATE.update(verbose=0, stopping=False, reported=False)
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, _stopped_while_starting)):
            signal.signal(signal.SIGTERM, _on_sigterm)  # run without `main` (cli.main(args=...))
        if sys.stdout is None:               # started with stdout closed (>&-): nothing to show
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
        try:
            if _BROKEN_PLUGIN:
                raise click.ClickException(str(_BROKEN_PLUGIN[0]))
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            sys.stdout.flush()               # a closed pipe shows here, not at interpreter exit
        except click.exceptions.NoArgsIsHelpError as exc:
            # `tapt` or `tapt select` alone asks for the help: shown as -h shows it, status 0
            # (not a failure; a failure is one Error line, see docs/reference/reliability.md)
            click.echo(exc.ctx.get_help() if exc.ctx is not None else exc.format_message())
            code = 0
        except click.UsageError as exc:
            hint = f" (see '{exc.ctx.command_path} -h')" if exc.ctx is not None else ""
            code = _fail(_one_line(exc.format_message()) + hint, exc.exit_code)
        except click.ClickException as exc:
            message, code = _one_line(exc.format_message()), exc.exit_code
            if isinstance(exc, _Interrupted) and (_terminated(exc) or _STATE["terminated"]):
                rest = (message[len("interrupted"):] if message.startswith("interrupted")
                        else f": {message}")
                message, code = "terminated (SIGTERM)" + rest, 143
            code = _fail(message, code)
        except (click.Abort, KeyboardInterrupt) as exc:
            code = (_fail("terminated (SIGTERM)", 143) if _terminated(exc) or _STATE["terminated"]
                    else _fail("interrupted", 130))
        except _BrokenPipe:
            code = _quiet_broken_pipe()
        except BrokenPipeError:
            code = _quiet_broken_pipe()
        except OSError as exc:
            if exc.filename is not None or exc.errno not in _STDOUT_ERRNOS:
                code = _internal(exc)
            else:                            # stdout on a full disk (> /dev/full), a dead tty
                _quiet_broken_pipe()
                code = _fail(f"cannot write standard output: {exc.strerror or exc}", 1)
        except Exception as exc:  # noqa: BLE001 - the last resort: one line, traceback at -vv
            code = _internal(exc)
        _STATE["stopping"] = True
        if _STATE["terminated"] and code not in (141, 143):
            # a SIGTERM that some code swallowed, or that came as the command finished
            code = _fail("terminated (SIGTERM) as the command finished; what it wrote is "
                         "complete" if code == 0 else "terminated (SIGTERM)", 143)
        sys.exit(code if isinstance(code, int) else 0)


# errors of a write with no file name: standard output (the commands name every file they write)
_STDOUT_ERRNOS = (errno.ENOSPC, errno.EIO, errno.EBADF, errno.EDQUOT, errno.EFBIG)


def _internal(exc: BaseException) -> int:
    """An error no layer turned into a message: one line, the traceback with -vv."""
    if _STATE["verbose"] >= 2:
        traceback.print_exception(exc, file=sys.stderr)
    return _fail(f"internal error: {type(exc).__name__}: {_one_line(exc)} (run with -vv "
                 "for the traceback)", 1)


class _LineTracking:
    """Standard error, noting whether what was written last left a line open (a progress
    bar's `\r` redraws): the Error line then starts a line of its own where stderr is a file
    or a pipe, so that a reader finds it at a line's start."""

    def __init__(self, stream: Any) -> None:
        self._stream, self.mid_line = stream, False

    def write(self, text: str) -> int:
        written = self._stream.write(text)
        if text:
            self.mid_line = not text.endswith("\n")
        return written

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _fail(message: str, code: int) -> int:
    """Print the command's one Error line (once) and return its exit status; after a SIGTERM,
    whatever failed reports the termination (an import it broke is no missing package)."""
    _STATE["stopping"] = True
    if _STATE["terminated"] and code != 143:
        message, code = "terminated (SIGTERM)", 143
    if not _STATE["reported"]:
        _STATE["reported"] = True
        stream = sys.stderr
        opened = getattr(stream, "mid_line", False) is True and not _isatty(stream)
        click.echo(f"{chr(10) if opened else ''}Error: {message}", err=True)
    return code


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _quiet_broken_pipe() -> int:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (tests): nothing to flush
        pass
    return 141  # 128 + SIGPIPE, as a shell reports a reader that went away


@click.group("tapt", cls=TaptGroup, context_settings=CLICK_SETTINGS)
@click.version_option(package_name="tapt")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug and tracebacks).")
@click.option("-q", "--quiet", is_flag=True, help="Warnings and errors only, no progress bars.")
@click.option("--json", "as_json", is_flag=True,
              help="The command's output as JSON (as COMMAND --json, where it has --json).")
@click.pass_context
def cli(ctx: click.Context, verbose: int, quiet: bool, as_json: bool) -> None:
    """Select task-like continued-pretraining data from a corpus indexed once.

    \b
      tapt index build corpus/ --out idx          # embed a corpus once
      tapt select centroid idx --task task.txt --budget 0.2 --out sel.jsonl
      tapt export sel.jsonl --format parquet --out train.parquet
      tapt eval sel.jsonl --index idx --label-field domain --label medical

    -q, -v and --json may also follow the command's name.
    """
    _STATE["verbose"] = verbose
    level = logging.WARNING if quiet else (logging.DEBUG if verbose > 1 else logging.INFO)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if verbose < 2:
        for noisy in ("sentence_transformers", "transformers", "faiss", "httpx", "huggingface_hub"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    ctx.obj = {"progress": not quiet, "json": as_json}


_BROKEN_PLUGIN: list[TaptError] = []
try:
    for _command in COMMANDS:     # every command module of tapt.commands, and the plugins
        cli.add_command(_command)
except PluginError as _exc:       # reported by `main` as its one Error line
    _BROKEN_PLUGIN.append(_exc)


def main() -> None:
    """The `tapt` console script: every outcome is an exit status, every failure one line."""
    _STATE.update(terminated=False, stopping=False, reported=False, code=None,
                  interrupted=False)
    _STATE.pop("deferred", None)
    if sys.stderr is not None and not isinstance(sys.stderr, _LineTracking):
        sys.stderr = _LineTracking(sys.stderr)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)   # Ctrl-C: KeyboardInterrupt
        signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        cli(prog_name="tapt")
        code = 0
    except SystemExit as exc:
        code = exc.code
    except KeyboardInterrupt as exc:    # a signal after the command's own handling, before exit
        code = (_fail("terminated (SIGTERM)", 143) if _terminated(exc) or _STATE["terminated"]
                else _fail("interrupted", 130))
    _STATE["stopping"] = True
    _STATE["code"] = code
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _interrupted_at_exit)  # no KeyboardInterrupt in atexit
    sys.exit(code)


if __name__ == "__main__":
    main()
