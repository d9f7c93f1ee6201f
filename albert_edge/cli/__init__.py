"""The albert-edge command line. Each command lives in its own module and calls one library
function; heavy libraries (torch, tensorflow) are imported inside the commands, so --help is fast
and the device-side commands work without them."""

from __future__ import annotations

import logging

import click

from ..errors import AlbertEdgeError


class _Group(click.Group):
    """Turns AlbertEdgeError (bad input) into one line on stderr and exit code 2."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except AlbertEdgeError as exc:
            err = click.ClickException(str(exc))
            err.exit_code = 2
            raise err from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="albert-edge")
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
def main(verbose: int) -> None:
    """ALBERT from PyTorch to phones, Raspberry Pis and Jetsons.

    Build or load a checkpoint, convert it to ONNX or TFLite with the shared weights stored
    once, quantize it, and measure size and latency on the device.
    """
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


def _register() -> None:
    # One module per command (group); each import is cheap: no torch, no tensorflow.
    from . import convert, demo, info, params, pipeline, profile, quantize, report, tokenizer, train

    for module in (params, info, tokenizer, convert, quantize, train, profile, report, pipeline, demo):
        for command in module.COMMANDS:
            main.add_command(command)


_register()
