"""Model-size reports: parameters by part beside BERT, the presets side by side, compute and
activation memory, every file of a conversion (bytes, stored vs unique weight bytes, bytes per
precision, accuracy against the fp32 parent), latency and memory from profile records and the
lines an Android, iOS or web app needs to run each file (:mod:`.snippets`), as
``report.md``, a self-contained ``report.html``, ``report.json`` and charts (PNG + SVG).

    from albert_edge.report import write_report
    result = write_report(["albert-base-v2", "edge/", "profile.json"], "report/")

Figures are not counted a second way: parameters come from :mod:`albert_edge.params`, file
analysis from the inspect analysis and the manifest, latency from the profile records. Device
side: no torch, no tensorflow (matplotlib is optional).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..files import check_not_input, check_output_dir, staged
from .build import SCHEMA, build_data
from .charts import MAIN_CHART, NO_MATPLOTLIB, available, draw_all
from .compute import DEFAULT_SEQ_LENS, compute_rows
from .render import html_page, markdown
from .sources import WEIGHTS_NOTE, ReportError, gather, weights_note
from .tables import Table, tables

__all__ = ["write_report", "ReportResult", "ReportError", "SCHEMA", "WEIGHTS_NOTE", "weights_note", "tables",
           "Table", "compute_rows", "DEFAULT_SEQ_LENS", "MAIN_CHART", "REPORT_FILES"]

log = logging.getLogger(__name__)

REPORT_FILES = ("report.md", "report.html", "report.json")


@dataclass
class ReportResult:
    out_dir: Path
    data: dict[str, Any]
    files: list[Path] = field(default_factory=list)

    @property
    def html(self) -> Path:
        return self.out_dir / "report.html"

    @property
    def main_chart(self) -> Path | None:
        names = {c["name"]: c["png"] for c in self.data["charts"]}
        return self.out_dir / "charts" / names[MAIN_CHART] if MAIN_CHART in names else None


def write_report(sources: Sequence[str | os.PathLike], out_dir: str | os.PathLike, *, force: bool = False,
                 seq_lens: Sequence[int] = DEFAULT_SEQ_LENS, title: str | None = None, name: str | None = None,
                 charts: bool = True,
                 extra: dict[str, Any] | None = None,
                 on_step: Callable[[str], None] | None = None) -> ReportResult:
    """Read ``sources``, write the report into ``out_dir`` and return its figures.

    The directory is written whole under a temporary name beside ``out_dir`` and renamed into
    place, so it is complete or absent. A directory that already holds files is replaced only
    with ``force``. ``extra`` is merged into report.json under "context" (the pipeline says
    there what it ran); ``name`` names the model. Bad input raises ReportError before anything is written."""
    step = on_step or (lambda _what: None)
    out = Path(out_dir)
    check_not_input(out, sources, option="--out")  # --force replaces an earlier report, never a source
    check_output_dir(out, force)  # before any source is read or any directory is made
    step("read sources")
    inputs = gather([str(s) for s in sources], name)
    seq_lens, beyond = _within_model(tuple(seq_lens), inputs)
    data = build_data(inputs, seq_lens, on_file=lambda name: step(f"inspect {name}"))
    if beyond:
        data["missing"].append(f"compute at sequence length {', '.join(map(str, beyond))}: above the model's "
                               f"maximum {inputs.config.max_position_embeddings} (max_position_embeddings)")
    if extra:
        data["context"] = extra
    title = title or (f"albert-edge report: {inputs.name}" if inputs.name else "albert-edge report")
    try:
        with staged(out, directory=True, keep=False) as tmp:  # the old report stays whole until the new one is in
            chart_dir = tmp / "charts"
            chart_dir.mkdir()
            if charts and available():
                step("draw charts")
                data["charts"] = draw_all(data, chart_dir)
            else:
                data["chart_note"] = NO_MATPLOTLIB if charts else "charts left out (--no-charts)"
            step("write report")
            (tmp / "report.json").write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
            (tmp / "report.md").write_text(markdown(data, title), encoding="utf-8")
            (tmp / "report.html").write_text(html_page(data, title, chart_dir), encoding="utf-8")
            for item in tmp.rglob("*"):
                os.chmod(item, 0o755 if item.is_dir() else 0o644)
    except OSError as exc:  # not a full disk or a read-only file system: staged says those
        raise ReportError(f"writing the report to {out} failed: {exc}") from None
    log.info("wrote the report of %s into %s (%d charts)", inputs.name, out, len(data["charts"]))
    files = [out / name for name in REPORT_FILES]
    files += [out / "charts" / c[k] for c in data["charts"] for k in ("png", "svg")]
    return ReportResult(out, data, files)


def _within_model(seq_lens: tuple[int, ...], inputs) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The sequence lengths the model takes, and those above its maximum (left out of the
    compute table); none it takes is an error."""
    if inputs.config is None:
        return seq_lens, ()
    longest = inputs.config.max_position_embeddings
    kept = tuple(n for n in seq_lens if n <= longest)
    if not kept:
        raise ReportError(f"--seq-len {','.join(map(str, seq_lens))}: every length is above the model's maximum "
                          f"{longest} (max_position_embeddings)")
    return kept, tuple(n for n in seq_lens if n > longest)
