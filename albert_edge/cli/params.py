"""`albert-edge params`: where an ALBERT's parameters are, beside BERT of the same shape."""

from __future__ import annotations

import click

from ._output import console, fmt_count, print_json, print_table

HEAD_CHOICES = ["base", "mlm", "pretraining", "classification", "token-classification", "qa", "multiple-choice"]


@click.command("params", short_help="Where the parameters are, beside BERT of the same shape.")
@click.argument("source", metavar="NAME_OR_CONFIG_OR_CHECKPOINT")
@click.option("--head", type=click.Choice(HEAD_CHOICES), default="base", show_default=True,
              help="Count this head's parameters too.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def params(source: str, head: str, as_json: bool) -> None:
    """Parameter report: embeddings, projection, each shared group, heads, total; and the BERT of
    the same width and depth with the saving from each of ALBERT's two techniques.

    SOURCE is a preset name (albert-base-v2, ...; see `albert-edge params --help`), a config.json /
    albert_config.json, a checkpoint directory, or a Hugging Face model id (org/name[@revision],
    of which only config.json is fetched). Counts come from the config alone.
    """
    from pathlib import Path

    from ..config import load_config
    from ..hub import resolve
    from ..params import param_report

    config = load_config(resolve(source, config_only=True))
    report = param_report(config, Path(source).name if Path(source).exists() else source, head)
    if as_json:
        print_json(report.to_dict())
        return
    c = config
    shape = (f"V={c.vocab_size} E={c.embedding_size} H={c.hidden_size} L={c.num_hidden_layers} "
             f"G={c.num_hidden_groups} inner={c.inner_group_num} sharing={c.sharing}")
    rows = [(r.part, r.shape, f"{r.count:,}", fmt_count(r.count), r.note) for r in report.rows + report.head_rows]
    rows.append(("total (unique)", "", f"{report.total:,}", fmt_count(report.total), f"head: {head}"))
    print_table(f"Parameters of {report.name} ({shape})", ["part", "shape", "params", "short", "note"], rows,
                right=(2, 3))
    comparison = [
        ("BERT, same width and depth (E = H, no sharing)", fmt_count(report.bert_total), ""),
        ("- saved by factorized embeddings", fmt_count(report.factorization_saving),
         f"{100 * report.factorization_saving / report.bert_total:.1f}%"),
        ("- saved by cross-layer sharing", fmt_count(report.sharing_saving),
         f"{100 * report.sharing_saving / report.bert_total:.1f}%"),
        ("= this model", fmt_count(report.total), f"{report.bert_total / report.total:.1f}x smaller"),
    ]
    print_table("ALBERT's two techniques", ["model", "params", "vs BERT"], comparison, right=(1, 2))
    paper = [p for p in (report.paper, report.bert_paper) if p]
    if paper:
        print_table("Published figures (ALBERT paper, Table 1)", ["model", "paper", "ours", "note"],
                    [(p["model"], f"{p['figure_m']:g}M", f"{p['ours_m']:.2f}M", p["note"]) for p in paper],
                    right=(1, 2))
    for note in report.notes:
        console.print(f"note: {note}")


COMMANDS = [params]
