"""`albert-edge report`: parameters, compute, files, accuracy and latency of one model, side by
side, as markdown, self-contained HTML, JSON and charts."""

from __future__ import annotations

from pathlib import Path

import click

from ._output import Column, console, err_console, print_json, show_table
from ._types import POSITIVE_INTS


@click.command("report", short_help="Model-size report: parameters, compute, files, accuracy, latency; with charts.")
@click.argument("sources", nargs=-1, required=True, metavar="SOURCE...")
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path),
              help="Directory to write report.md, report.html, report.json and charts/ into.")
@click.option("--seq-len", "seq_lens", default="32,128,512", show_default=True, type=POSITIVE_INTS,
              help="Sequence lengths of the compute and activation-memory table (comma-separated).")
@click.option("--title", default=None, help="Report title (default: 'albert-edge report: MODEL').")
@click.option("--name", default=None, help="The model's name in the report (default: the preset, file or directory "
              "name); a preset name also brings the paper's published parameter count.")
@click.option("--no-charts", is_flag=True, help="Tables only, even when matplotlib is installed.")
@click.option("--force", is_flag=True, help="Replace --out when it already holds files.")
@click.option("--json", "as_json", is_flag=True, help="Print report.json's figures instead of the tables.")
def report(sources: tuple[str, ...], out_dir: Path, seq_lens: tuple[int, ...], title: str | None, name: str | None,
           no_charts: bool,
           force: bool, as_json: bool) -> None:
    """Write a model-size report of one model into --out.

    Each SOURCE is a preset name (albert-base-v2, ...), a config.json, a checkpoint directory or
    Hugging Face model id (org/name[@revision]: its config.json is fetched), a conversion
    directory (its manifest.json), .onnx/.tflite files, profile results (the JSON of `albert-edge
    profile --json`, or the JSONL of `--append`) or a `quantize --json` result.
    Give what you have: the report says what it lacks. Figures are those of `params`, `inspect`
    and the profile records, unchanged; sources about different models are refused.
    """
    from ..report import tables, write_report

    for option, value in (("--title", title), ("--name", name)):
        if value is not None and not value.strip():
            raise click.BadParameter("give some text, or leave the option out", param_hint=option)

    with err_console.status("report") as status:
        result = write_report(sources, out_dir, force=force, seq_lens=seq_lens, title=title, name=name,
                              charts=not no_charts, on_step=lambda what: status.update(f"report: {what}"))
    if as_json:
        print_json(result.data)
        return
    for table in tables(result.data):
        columns = [Column(c, i in table.right, drop=None if i == 0 or i in table.keep else len(table.columns) - i)
                   for i, c in enumerate(table.columns)]
        show_table(table.title, columns, table.rows)
        if table.lead:
            console.print(table.lead)
    for line in result.data["missing"]:
        console.print(f"not in this report: {line}")
    if result.data.get("chart_note"):
        console.print(result.data["chart_note"])
    console.print(f"report: {result.html}  (and report.md, report.json, {len(result.data['charts'])} charts)")


COMMANDS = [report]
