"""Where an ALBERT's parameters are, computed from its config alone (no torch), beside the BERT
of the same width and depth and the saving from each of ALBERT's two techniques."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .config import PAPER_PARAMS, PRESETS, AlbertConfig
from .errors import ConfigError

__all__ = ["ParamRow", "ParamReport", "param_report", "layer_params", "check_fits_in_memory"]

# The BERT model of the same width and depth as each ALBERT preset, as the paper pairs them.
_BERT_OF = {"albert-base-v2": "bert-base", "albert-large-v2": "bert-large", "albert-xlarge-v2": "bert-xlarge"}


@dataclass(frozen=True)
class ParamRow:
    part: str
    shape: str
    count: int
    note: str = ""


@dataclass
class ParamReport:
    name: str
    config: AlbertConfig
    head: str
    rows: list[ParamRow]
    head_rows: list[ParamRow]
    total: int  # unique parameters of the base model (+ the head's when head != "base")
    bert_total: int  # same V, H, L x inner, FFN width; E = H, no projection, nothing shared
    factorization_saving: int  # V x H embeddings -> V x E + E x H
    sharing_saving: int  # L x inner_group_num layers -> the distinct ones
    paper: dict | None = None  # {"figure_m": 12, "ours_m": 11.68, "note": "..."}
    bert_paper: dict | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["config"] = self.config.to_hf_dict()
        data["unit"] = "parameters"
        return data


def layer_params(config: AlbertConfig) -> tuple[int, int]:
    """(attention part, FFN part) of one transformer layer, LayerNorms included."""
    H, I = config.hidden_size, config.intermediate_size
    attention = 4 * (H * H + H) + 2 * H  # Q, K, V, output dense + LayerNorm
    ffn = (H * I + I) + (I * H + H) + 2 * H  # ffn, ffn_output + full_layer_layer_norm
    return attention, ffn


def _depth_ranges(config: AlbertConfig) -> dict[int, tuple[int, int]]:
    """First and last depth of each group some depth uses. The group never decreases with depth,
    so each group's last depth is found by bisection: G log L steps, not L (a config may give any L)."""
    ranges: dict[int, tuple[int, int]] = {}
    first, L = 0, config.num_hidden_layers
    while first < L:
        g = config.group_of_depth(first)
        lo, hi = first, L - 1  # the last depth of group g is in [lo, hi]
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if config.group_of_depth(mid) == g else (lo, mid - 1)
        ranges[g] = (first, lo)
        first = lo + 1
    return ranges


def _head_rows(config: AlbertConfig) -> dict[str, list[ParamRow]]:
    V, E, H, n = config.vocab_size, config.embedding_size, config.hidden_size, config.num_labels
    mlm = [
        ParamRow("MLM transform H -> E", f"{H}x{E} + LN", H * E + E + 2 * E),
        ParamRow("MLM output bias", f"{V}", V, "decoder weight is the word-embedding table (tied)"),
    ]
    return {
        "base": [],
        "mlm": mlm,
        "pretraining": mlm + [ParamRow("sentence-order head", f"{H}x2", 2 * H + 2)],
        "classification": [ParamRow("classifier", f"{H}x{n}", H * n + n)],
        "token-classification": [ParamRow("token classifier", f"{H}x{n}", H * n + n)],
        "qa": [ParamRow("QA span head", f"{H}x2", 2 * H + 2)],
        "multiple-choice": [ParamRow("choice scorer", f"{H}x1", H + 1, "one score per choice")],
    }


def param_report(config: AlbertConfig, name: str | None = None, head: str = "base") -> ParamReport:
    V, E, H, L = config.vocab_size, config.embedding_size, config.hidden_size, config.num_hidden_layers
    P, T, inner = config.max_position_embeddings, config.type_vocab_size, config.inner_group_num
    heads = _head_rows(config)
    if head not in heads:
        raise ValueError(f"unknown head {head!r}; choose one of {', '.join(heads)}")
    attention, ffn = layer_params(config)
    rows = [
        ParamRow("token embeddings (V x E)", f"{V}x{E}", V * E),
        ParamRow("positions + token types + LN", f"{P}x{E} + {T}x{E}", P * E + T * E + 2 * E),
    ]
    projection = E * H + H if config.has_embedding_projection else 0
    if projection:
        rows.append(ParamRow("E -> H projection", f"{E}x{H}", projection, "the factorization's second half"))
    ranges = _depth_ranges(config)
    # Groups some depth uses: all G, except in Google's layout where a few (L, G) skip one.
    n_att = len(ranges) if config.sharing in ("all", "attention") else L
    n_ffn = len(ranges) if config.sharing in ("all", "ffn") else L
    if config.sharing == "all":
        for g, (first, last) in sorted(ranges.items()):
            used = f"layers {first}-{last}" if last > first else f"layer {first}"
            rows.append(ParamRow(f"group {g} ({inner} layer{'s' * (inner > 1)})", f"H={H}",
                                 inner * (attention + ffn), f"shared by {used}"))
    else:
        rows.append(ParamRow(f"attention x {n_att * inner}", f"H={H}", n_att * inner * attention,
                             f"sharing={config.sharing}"))
        rows.append(ParamRow(f"FFN x {n_ffn * inner}", f"H={H}, I={config.intermediate_size}",
                             n_ffn * inner * ffn, f"sharing={config.sharing}"))
    rows.append(ParamRow("pooler", f"{H}x{H}", H * H + H))
    head_rows = heads[head]
    total = sum(r.count for r in rows) + sum(r.count for r in head_rows)

    depth = L * inner  # layer applications; BERT of the same depth has one weight set per application
    bert_embeddings = V * H + P * H + T * H + 2 * H
    albert_embeddings = V * E + P * E + T * E + 2 * E + projection
    factorization_saving = bert_embeddings - albert_embeddings
    bert_head = sum(r.count for r in head_rows)
    if head in ("mlm", "pretraining"):
        # BERT's MLM transform is H -> H; ALBERT's is H -> E, part of the same factorization.
        bert_head += (H * H + 3 * H) - (H * E + 3 * E)
        factorization_saving += (H * H + 3 * H) - (H * E + 3 * E)
    sharing_saving = (depth - n_att * inner) * attention + (depth - n_ffn * inner) * ffn
    bert_total = bert_embeddings + depth * (attention + ffn) + H * H + H + bert_head
    report = ParamReport(name or "config", config, head, rows, head_rows, total, bert_total,
                         factorization_saving, sharing_saving)
    _compare_with_paper(report)
    return report


def check_fits_in_memory(config: AlbertConfig, head: str = "base", ram_bytes: int | None = None) -> None:
    """Raise ConfigError when the fp32 weights of ``config``'s model (its unique parameters x 4
    bytes, counted as ``param_report`` counts them) exceed this machine's RAM: called before a
    model is built, so a size that cannot be allocated is one line, not an allocator's failure.
    ``ram_bytes`` defaults to the machine's (albert_edge.device); unknown RAM checks nothing."""
    from . import device

    ram = device.ram_bytes() if ram_bytes is None else ram_bytes
    if not ram:
        return
    total = param_report(config, head=head).total
    if 4 * total > ram:
        raise ConfigError(f"this config's model has {_count(total)} parameters: {_gib(4 * total)} of fp32 weights, "
                          f"more than this machine's {_gib(ram)} of RAM; choose smaller sizes (hidden_size "
                          f"{config.hidden_size}, intermediate_size {config.intermediate_size}, vocab_size "
                          f"{config.vocab_size}, ...)")


def _count(n: int) -> str:
    return f"{n:,}" if n < 10**15 else f"{float(n):.3g}"


def _gib(n: int) -> str:
    return f"{n / 2**30:,.1f} GiB"


def _compare_with_paper(report: ParamReport) -> None:
    name = report.name
    if name in PAPER_PARAMS and report.head == "base":
        report.paper = _paper_entry(name, report.total, PAPER_PARAMS[name])
        if name.startswith("bert-"):
            report.notes.append(
                "built in ALBERT's layout, this model keeps an E -> H projection "
                f"({report.config.embedding_size * report.config.hidden_size + report.config.hidden_size:,} "
                "parameters) that BERT has not; the BERT column leaves it out"
            )
    bert = _BERT_OF.get(name)
    if bert and report.head == "base":
        same_shape = AlbertConfig(**PRESETS[bert])
        if (same_shape.hidden_size, same_shape.num_hidden_layers) == (report.config.hidden_size,
                                                                      report.config.num_hidden_layers):
            report.bert_paper = _paper_entry(bert, report.bert_total, PAPER_PARAMS[bert])


def _paper_entry(name: str, ours: int, figure_m: float) -> dict:
    ours_m = ours / 1e6
    diff = ours_m - figure_m
    # The paper rounds to whole millions; closer than that is agreement.
    if abs(diff) < 0.5:
        note = "agrees with the paper's rounded figure"
    else:
        note = (f"differs from the paper by {diff:+.1f}M ({100 * diff / figure_m:+.1f}%); ours is the "
                "unique parameter count of the built model (V=30000, pooler included, heads excluded); "
                "the paper does not say how it counted")
    return {"model": name, "figure_m": figure_m, "ours_m": round(ours_m, 2), "note": note}
