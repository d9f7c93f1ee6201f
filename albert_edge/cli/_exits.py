"""The exit codes and one-line endings every command shares (see the package's contract)."""

from __future__ import annotations

import signal

import click

__all__ = ["EXIT_USER_ERROR", "EXIT_INTERRUPTED", "EXIT_TERMINATED", "EXIT_PIPE_CLOSED", "Terminated", "fail",
           "signalled", "stopped_keeping"]

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_TERMINATED = 143  # 128 + SIGTERM
EXIT_PIPE_CLOSED = 141  # 128 + SIGPIPE: what `cmd | head -1` reports for any program the pipe stops


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is, so that cleanup written for Ctrl-C runs for it too."""


def fail(message: str, code: int) -> click.ClickException:
    err = click.ClickException(message)
    err.exit_code = code
    return err


def signalled(signum: int, left: str | None = None) -> click.ClickException:
    """The one line and exit code of a command that SIGTERM or SIGINT (Ctrl-C) stopped; ``left``
    says what it left behind (default: albert_edge.files.interrupt_note, the outputs it completed)."""
    if left is None:
        from ..files import interrupt_note

        left = interrupt_note()
    if signum == signal.SIGTERM:
        return fail(f"terminated (SIGTERM); {left}", EXIT_TERMINATED)
    return fail(f"interrupted; {left}", EXIT_INTERRUPTED)


def stopped_keeping(exc: KeyboardInterrupt, kept: str) -> click.ClickException:
    """The one line of a command stopped by ``exc`` (Ctrl-C or SIGTERM) that keeps finished work
    for the next run: ``kept`` says where."""
    return signalled(signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT, kept)
