"""`albert-edge profile`: latency, memory and per-operator cost of model files on this device.

The command reads its options (declared, in the sections of its --help, in :mod:`._profile_options`)
into :class:`albert_edge.profile.ProfileOptions`, calls :func:`albert_edge.profile.run`, and prints
the result (:mod:`._profile_print`) or its JSON."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..errors import AlbertEdgeError
from ._output import Steps, print_json
from ._profile_options import profile_options
from ._profile_print import print_result
from ._types import gpu_precision
from ._sections import SectionedCommand

if TYPE_CHECKING:
    from ..profile import ProfileOptions


@click.command("profile", cls=SectionedCommand,
               short_help="Latency, memory and per-op cost of .onnx / .tflite files on this device.")
@click.argument("model_files", nargs=-1, required=True, type=click.Path(path_type=Path))
@profile_options
def profile(model_files: tuple[Path, ...], **given: Any) -> None:
    """Measure each MODEL_FILE (.onnx / .tflite) on this device: load time, first call, latency
    percentiles (p50 is the headline, p90 beside it), memory by phase and, with --ops, the cost per operator.
    Each file x setting runs in a fresh child process, so its memory is its own."""
    from ..profile import run
    from ..profile.runner import Interrupted

    options = _options(given)
    if given["fail_on_regression"] and given["baseline"] is None:
        raise click.UsageError("--fail-on-regression needs --baseline")
    try:
        with Steps("profile") as step:
            result = run(model_files, options, progress=step)
    except Interrupted as exc:
        click.echo(f"Interrupted: {exc}; child processes stopped", err=True)
        sys.exit(128 + exc.signum)
    if given["as_json"]:
        print_json(result.to_dicts())
    else:
        print_result(result, given["baseline"])
    if result.remote_error is not None:
        raise result.remote_error
    if given["fail_on_regression"] and result.regression:
        click.echo("Error: regression against the baseline", err=True)
        sys.exit(1)


def _options(given: dict[str, Any]) -> ProfileOptions:
    """The command's options as the library's :class:`~albert_edge.profile.ProfileOptions`: each
    setting an option of the same name gives as it is, the lists and the timing read here."""
    from ..profile import (MLPERF, BaselineOptions, EstimateOptions, OutputOptions, ProfileOptions,
                           ProfileSettings, RemoteOptions)
    from ..profile.settings import parse_runtimes

    runs, min_seconds = given["runs"], given["min_seconds"]
    if given["mlperf"]:
        runs, min_seconds = max(runs, MLPERF["runs"]), max(min_seconds, MLPERF["min_seconds"])
    as_given = {f.name: given[f.name] for f in dataclasses.fields(ProfileSettings) if f.name in given}
    read = {"seq_lens": _int_list(given["seq_len"], "--seq-len"), "batches": _int_list(given["batch"], "--batch"),
            "threads": _int_list(given["threads"], "--threads"), "delegates": _name_list(given["delegate"]),
            "providers": _name_list(given["provider"]), "runs": runs, "min_seconds": min_seconds,
            "max_seconds": max(given["max_seconds"], min_seconds),
            "runtimes": parse_runtimes(_name_list(given["runtime"])),
            "gpu_precision": gpu_precision(given["accelerator"], given["gpu_precision"])}
    return ProfileOptions(
        settings=ProfileSettings(**{**as_given, **read}),
        output=OutputOptions(csv=given["csv_path"], append=given["append_path"], force=given["force"]),
        baseline=BaselineOptions(path=given["baseline"], threshold=given["threshold"]),
        remote=RemoteOptions(hosts=given["remote"], ssh_config=given["ssh_config"], remote_dir=given["remote_dir"],
                             python=given["remote_python"]),
        estimates=EstimateOptions(devices=given["estimate_devices"] or (), calibration=given["calibration"],
                                  recalibrate=given["recalibrate"]))


def _int_list(text: str, option: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise AlbertEdgeError(f"{option} takes whole numbers separated by commas, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise AlbertEdgeError(f"{option} values must be 1 or more, got {text!r}")
    return values


def _name_list(text: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(",") if v.strip())


COMMANDS = [profile]
