"""albert-edge's files against what the standard tools make of the same checkpoint, in one
interleaved run: latency p50/p90 at each length, peak RSS, load time and file size, with
ratios to PyTorch eager and to the peers' files.

Contestants (every file keeps the one output ``last_hidden_state``, so sizes compare like for like):

    pytorch eager fp32      albert_edge.model from the checkpoint
    torch.onnx.export fp32  the unquantized files of the peers below, on the same runtimes
    optimum export fp32
    TFAlbertModel + TFLiteConverter fp32
    tf_albert graph + TFLiteConverter fp32
    ort quantize_dynamic    transformers' AlbertModel -> torch.onnx.export -> onnxruntime's
                            quant_pre_process -> quantize_dynamic(QInt8); run with onnxruntime's defaults
    optimum avx512_vnni     optimum's export (`optimum-cli export onnx --task feature-extraction`) ->
                            ORTQuantizer with AutoQuantizationConfig.avx512_vnni(is_static=False),
                            per-tensor as `optimum-cli onnxruntime quantize --avx512_vnni` gives
    optimum O2 + avx512_vnni  the same export through ORTOptimizer at AutoOptimizationConfig.O2()
                            first (fused attention, quantized to QAttention; onnxruntime's symbolic
                            shape inference in between, without which the quantizer fails on it)
    TFAlbertModel + TFLiteConverter  transformers 4's TFAlbertModel (weights from the PyTorch
                            checkpoint) -> SavedModel (int32 inputs, last_hidden_state) ->
                            TFLiteConverter with Optimize.DEFAULT (dynamic-range int8), every other
                            setting its default; run with ai-edge-litert's Interpreter (XNNPACK on)
    tf_albert graph + TFLiteConverter  the same converter settings on a SavedModel of
                            albert_edge.converters.tf_albert's graph (one variable per shared weight,
                            without albert-edge's converter settings): what the TFLite files are
                            compared with when .venv-peers is missing
    executorch XNNPACK      transformers' AlbertModel -> torch.export (dynamic sequence axis, batch 1)
                            -> to_edge_transform_and_lower(XnnpackPartitioner()) -> .pte, as ExecuTorch's
                            docs show; its int8 through the same XNNPACKQuantizer (pt2e, per-channel
                            weights, dynamic activations); no mask code (one unpadded sentence); run
                            with ExecuTorch's runtime defaults
    albert-edge             `convert --outputs last_hidden_state` + `quantize --scheme int8-dynamic`,
                            ONNX and TFLite (the TFLite in both forms: tflite is `--layers unrolled`,
                            tflite-loop the loop form `convert` writes by default);
                            `convert --to executorch --scheme int8-dynamic` for the .pte files; every
                            file run both ways: through albert_edge.runtime.Session's defaults, and as
                            an app opens it (the runtime's own API with default options: the LiteRT
                            Interpreter, onnxruntime's InferenceSession, ExecuTorch's Module)

optimum and transformers 4 (which has TFAlbertModel; 5 has no TensorFlow models) pin their own
transformers and torch, so the optimum and TFAlbertModel peers are built in an environment of their
own, .venv-peers (`benchmarks/peer_envs.sh` makes it; --peers-venv names another), by
benchmarks/peer_tools.py; without it they are left out, saying so.

The peers' files run as an app opens them. Each albert-edge file gets ratios to its peers: through
Session, and as an app opens it. An ONNX file gets one to each onnxruntime peer and one to the best
of them (per figure, the lowest of the peers' figures, naming whose it is); a TFLite file to the
TFAlbertModel peer (the tf_albert graph peer without .venv-peers).

Each (file, route) runs in a fresh process (benchmarks/memory.py's child), ``--rounds`` times,
interleaved. Timings on a shared machine are noisy: repeat with more --rounds before quoting.

    python benchmarks/peers.py                                  # ALBERT-base shape, random init
    python benchmarks/peers.py --set vocab_size=8000 --rounds 5 --json
    python benchmarks/peers.py --checkpoint path/to/hf-albert --work /tmp/peers
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import statistics
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import memory  # noqa: E402  (benchmarks/memory.py: the fresh-process measurement)
import peer_tools  # noqa: E402  (benchmarks/peer_tools.py: the peers built in .venv-peers)
import _harness as harness  # noqa: E402  (options, models, the result file)

log = logging.getLogger("peers")
INPUTS = harness.INPUTS


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = harness.parser(__doc__)
    harness.model_options(p, "A Hugging Face ALBERT directory (default: --preset, random init).")
    harness.options(p, seq_lens=[32, 128], batch=1, threads=2, runs=10,
                    rounds={"default": 3, "help": "Fresh children per contestant, interleaved."},
                    work={"help": "Directory for the checkpoint and files (default: a temporary one); "
                                  "files already there are reused."})
    p.add_argument("--peers-venv",
                   default=os.environ.get("PEERS_VENV", str(Path(__file__).resolve().parents[1] / ".venv-peers")),
                   help="The environment that builds the optimum and TFAlbertModel peers "
                        "(default: $PEERS_VENV or .venv-peers; benchmarks/peer_envs.sh makes it).")
    harness.options(p, json=True, out={"help": "Also write the result file the docs render from "
                                               "(benchmarks/results/peers.json; see benchmarks/render_results.py)."})
    return p.parse_args(argv)


def _checkpoint(args, work: Path) -> Path:
    if args.checkpoint:
        return Path(args.checkpoint)
    out = work / "checkpoint"
    if not (out / "config.json").is_file():
        from albert_edge import checkpoints

        checkpoints.save(harness.random_model(harness.model_config(args), "base"), out)
    return out


def ours(ckpt: Path, work: Path, seq_len: int) -> dict[str, Path]:
    """albert-edge's fp32 and int8-dynamic ONNX, TFLite and ExecuTorch files, last_hidden_state only."""
    from albert_edge.converters.export import convert
    from albert_edge.converters.quantized import quantize_file
    from albert_edge.quantize import QuantizeConfig

    out = work / "albert-edge"
    if not (out / "manifest.json").is_file():
        convert(ckpt, out, targets=("onnx", "tflite", "executorch"), head="base", seq_len=seq_len,
                outputs=["last_hidden_state"], force=True, scheme="int8-dynamic", layers="unrolled")
    files = {f"albert-edge {fmt} fp32": out / f"model.{fmt}" for fmt in ("onnx", "tflite", "pte")}
    files["albert-edge pte int8"] = out / "model.int8-dynamic.pte"
    loop = work / "albert-edge-loop"  # convert --to tflite as it writes by default (--layers loop)
    if not (loop / "manifest.json").is_file():
        convert(ckpt, loop, targets=("tflite",), head="base", seq_len=seq_len, outputs=["last_hidden_state"],
                force=True, layers="loop")
    files["albert-edge tflite-loop fp32"] = loop / "model.tflite"
    for name, parent in (("onnx", out / "model.onnx"), ("tflite", out / "model.tflite"),
                         ("tflite-loop", loop / "model.tflite")):
        path = parent.with_name(f"model.int8{parent.suffix}")
        if not path.is_file():
            quantize_file(parent, QuantizeConfig("int8-dynamic", num_samples=8, eval_samples=8), path)
        files[f"albert-edge {name} int8"] = path
    return files


# How an app opens each kind of file: the runtime's own API with its default options.
APP_ROUTES = {".tflite": ("tflite-plain", "interpreter defaults"), ".onnx": ("onnx-plain", "onnxruntime defaults"),
              ".pte": ("executorch-plain", "executorch defaults")}


def _peer_dir(out: Path, name: str) -> tuple[Path, Path]:
    """A peer's directory (made) and its int8 file (there already when a --work run made it)."""
    out.mkdir(parents=True, exist_ok=True)
    return out, out / name


def onnx_peer(ckpt: Path, work: Path) -> Path:
    """onnxruntime's own recipe: export transformers' AlbertModel, pre-process, quantize_dynamic."""
    import torch
    import transformers
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    out, int8 = _peer_dir(work / "ort-peer", "model.int8.onnx")
    if int8.is_file():
        return int8
    hf = transformers.AlbertModel.from_pretrained(str(ckpt), add_pooling_layer=False).eval()

    ids = torch.randint(5, hf.config.vocab_size, (2, 16))
    dynamic = {n: {0: "batch", 1: "sequence"} for n in (*INPUTS, "last_hidden_state")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_last_hidden(hf), (ids, torch.ones_like(ids), torch.zeros_like(ids)), str(out / "model.onnx"),
                          dynamo=False, opset_version=17, input_names=list(INPUTS),
                          output_names=["last_hidden_state"], dynamic_axes=dynamic)
    # In the work directory: a failed first try leaves an external-data file named <uuid>.data
    # in the current directory.
    here = os.getcwd()
    os.chdir(out)  # contextlib.chdir is Python 3.11+
    try:
        quant_pre_process(str(out / "model.onnx"), str(out / "model.pre.onnx"))
    except Exception as exc:  # its symbolic shape inference gives up on transformers' ALBERT graph
        log.warning("quant_pre_process: %s; pre-processing again without symbolic shape inference", exc)
        quant_pre_process(str(out / "model.onnx"), str(out / "model.pre.onnx"), skip_symbolic_shape=True)
    finally:
        os.chdir(here)
    quantize_dynamic(str(out / "model.pre.onnx"), str(int8), weight_type=QuantType.QInt8)
    return int8


def tflite_peer(ckpt: Path, work: Path) -> tuple[Path, Path]:
    """TensorFlow's TFLiteConverter with its default settings on albert-edge's own TensorFlow graph
    (converters.tf_albert): (fp32 file, dynamic-range int8 file)."""
    out, int8 = _peer_dir(work / "tf-peer", "model.int8.tflite")
    fp32 = out / "model.tflite"
    if int8.is_file() and fp32.is_file():
        return fp32, int8
    import tensorflow as tf

    from albert_edge import checkpoints
    from albert_edge.converters.export import select_outputs
    from albert_edge.converters.tf_albert import TFAlbert

    _, model = checkpoints.load_model(ckpt, "base")
    module = TFAlbert(select_outputs(model, ["last_hidden_state"]))
    saved = out / "saved_model"
    tf.saved_model.save(module, str(saved), signatures={"serving_default": module.trace()})
    for path, optimizations in ((fp32, []), (int8, [tf.lite.Optimize.DEFAULT])):
        converter = tf.lite.TFLiteConverter.from_saved_model(str(saved))
        converter.optimizations = optimizations
        path.write_bytes(converter.convert())
    return fp32, int8


def executorch_peer(ckpt: Path, work: Path) -> tuple[Path, Path]:
    """ExecuTorch's documented XNNPACK flow on transformers' AlbertModel: (fp32 .pte, int8 .pte),
    the int8 through the XNNPACK quantizer (pt2e). The peer leaves attention_mask out of the
    model call (the file still takes it): a phone app feeds one unpadded sentence, and with a
    mask transformers builds it with an ``index`` on an ``arange`` that prepare_pt2e breaks (it
    turns the integer scalar added to the ``arange`` into a float constant). So the peer runs
    no mask code at all, which only makes it faster than a file that does."""
    out, int8 = _peer_dir(work / "executorch-peer", "model.int8.pte")
    fp32 = out / "model.pte"
    if int8.is_file() and fp32.is_file():
        return fp32, int8
    import torch
    import transformers
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from executorch.exir import to_edge_transform_and_lower
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    hf = transformers.AlbertModel.from_pretrained(str(ckpt), add_pooling_layer=False).eval()
    ids = torch.randint(5, hf.config.vocab_size, (1, 32), generator=torch.Generator().manual_seed(0))
    example = (ids, torch.ones_like(ids), torch.zeros_like(ids))
    seq = torch.export.Dim("sequence", min=2, max=hf.config.max_position_embeddings)
    dynamic = tuple({1: seq} for _ in INPUTS)
    with torch.no_grad():
        program = torch.export.export(_last_hidden(hf, mask=False), example, dynamic_shapes=dynamic)
        quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True,
                                                                                    is_dynamic=True))
        prepared = prepare_pt2e(program.module(), quantizer)
        prepared(*example)
        quantized = torch.export.export(convert_pt2e(prepared), example, dynamic_shapes=dynamic)
    for path, exported in ((fp32, program), (int8, quantized)):
        edge = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
        path.write_bytes(edge.to_executorch().buffer)
    return fp32, int8


def _last_hidden(hf, mask: bool = True):
    """transformers' AlbertModel with the three inputs positional and one output (``mask=False``:
    attention_mask taken but not passed on, as for one unpadded sentence)."""
    import torch

    class LastHidden(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.inner(input_ids=input_ids, attention_mask=attention_mask if mask else None,
                              token_type_ids=token_type_ids).last_hidden_state

    return LastHidden(hf)


def delegate_blocks(path: Path) -> int | None:
    """XNNPACK delegate calls in a .pte (None for other files)."""
    if path.suffix != ".pte":
        return None
    from albert_edge.formats import pte_reader

    return pte_reader.read(path, weights=False).metadata["delegates"]


def run(args: argparse.Namespace, work: Path) -> dict:
    ckpt = _checkpoint(args, work)
    files = ours(ckpt, work, max(args.seq_lens))
    ort_int8 = onnx_peer(ckpt, work)
    # Built in .venv-peers by benchmarks/peer_tools.py: (fp32 export, avx512_vnni int8, O2 then
    # avx512_vnni int8) and (fp32, dynamic-range int8); None without that environment.
    optimum = peer_tools.files("optimum", ckpt, work / "optimum-peer", Path(args.peers_venv))
    tf_albert_model = peer_tools.files("tf-albert", ckpt, work / "tf-albert-peer", Path(args.peers_venv))
    tf_fp32, tf_int8 = tflite_peer(ckpt, work)
    et_fp32, et_int8 = executorch_peer(ckpt, work)
    contestants = {
        "pytorch eager fp32": (ckpt, "pytorch"),
        "torch.onnx.export fp32": (ort_int8.parent / "model.onnx", "onnx-plain"),
        "ort quantize_dynamic": (ort_int8, "onnx-plain"),
        **({} if optimum is None else {name: (path, "onnx-plain") for name, path in zip(OPTIMUM, optimum)}),
        **({} if tf_albert_model is None else
           {name: (path, "tflite-plain") for name, path in zip(TF_ALBERT_MODEL, tf_albert_model)}),
        "tf_albert graph + TFLiteConverter fp32": (tf_fp32, "tflite-plain"),
        "tf_albert graph + TFLiteConverter int8": (tf_int8, "tflite-plain"),
        "executorch XNNPACK fp32": (et_fp32, "executorch-plain"),
        "executorch XNNPACK int8": (et_int8, "executorch-plain"),
        **{name: (path, "session") for name, path in sorted(files.items())},
        **{f"{name} ({APP_ROUTES[path.suffix][1]})": (path, APP_ROUTES[path.suffix][0])
           for name, path in sorted(files.items())},
    }
    names, plan = list(contestants), list(contestants.values())
    measured = memory.measure(args, plan=plan, reference=plan[0])
    rows = [{"name": name, **row, "delegate_blocks": delegate_blocks(path)}
            for name, row, (path, _) in zip(names, measured, plan)]
    notes = [] if tf_albert_model else [
        "TFLite ratios are against the tf_albert graph + TFLiteConverter peer: the TFAlbertModel peer "
        f"was not built (no {args.peers_venv}; benchmarks/peer_envs.sh makes it)"]
    if optimum is None:
        notes.append(f"ONNX ratios leave out optimum's files (no {args.peers_venv}; benchmarks/peer_envs.sh makes it)")
    return {"setup": {k: v for k, v in vars(args).items()} | {"checkpoint": str(ckpt)}, "rows": rows,
            "ratios": _ratios(rows, args.seq_lens), "notes": notes}


# The packages whose versions the result file records (the peers' own environment's are in its rows' names).
VERSIONS = ("torch", "transformers", "onnx", "onnxruntime", "ai-edge-litert", "tensorflow", "executorch")
OPTIMUM = ("optimum export fp32", "optimum avx512_vnni", "optimum O2 + avx512_vnni")
TF_ALBERT_MODEL = ("TFAlbertModel + TFLiteConverter fp32", "TFAlbertModel + TFLiteConverter int8")
# Each albert-edge file's peers: ("each", names) for a ratio to every one present and, with more than
# one, to the best of them; ("first", names) for one ratio, to the first present.
PEERS = {"onnx int8": ("each", ("ort quantize_dynamic", *OPTIMUM[1:])),
         "onnx fp32": ("each", ("torch.onnx.export fp32", OPTIMUM[0])),
         **{f"{kind} {dtype}": ("first", (f"TFAlbertModel + TFLiteConverter {dtype}",
                                          f"tf_albert graph + TFLiteConverter {dtype}"))
            for kind in ("tflite", "tflite-loop") for dtype in ("int8", "fp32")},
         "pte fp32": ("first", ("executorch XNNPACK fp32",)), "pte int8": ("first", ("executorch XNNPACK int8",))}
BEST = {"onnx": "best onnxruntime peer"}


def _ratios(rows: list[dict], seq_lens: list[int]) -> list[dict]:
    """Each albert-edge file over PyTorch eager and over its peers on their runtimes (see PEERS)."""
    by = {r["name"]: r for r in rows}
    # Each albert-edge file through Session and as an app opens it, against the peer files as an
    # app opens them.
    suffix = {"onnx": ".onnx", "tflite": ".tflite", "tflite-loop": ".tflite", "pte": ".pte"}
    out = []
    for name, (how, candidates) in PEERS.items():
        kind = name.split()[0]
        present = [peer for peer in candidates if peer in by]
        versus = present if how == "each" else present[:1]
        for route in ("", f" ({APP_ROUTES[suffix[kind]][1]})"):
            mine = by[f"albert-edge {name}{route}"]
            for peer in ("pytorch eager fp32", *versus):
                out.append({"file": mine["name"], "versus": peer, **_over(mine, by[peer], seq_lens)})
            if len(versus) > 1:
                best, whose = _best([by[peer] for peer in versus], seq_lens)
                out.append({"file": mine["name"], "versus": BEST[kind], **_over(mine, best, seq_lens),
                            "best_of": whose})
    return out


_FIGURES = {"peak_rss": "peak_rss_mib", "load": "load_s", "size": "bytes"}


def _over(a: dict, b: dict, seq_lens: list[int]) -> dict:
    """a's figures over b's: peak RSS, load time, file size, p50 at each length; with each of peak
    RSS and p50 the range the rounds allow (a's lowest over b's highest to a's highest over b's
    lowest)."""
    ratio = {"peak_rss": round(a["peak_rss_mib"] / b["peak_rss_mib"], 3),
             "load": round(a["load_s"] / b["load_s"], 3) if b["load_s"] else None,
             "size": round(a["bytes"] / b["bytes"], 4) if a["bytes"] and b["bytes"] else None}
    spread = {"peak_rss": "peak_rss_range", **{f"p50@{T}": f"p50_ms_range@{T}" for T in seq_lens}}
    for T in seq_lens:
        ratio[f"p50@{T}"] = round(a[f"p50_ms@{T}"] / b[f"p50_ms@{T}"], 3)
    for key, field in spread.items():
        if field in a and field in b:
            ratio[f"{key} range"] = [round(a[field][0] / b[field][1], 3), round(a[field][1] / b[field][0], 3)]
    return ratio


def _best(peers: list[dict], seq_lens: list[int]) -> tuple[dict, dict[str, str]]:
    """The lowest of the peers' figures, each on its own, and whose each one is (by ratio key)."""
    keys = {**_FIGURES, **{f"p50@{T}": f"p50_ms@{T}" for T in seq_lens}}
    best, whose = {}, {}
    for key, field in keys.items():
        winner = min(peers, key=lambda row: row[field])
        best[field], whose[key] = winner[field], winner["name"]
        spread = field.replace("_mib", "_range") if key == "peak_rss" else field.replace("p50_ms", "p50_ms_range")
        if spread in winner and spread != field:
            best[spread] = winner[spread]
    return best, whose


@contextlib.contextmanager
def _work_dir(given: str | None) -> Iterator[Path]:
    """--work (kept, its files reused) or a temporary directory (removed)."""
    if given:
        Path(given).mkdir(parents=True, exist_ok=True)
        yield Path(given).resolve()
        return
    with tempfile.TemporaryDirectory(prefix="albert-peers-") as tmp:
        yield Path(tmp)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    header = harness.start("peers", versions=VERSIONS)
    with _work_dir(args.work) as work:
        result = run(args, work)
    if args.out:
        setup = {k: v for k, v in result["setup"].items() if k not in ("work", "out", "json", "checkpoint")}
        print(f"wrote {harness.write(args.out, header, {**result, 'setup': setup})}", file=sys.stderr)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    cols = ["name", "bytes", "peak_rss_mib", "load_s", "first_call_s",
            *[f"{p}_ms@{T}" for T in args.seq_lens for p in ("p50", "p90")], "max_abs_diff", "delegate_blocks"]
    print("  ".join(cols))
    for row in result["rows"]:
        print("  ".join(str(row[c]) for c in cols))
    print()
    for r in result["ratios"]:
        whose = r.get("best_of", {})
        print(f"{r['file']} / {r['versus']}: " + ", ".join(
            f"{k} {v}" + (f" ({whose[k]})" if k in whose else "") for k, v in r.items()
            if k not in ("file", "versus", "best_of")))
    for note in result["notes"]:
        print(f"note: {note}")
    print(f"(medians over {args.rounds} fresh processes x {args.runs} calls; "
          f"spread of peak RSS: {statistics.mean(r['peak_rss_range'][1] - r['peak_rss_range'][0] for r in result['rows']):.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
