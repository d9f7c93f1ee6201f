"""``report.md`` and the self-contained ``report.html`` (charts embedded as data: URIs, no
script, nothing fetched) from the report's figures and tables."""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path
from typing import Any

from .snippets import LANGUAGES, PLATFORM_TITLES, PLATFORMS, blocks
from .tables import QUALITY_MARK, Table, tables

__all__ = ["markdown", "html_page"]


def _summary(data: dict[str, Any]) -> list[str]:
    """A few sentences at the top: what the model is and what the figures say."""
    lines = []
    model = data["model"]
    if model:
        params = data["params"]
        lines.append(f"Model: **{model['name']}** (from {model['config_from']}); "
                     f"{params['total']:,} unique parameters, {params['bert_total'] / params['total']:.1f}x fewer "
                     f"than the BERT of the same width and depth ({params['bert_total']:,}).")
        at = {r["seq_len"]: r for r in data["compute"]}
        if 128 in at:
            r = at[128]
            lines.append(f"At 128 tokens it runs {r['macs_total'] / 1e9:.2f} GMACs, "
                         f"{r['macs_total'] / r['bert_macs_total']:.3f}x the BERT's: the same compute.")
        context = data.get("context") or {}
        if context.get("pipeline"):
            lines.append(f"Made by `albert-edge pipeline` on {context['pipeline']}.")
        pretraining = context.get("pretraining") or {}
        evaluation = pretraining.get("eval") or {}
        if "mlm_acc" in evaluation:
            lines.append(f"Pretrained {pretraining.get('step')} steps: held-out MLM accuracy "
                         f"{100 * evaluation['mlm_acc']:.1f}%"
                         + (f" (unigram baseline {100 * evaluation['mlm_unigram_acc']:.1f}%)"
                            if "mlm_unigram_acc" in evaluation else "")
                         + (f", sentence-order accuracy {100 * evaluation['sop_acc']:.1f}%" if "sop_acc" in evaluation
                            else "") + ".")
        if context.get("static_dir"):
            lines.append(f"With static-shape files for phone GPUs and NPUs (`pipeline --static`, in "
                         f"{context['static_dir']}/): the Accelerators table says which file each accelerator "
                         "takes; they are not profiled here, where those accelerators are not.")
        elif context.get("static_in"):
            lines.append("Static-shape files (`pipeline --static`) are made for the small model only, to keep the "
                         f"built-in default quick: [its report]({context['static_in']}) has them.")
        if model.get("weights") == "random-init":
            lines.append("Weights: random (sizes and latency only; no accuracy is shown for these files"
                         + (f": [the trained model's report]({context['accuracy_in']}) has it"
                            if context.get("accuracy_in") else "") + ").")
    return lines


def markdown(data: dict[str, Any], title: str) -> str:
    out = [f"# {title}", ""]
    out += [line + "  " for line in _summary(data)]
    if data["missing"]:
        out += ["", "**Not in this report:**", ""] + [f"- {m}" for m in data["missing"]]
    if data["notes"]:
        out += ["", *[f"- note: {n}" for n in data["notes"]]]
    if data.get("chart_note"):
        out += ["", f"_{data['chart_note']}_"]
    charts = {c["name"]: c for c in data["charts"]}
    shown: set[str] = set()
    for table in tables(data):
        out += ["", f"## {table.title}", ""]
        chart = charts.get(table.chart or "")
        if chart and chart["name"] not in shown:
            out += [f"![{chart['title']}](charts/{chart['png']})", ""]
            shown.add(chart["name"])
        if table.lead:
            out += [f"**{table.lead}**", ""]
        out += _md_table(table)
        out += [f"- {n}" for n in table.notes]
    for name, chart in charts.items():
        if name not in shown:
            out += ["", f"## {chart['title']}", "", f"![{chart['title']}](charts/{chart['png']})"]
    out += _md_snippets(data.get("snippets") or [])
    out += ["", f"Sources: {', '.join(s['source'] for s in data['sources'])}. Created {data['created']} by "
            f"{_made_by(data)}.",
            ""]
    return "\n".join(out)


def _md_table(table: Table) -> list[str]:
    def cell(v: str) -> str:
        return str(v).replace("|", "\\|")

    align = ["---:" if i in table.right else "---" for i in range(len(table.columns))]
    lines = ["| " + " | ".join(cell(c) for c in table.columns) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.rows]
    return lines + [""]


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2rem auto;max-width:1100px;
color:#1d2733;padding:0 1rem;line-height:1.45}
h1{font-size:1.6rem;margin-bottom:.3rem}h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #dde3ea}
table{border-collapse:collapse;font-size:.85rem;margin:.6rem 0}
th,td{padding:.25rem .6rem;border-bottom:1px solid #e8edf2;text-align:left;vertical-align:top}
th{background:#f3f6f9}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
img{max-width:100%;height:auto;display:block;margin:.6rem 0}
.missing{background:#fff7e0;border-left:4px solid #f0b429;padding:.5rem 1rem}
.note{color:#52606d;font-size:.85rem}.est{color:#a33;font-weight:600}
pre{background:#f6f8fa;border:1px solid #e8edf2;padding:.6rem;overflow-x:auto;font-size:.8rem}
summary{cursor:pointer;margin:.4rem 0}
.lead{background:#eef6ff;border-left:4px solid #3b82c4;padding:.5rem 1rem}
.noisy{background:#fff1c2;padding:0 .2rem}.unusable{background:#f8d3cc;padding:0 .2rem;text-decoration:line-through}
"""


def html_page(data: dict[str, Any], title: str, chart_dir: Path) -> str:
    esc = html.escape
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             '<link rel="icon" href="data:,">', f"<title>{esc(title)}</title><style>{_CSS}</style></head><body>",
             f"<h1>{esc(title)}</h1>"]
    parts += [f"<p>{inline_html(line)}</p>" for line in _summary(data)]
    if data["missing"]:
        parts.append('<div class="missing"><strong>Not in this report:</strong><ul>'
                     + "".join(f"<li>{inline_html(m)}</li>" for m in data["missing"]) + "</ul></div>")
    parts += [f'<p class="note">note: {inline_html(n)}</p>' for n in data["notes"]]
    if data.get("chart_note"):
        parts.append(f'<p class="note">{esc(data["chart_note"])}</p>')
    charts = {c["name"]: c for c in data["charts"]}
    shown: set[str] = set()
    for table in tables(data):
        parts.append(f'<h2 id="{table.key}">{esc(table.title)}</h2>')
        chart = charts.get(table.chart or "")
        if chart and chart["name"] not in shown:
            parts.append(_img(chart, chart_dir))
            shown.add(chart["name"])
        if table.lead:
            parts.append(f'<p class="lead">{inline_html(table.lead)}</p>')
        parts.append(_html_table(table))
        parts += [f'<p class="note">{inline_html(n)}</p>' for n in table.notes]
    for name, chart in charts.items():
        if name not in shown:
            parts += [f"<h2>{esc(chart['title'])}</h2>", _img(chart, chart_dir)]
    parts += _html_snippets(data.get("snippets") or [])
    parts.append(f'<p class="note">Sources: {esc(", ".join(s["source"] for s in data["sources"]))}. '
                 f"Created {esc(data['created'])} by {esc(_made_by(data))}.</p></body></html>")
    return "\n".join(parts) + "\n"


SNIPPETS_TITLE = "Running the files in an app"
SNIPPETS_INTRO = ("The framework that loads each file on a phone or in a browser, and the few lines each platform "
                  "needs, filled with the file's own input and output names, dtypes and shape (batch 1). "
                  "The Kotlin and Swift lines name the versions they were written against and cannot be run by "
                  "albert-edge's tests; the JavaScript runs there as printed, in headless Chromium.")


def _snippet_lines(group: dict[str, Any]) -> tuple[list[str], list[tuple[str, str, list[str]]]]:
    """A framework's facts (plain text lines) and its code blocks: (platform, code, files)."""
    facts = [f"{PLATFORM_TITLES[p]}: {group['packages'][p]}" for p in PLATFORMS if group["packages"].get(p)]
    facts += [f"{PLATFORM_TITLES[p]}: none. {why}" for p, why in group["missing"].items()]
    if group["tokenize"]:
        facts.append(group["tokenize"])
    facts += [f"{f.get('label', f['name'])}: {f['note']}" for f in group["files"]]
    code = [(p, text, names) for p in PLATFORMS for text, names in blocks(group, p)]
    return facts, code


def _for_files(names: list[str]) -> str:
    return names[0] + (f" (also {', '.join(names[1:])}: the same lines with its name)" if len(names) > 1 else "")


def _md_snippets(groups: list[dict[str, Any]]) -> list[str]:
    if not groups:
        return []
    out = ["", f"## {SNIPPETS_TITLE}", "", SNIPPETS_INTRO]
    for group in groups:
        facts, code = _snippet_lines(group)
        out += ["", f"### {group['framework']}: {', '.join(f.get('label', f['name']) for f in group['files'])}", ""]
        out += [f"- {line}" for line in facts]
        for platform, text, names in code:
            out += ["", f"{PLATFORM_TITLES[platform]}, {_for_files(names)}:", "", f"```{LANGUAGES[platform]}",
                    text, "```"]
    return out


def _html_snippets(groups: list[dict[str, Any]]) -> list[str]:
    if not groups:
        return []
    esc = html.escape
    parts = [f'<h2 id="snippets">{esc(SNIPPETS_TITLE)}</h2>', f'<p class="note">{esc(SNIPPETS_INTRO)}</p>']
    for group in groups:
        facts, code = _snippet_lines(group)
        parts.append(f"<details><summary><strong>{esc(group['framework'])}</strong>: "
                     f"{esc(', '.join(f.get('label', f['name']) for f in group['files']))}</summary>")
        parts.append("<ul>" + "".join(f"<li>{inline_html(line)}</li>" for line in facts) + "</ul>")
        for platform, text, names in code:
            parts.append(f"<p>{esc(PLATFORM_TITLES[platform])}, {esc(_for_files(names))}:</p>"
                         f'<pre><code class="language-{LANGUAGES[platform]}">{esc(text)}</code></pre>')
        parts.append("</details>")
    return parts


def _made_by(data: dict[str, Any]) -> str:
    version = data.get("albert_edge_version")
    return f"albert-edge {version}" if version else "albert-edge"


# The Markdown a report's sentences use: `code`, **bold** and [text](relative link).
_INLINE = re.compile(r"`([^`]+)`|\*\*([^*]+)\*\*|\[([^\]]+)\]\(([^)\s]+)\)")


def inline_html(text: str) -> str:
    """A sentence of the report in HTML: escaped, its Markdown made tags, so no backtick or
    asterisk is left on the page and a link is a link."""
    esc = html.escape
    out, at = [], 0
    for m in _INLINE.finditer(text):
        out.append(esc(text[at:m.start()]))
        code, bold, label, href = m.groups()
        out.append(f"<code>{esc(code)}</code>" if code is not None else f"<strong>{esc(bold)}</strong>"
                   if bold is not None else f'<a href="{esc(href, quote=True)}">{esc(label)}</a>')
        at = m.end()
    return "".join(out) + esc(text[at:])


def _img(chart: dict, chart_dir: Path) -> str:
    encoded = base64.b64encode((chart_dir / chart["png"]).read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(chart["title"])}" src="data:image/png;base64,{encoded}">'


def _html_table(table: Table) -> str:
    esc = html.escape

    def cls(i: int) -> str:
        return ' class="n"' if i in table.right else ""

    head = "".join(f"<th{cls(i)}>{esc(c)}</th>" for i, c in enumerate(table.columns))
    body = []
    for row in table.rows:
        cells = []
        for i, v in enumerate(row):
            text = esc(str(v))
            if v == "ESTIMATE":
                text = f'<span class="est">{text}</span>'
            quality = next((q for q, mark in QUALITY_MARK.items() if str(v).startswith(mark)), None)
            if quality:  # a figure the profiler did not trust: marked, its reason in the legend below
                text = f'<span class="{quality}" title="timing {quality}: see the notes below">{text}</span>'
            cells.append(f"<td{cls(i)}>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
