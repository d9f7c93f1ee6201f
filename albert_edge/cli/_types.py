"""Option types every command shares, so the same nonsense is refused the same way everywhere."""

from __future__ import annotations

import math

import click

__all__ = ["POSITIVE_INT", "COUNT", "PORT", "SECONDS", "POSITIVE_SECONDS", "PERCENT", "POSITIVE_INTS", "threads_option",
           "force_option"]

POSITIVE_INT = click.IntRange(min=1)  # sizes, steps, samples: 0 or less is never meant
COUNT = click.IntRange(min=0)  # "every N" / "keep N" options where 0 means none or all
PORT = click.IntRange(min=1, max=65535)  # a TCP port to listen on


class _Seconds(click.ParamType):
    """A finite number of seconds, at least 0 (or above 0 with ``positive``): click's FloatRange
    lets nan and inf through, which then fail deep inside the work."""

    name = "seconds"

    def __init__(self, positive: bool = False):
        self.positive = positive

    def convert(self, value, param, ctx):
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not math.isfinite(number) or number < 0 or (self.positive and number == 0):
            self.fail(f"{value!r} is not a finite number of seconds {'above' if self.positive else 'from'} 0",
                      param, ctx)
        return number


SECONDS = _Seconds()
POSITIVE_SECONDS = _Seconds(positive=True)


class _Percent(click.ParamType):
    """A finite percentage above 0 and below 100, returned as a share (5 -> 0.05)."""

    name = "percent"

    def convert(self, value, param, ctx):
        try:
            number = float(str(value).rstrip("%"))
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a percentage", param, ctx)
        if not math.isfinite(number) or not 0 < number < 100:
            self.fail(f"{value!r} is not a percentage above 0 and below 100", param, ctx)
        return number / 100


PERCENT = _Percent()


class _PositiveInts(click.ParamType):
    """A comma-separated list of whole numbers of at least 1 ("32,128"), as a tuple."""

    name = "N,..."

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        try:
            numbers = tuple(int(v) for v in str(value).split(",") if v.strip())
        except ValueError:
            self.fail(f"{value!r} is not a comma-separated list of whole numbers", param, ctx)
        if not numbers or any(n < 1 for n in numbers):
            self.fail(f"{value!r}: give whole numbers of at least 1, e.g. 32,128", param, ctx)
        return numbers


POSITIVE_INTS = _PositiveInts()


def threads_option(help: str = "Runtime threads (at least 1; default: the runtime's choice).", **kwargs):
    """The --threads option: at least 1, or left out for the runtime's own choice."""
    return click.option("--threads", type=POSITIVE_INT, default=None, help=help, **kwargs)


def force_option(what: str):
    """The --force option of a command whose output ``what`` may already exist."""
    return click.option("--force", is_flag=True,
                        help=f"Write even when {what}; without it the command refuses to replace anything.")


GPU_PRECISIONS = ("fp32", "fp16")
DEFAULT_GPU_PRECISION = "fp32"


def gpu_precision_option(help: str):
    """--gpu-precision, default fp32; given without --accelerator gpu it is refused
    (:func:`gpu_precision`), not passed over."""
    return click.option("--gpu-precision", type=click.Choice(GPU_PRECISIONS), default=None,
                        show_default=DEFAULT_GPU_PRECISION, help=help)


def gpu_precision(accelerator: str, given: str | None) -> str:
    """The GPU arithmetic to use: ``given`` (--gpu-precision), which only goes with
    --accelerator gpu, else fp32."""
    if given is not None and accelerator != "gpu":
        raise click.UsageError(f"--gpu-precision {given} sets the GPU's arithmetic and goes with --accelerator gpu "
                               f"(given: --accelerator {accelerator}); add --accelerator gpu or leave it out")
    return given or DEFAULT_GPU_PRECISION
