"""The albert-edge command line. Each command lives in its own module and calls one library
function; heavy libraries (torch, tensorflow) are imported inside the commands, so --help is fast
and the device-side commands work without them.

Every command keeps one contract, enforced here and nowhere else:

- an error the user can fix (``albert_edge.errors.user_message``) is one line on stderr, exit 2;
- Ctrl-C (SIGINT) exits 130 and SIGTERM exits 143, the shell's codes for those signals; both
  unwind the command like an exception, so every temporary file is removed on the way out;
- output cut off by its reader (``albert-edge params albert-base-v2 | head -1``) ends the
  command quietly with exit 141, the code of a program that SIGPIPE stops;
- any other exception is a bug: one line saying so and how to report it, exit 1, with the
  traceback only under ``-v``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import stat
import sys
import traceback
import warnings

import click

from ..errors import user_message
from ._exits import EXIT_PIPE_CLOSED, EXIT_USER_ERROR, Terminated, fail, signalled


class _Group(click.Group):
    """Applies the error contract above to every command."""

    def invoke(self, ctx: click.Context):
        verbose = ctx.params.get("verbose", 0) or 0
        _quiet_native_logs(verbose)
        piped = _stdout_is_pipe()
        with _terminate_as_interrupt():
            try:
                result = super().invoke(ctx)
                sys.stdout.flush()  # a closed pipe shows here, not while the interpreter exits
                return result
            except BrokenPipeError:
                if not _stdout_closed():
                    raise
                raise click.exceptions.Exit(EXIT_PIPE_CLOSED) from None
            except SystemExit as exc:  # rich ends a closed pipe with exit 1, its output sent to /dev/null
                if exc.code == 1 and piped and _stdout_is_devnull():
                    raise click.exceptions.Exit(EXIT_PIPE_CLOSED) from None
                raise
            except click.UsageError as exc:  # one line too, naming the help to read
                where = exc.ctx.command_path if exc.ctx is not None else ctx.command_path
                raise fail(f"{exc.format_message()} (see '{where} --help')", EXIT_USER_ERROR) from None
            except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
                raise
            except Terminated:
                raise signalled(signal.SIGTERM) from None
            except KeyboardInterrupt:
                raise signalled(signal.SIGINT) from None
            except Exception as exc:
                from ..profile.runner import Interrupted  # the profiler's children stopped by a signal

                if isinstance(exc, Interrupted) and exc.signum in (signal.SIGINT, signal.SIGTERM):
                    raise signalled(exc.signum) from None
                message = user_message(exc)
                if message is not None:
                    logging.getLogger(__name__).debug("details", exc_info=True)
                    raise fail(message, EXIT_USER_ERROR) from None
                if verbose:
                    traceback.print_exc()
                from .. import __version__

                raise fail(f"internal error in albert-edge {__version__} ({type(exc).__name__}: "
                            f"{' '.join(str(exc).split())[:300]}). This is a bug: please report it with the "
                            "command you ran and the output of the same command with -v",
                            1) from None


def _stdout_is_pipe() -> bool:
    try:
        return stat.S_ISFIFO(os.fstat(sys.__stdout__.fileno()).st_mode)
    except (AttributeError, ValueError, OSError):
        return False


def _stdout_is_devnull() -> bool:
    try:
        return os.path.samestat(os.fstat(sys.__stdout__.fileno()), os.stat(os.devnull))
    except (AttributeError, ValueError, OSError):
        return False


def _stdout_closed() -> bool:
    """Whether standard output is a pipe whose reader has gone (``| head -1``). If so it is
    pointed at /dev/null, so that nothing more written, nor the interpreter's last flush,
    raises again; the command then ends quietly, as a program stopped by SIGPIPE does."""
    if not _stdout_is_pipe():
        return False
    try:
        fd = sys.__stdout__.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    except (AttributeError, ValueError, OSError):
        return False
    return True


@contextlib.contextmanager
def _terminate_as_interrupt():
    """SIGTERM (a timeout, a service manager, `kill`) unwinds like Ctrl-C instead of killing the
    process mid-write. A second SIGTERM while that cleanup runs is ignored, so it can finish.

    Python swallows an exception raised where it cannot propagate (a weakref callback, a
    ``__del__``: "Exception ignored in ..."): such a Terminated or KeyboardInterrupt is not
    printed but its signal is sent again (:func:`_unraisable`), to be raised at the next point
    that can take it."""
    def terminate(signum, frame):
        if _in_hook(frame):  # raised here, it would be swallowed again: later
            _send_soon(signal.SIGTERM)
            return
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated

    try:
        previous = signal.signal(signal.SIGTERM, terminate)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    previous_hook = sys.unraisablehook
    sys.unraisablehook = functools.partial(_unraisable, terminate, previous_hook)
    try:
        yield
    finally:
        sys.unraisablehook = previous_hook
        signal.signal(signal.SIGTERM, previous)


def _unraisable(terminate, previous_hook, unraisable) -> None:
    """The unraisable hook while a command runs: an interrupt raised where Python could not
    propagate it is sent again, its handler back in place; anything else as before."""
    if not isinstance(unraisable.exc_value, KeyboardInterrupt):
        previous_hook(unraisable)
        return
    if isinstance(unraisable.exc_value, Terminated):
        signal.signal(signal.SIGTERM, terminate)
        _send_soon(signal.SIGTERM)
    else:
        _send_soon(signal.SIGINT)


def _send_soon(signum: int) -> None:
    """``signum`` to this process in a moment, from a thread of its own: the main thread takes it
    once it is out of the hook and the callback that swallowed it."""
    import threading
    import time

    def send() -> None:
        time.sleep(0.01)
        os.kill(os.getpid(), signum)

    threading.Thread(target=send, daemon=True).start()


def _in_hook(frame) -> bool:
    while frame is not None:
        if frame.f_code is _unraisable.__code__ or frame.f_code is _send_soon.__code__:
            return True
        frame = frame.f_back
    return False


def _quiet_native_logs(verbose: int) -> None:
    """TensorFlow and TFLite write C++ logs straight to file descriptor 2, before any setting
    is read and again while the process exits (absl's "before InitializeLog" lines, CUDA
    probing, XNNPACK and accelerator registries). Unless -v, descriptor 2 goes to /dev/null for
    the rest of the process and Python's sys.stderr (click, rich, logging) to a copy of the real
    one. Only in a real process: under a test runner sys.stderr is not descriptor 2."""
    try:
        real = not verbose and sys.stderr.fileno() == 2
    except (AttributeError, ValueError, OSError):
        real = False
    if not real:
        return
    python_stderr = sys.stderr
    python_stderr.flush()
    copy = os.dup(2)
    sys.stderr = open(copy, "w", buffering=1, encoding=python_stderr.encoding,  # noqa: SIM115
                      errors=python_stderr.errors)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)


def quiet_libraries(verbose: int) -> None:
    """TensorFlow's and absl's C++ start-up logs (CUDA probing included) and library warnings
    are noise around the line that matters; they show with -v. The environment must be set
    before tensorflow is imported, which the commands do lazily, after this."""
    if verbose:
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # C++ logs: fatal only
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    os.environ.setdefault("GLOG_minloglevel", "3")
    os.environ.setdefault("HF_HUB_VERBOSITY", "error")  # huggingface_hub sets its level on import
    for name in ("tensorflow", "absl", "h5py", "jax", "huggingface_hub"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.simplefilter("ignore")


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="albert-edge")
@click.option("-v", "--verbose", count=True,
              help="More log output (-v info, library logs and tracebacks; -vv debug).")
def main(verbose: int) -> None:
    """ALBERT from PyTorch to phones, Raspberry Pis and Jetsons.

    Build or load a checkpoint, convert it to ONNX, ONNX Runtime Mobile (.ort), TFLite,
    MediaPipe Tasks or ExecuTorch (.pte) with the shared weights stored once, quantize it, and
    measure size and latency on the device.

    Exit codes: 0 done, 1 a check failed (or a bug), 2 bad input or an output that cannot be
    written, 130 interrupted (Ctrl-C), 141 output pipe closed (| head), 143 terminated (SIGTERM).
    """
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    quiet_libraries(verbose)


def _register() -> None:
    # One module per command (group); each import is cheap: no torch, no tensorflow.
    from . import convert, demo, info, params, pipeline, profile, quantize, report, tokenizer, train

    for module in (params, info, tokenizer, convert, quantize, train, profile, report, pipeline, demo):
        for command in module.COMMANDS:
            main.add_command(command)


_register()
