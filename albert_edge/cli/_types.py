"""Option types every command shares, so the same nonsense is refused the same way everywhere."""

from __future__ import annotations

import click

__all__ = ["POSITIVE_INT", "COUNT", "threads_option", "force_option"]

POSITIVE_INT = click.IntRange(min=1)  # sizes, steps, samples: 0 or less is never meant
COUNT = click.IntRange(min=0)  # "every N" / "keep N" options where 0 means none or all


def threads_option(help: str = "Runtime threads (at least 1; default: the runtime's choice).", **kwargs):
    """The --threads option: at least 1, or left out for the runtime's own choice."""
    return click.option("--threads", type=POSITIVE_INT, default=None, help=help, **kwargs)


def force_option(what: str):
    """The --force option of a command whose output ``what`` may already exist."""
    return click.option("--force", is_flag=True,
                        help=f"Write even when {what}; without it the command refuses to replace anything.")
