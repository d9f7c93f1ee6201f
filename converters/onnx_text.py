"""ONNX that takes the text itself: ALBERT's tokenizer as a node of the graph, for an app that
passes a string (ONNX Runtime Mobile / Web / desktop with onnxruntime-extensions' library
registered on the session).

The graph is the exported model (:mod:`.onnx`, each weight once) behind a few nodes:

    text (string, shape [1])
      -> SentencepieceTokenizer (onnxruntime-extensions, domain ai.onnx.contrib), holding the
         checkpoint's spiece.model with ALBERT's pre-processing as its normalizer (lower case,
         accents stripped, quotes and whitespace as ALBERT's tokenizer has them; :mod:`.spiece_rules`)
      -> the pieces cut to max_position_embeddings - 2, then [CLS] pieces [SEP]
      -> input_ids (1, n), attention_mask all ones, token_type_ids all zeros
      -> the model's outputs, and ``token_ids``: the ids the graph computed, so an app (and the
         checks here) can see what the model was fed.

One text per call, no padding: a phone app classifies or embeds one string at a time. Where the
ids differ from albert_edge.tokenizer's, they differ in the classes :mod:`.tokenizer_parity`
names (README, "ONNX with the tokenizer inside"); :func:`verify_file` refuses any other.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from albert_edge.children import child_env, python
from albert_edge.errors import ConversionError, RuntimeUnavailable
from albert_edge.formats.graph import INPUT_NAMES
from albert_edge.runtime.onnx_text import (DOMAIN, EXTRA, IDS_OUTPUT, TEXT_INPUT, extensions_library,
                                           extensions_package, run_text, text_session)

from .verify import TOLERANCES

__all__ = ["export", "verify_file", "quantized_file", "TWIN_ATOL", "text_session", "run_text", "run_texts", "extensions_library", "TEXT_INPUT",
           "IDS_OUTPUT", "EXTRA"]

log = logging.getLogger(__name__)


def export(model, out_path: str | os.PathLike, *, seq_len: int = 128, tokenizer=None, opset: int | None = None) -> Path:
    """Write ``model`` to ``out_path`` as ONNX whose input is one string, ``tokenizer``'s
    spiece.model inside (see the module notes). ``seq_len`` is the length the inner export traces
    with. Written at ``out_path`` itself (``convert`` writes it in the folder it stages)."""
    from . import onnx as onnx_export
    from .spiece_rules import checked_spiece

    if tokenizer is None:
        raise ConversionError("the onnx-text target puts the tokenizer into the file: the checkpoint directory "
                              "needs its spiece.model")
    # before the export: an id past the embedding table would only fail in onnxruntime's Gather
    spiece = checked_spiece(tokenizer, model, "onnx-text")
    try:
        extensions_package()
    except RuntimeUnavailable as exc:
        raise ConversionError(str(exc)) from None
    out_path = Path(out_path)
    with tempfile.TemporaryDirectory(prefix=".onnx-text-", dir=out_path.parent) as tmp:
        inner = onnx_export.export(model, Path(tmp) / "model.onnx", seq_len=seq_len,
                                   opset=opset or onnx_export.DEFAULT_OPSET)
        _with_tokenizer(inner, spiece, model, out_path)
    return out_path


def _with_tokenizer(inner: Path, spiece: Path, model, out_path: Path) -> None:
    """Write ``inner`` (a token-id .onnx of ``model``) with the tokenizer in front to ``out_path``."""
    import onnx
    from onnx import compose

    from albert_edge.tokenizer import AlbertTokenizer

    from .spiece_rules import with_albert_normalizer

    ids = AlbertTokenizer(spiece)
    proto = onnx.load(str(inner), load_external_data=True)
    front = _tokenizer_graph(with_albert_normalizer(spiece), ids.cls_id, ids.sep_id,
                             model.config.max_position_embeddings, proto)
    merged = compose.merge_models(front, proto, io_map=[(n, n) for n in INPUT_NAMES],
                                  outputs=[*model.output_names, IDS_OUTPUT])
    kept = {(o.domain, o.version): o for o in merged.opset_import}  # merge_models lists the model's twice
    del merged.opset_import[:]
    merged.opset_import.extend(kept.values())
    # The model's outputs first, in its order, as in model.onnx; token_ids last.
    order = [*model.output_names, IDS_OUTPUT]
    outputs = sorted(merged.graph.output, key=lambda o: order.index(o.name))
    del merged.graph.output[:]
    merged.graph.output.extend(outputs)
    onnx.save(merged, str(out_path))


def _tokenizer_graph(spiece: bytes, cls_id: int, sep_id: int, max_len: int, inner):
    """text -> input_ids, attention_mask, token_type_ids (int64, (1, n)) and token_ids."""
    from onnx import TensorProto, helper, numpy_helper

    def const(name: str, values, dtype) -> object:
        return numpy_helper.from_array(np.asarray(values, dtype=dtype), name)

    initializers = [
        const("tok_nbest", [0], np.int64), const("tok_alpha", [0.0], np.float32), const("tok_false", [False], np.bool_),
        const("tok_zero", [0], np.int64), const("tok_keep", [max_len - 2], np.int64),
        const("tok_cls", [cls_id], np.int64), const("tok_sep", [sep_id], np.int64), const("tok_axis0", [0], np.int64),
    ]
    nodes = [
        # inputs: text, nbest size, alpha, add BOS, add EOS, reverse; outputs: ids (int32), row starts
        helper.make_node("SentencepieceTokenizer", [TEXT_INPUT, "tok_nbest", "tok_alpha", "tok_false", "tok_false",
                                                    "tok_false"], ["tok_pieces", "tok_rows"], domain=DOMAIN,
                         model=spiece),
        helper.make_node("Cast", ["tok_pieces"], ["tok_pieces64"], to=TensorProto.INT64),
        helper.make_node("Slice", ["tok_pieces64", "tok_zero", "tok_keep", "tok_axis0"], ["tok_cut"]),
        helper.make_node("Concat", ["tok_cls", "tok_cut", "tok_sep"], ["tok_ids"], axis=0),
        helper.make_node("Unsqueeze", ["tok_ids", "tok_axis0"], ["input_ids"]),
        helper.make_node("Shape", ["input_ids"], ["tok_shape"]),
        helper.make_node("ConstantOfShape", ["tok_shape"], ["attention_mask"],
                         value=numpy_helper.from_array(np.array([1], np.int64))),
        helper.make_node("ConstantOfShape", ["tok_shape"], ["token_type_ids"],
                         value=numpy_helper.from_array(np.array([0], np.int64))),
        helper.make_node("Identity", ["input_ids"], [IDS_OUTPUT]),
    ]
    ids_shape = [1, "sequence"]
    graph = helper.make_graph(
        nodes, "albert_tokenizer", [helper.make_tensor_value_info(TEXT_INPUT, TensorProto.STRING, [1])],
        [helper.make_tensor_value_info(n, TensorProto.INT64, ids_shape) for n in (*INPUT_NAMES, IDS_OUTPUT)],
        initializers)
    opsets = [*inner.opset_import, helper.make_opsetid(DOMAIN, 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=inner.ir_version)


# -- running and checking the file --------------------------------------------------------------

# onnxruntime's Gather error for an index past its table: "indices element out of data bounds,
# idx=401 must be within the inclusive range [-400,399]"
_GATHER_PAST_TABLE = re.compile(r"Gather.*idx=(?P<id>-?\d+) must be within the inclusive range \[-(?P<rows>\d+),")
_RUN_TEXTS_MAIN = "import sys; from albert_edge.converters.onnx_text import _run_texts_main; _run_texts_main(*sys.argv[1:])"


def run_texts(path: str | os.PathLike, texts: list[str]) -> list[dict[str, np.ndarray]]:
    """The file's outputs for each of ``texts``, computed in a fresh Python process: loading
    onnxruntime-extensions' library into a process that has TensorFlow loaded crashes it
    (segmentation fault, tensorflow 2.21 with onnxruntime-extensions 0.15.2), and the build side
    may have it loaded."""
    with tempfile.TemporaryDirectory(prefix="albert-edge-onnx-text-") as tmp:
        given, got = Path(tmp) / "texts.json", Path(tmp) / "outputs.npz"
        given.write_text(json.dumps(texts), encoding="utf-8")
        done = subprocess.run(python("-c", _RUN_TEXTS_MAIN, str(path), str(given), str(got)), env=child_env(),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if done.returncode != 0:
            lines = (done.stderr or "").strip().splitlines()
            last = lines[-1] if lines else f"exit status {done.returncode}"
            past = _GATHER_PAST_TABLE.search(last)
            if past:  # the tokenizer inside gives ids the embedding table has no row for
                raise ConversionError(f"{Path(path).name}: its tokenizer gave id {past['id']} but the model's word "
                                      f"embeddings have {past['rows']} rows: the spiece.model and the model do not "
                                      "match (convert with the spiece.model the model was trained with)")
            raise ConversionError(f"{Path(path).name} does not run in onnxruntime with its extensions: {last}")
        with np.load(got, allow_pickle=False) as arrays:
            out: list[dict[str, np.ndarray]] = [{} for _ in texts]
            for key in arrays.files:
                row, name = key.split("/", 1)
                out[int(row)][name] = arrays[key]
    return out


def _run_texts_main(path: str, given: str, out: str) -> None:
    session = text_session(path)
    texts = json.loads(Path(given).read_text(encoding="utf-8"))
    np.savez(out, **{f"{i}/{name}": value for i, text in enumerate(texts) for name, value in run_text(session, text).items()})


def verify_file(model, path: Path, seq_len: int, tokenizer):
    """The file against PyTorch: for each of :func:`_texts`, the ids the graph computed must be
    albert_edge.tokenizer's or differ in a known class (:mod:`.tokenizer_parity`), and every
    output must equal PyTorch's on those ids. Returns the VerifyReport ``convert`` keeps."""
    import torch

    from albert_edge.formats.weights import analyze, read_file

    from .verify import ATOL, RTOL, VerifyReport, _compare

    start = time.perf_counter()
    report = VerifyReport(path=path, format="onnx", backend="onnxruntime+extensions", tokenized=True)
    for text, ids, got in _checked_ids(path, model.config, tokenizer, report.io_problems):
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        with torch.no_grad():
            expected = model.eval()(*(torch.from_numpy(feeds[n]) for n in INPUT_NAMES))
        expected = expected if isinstance(expected, tuple) else (expected,)
        report.cases += [_compare("text", feeds, name, want.numpy(), got[name], ATOL, RTOL)
                         for name, want in zip(model.output_names, expected)]
    report.contents = read_file(path)
    report.weights = analyze(report.contents, model)
    report.seconds = time.perf_counter() - start
    return report


def _texts() -> list[str]:
    """What a file is checked on: the verification sentences and the tokenizer test strings' first 40."""
    from .tokenizer_parity import hard_strings
    from .verify import SENTENCES

    return [a for a, _ in SENTENCES] + [text for _, text in hard_strings(40)]


def _checked_ids(path: Path, config, tokenizer, problems: list[str]):
    """(text, the ids the file computed, its outputs) for each of :func:`_texts`, run as an app
    runs the file; a text whose ids differ from albert_edge.tokenizer's in no known way, or a
    file whose input is not the text, is added to ``problems``."""
    import onnx

    from albert_edge.tokenizer import find_spiece

    from .tokenizer_parity import _Reference, difference_class, is_known

    inputs = [i.name for i in onnx.load(str(path), load_external_data=False).graph.input]
    if inputs != [TEXT_INPUT]:
        problems.append(f"the file's inputs are {inputs}, not [{TEXT_INPUT!r}]")
        return []
    reference = _Reference(find_spiece(getattr(tokenizer, "path", tokenizer)), config.max_position_embeddings)
    texts = _texts()
    out = []
    for text, got in zip(texts, run_texts(path, texts)):
        ids = got[IDS_OUTPUT]
        kind = difference_class(reference, text, ids[0].tolist())
        # A text cut to the model's length may end one piece otherwise (a tie broken otherwise moves the cut).
        if not is_known(kind) and ids.shape[1] < config.max_position_embeddings:
            problems.append(f"the file's token ids for {text[:60]!r} differ from albert_edge.tokenizer's in no "
                            "known way")
        out.append((text, ids, got))
    return out


# -- the quantized twin ----------------------------------------------------------------------

# The int8 text file against the int8 token-id .onnx it was made from, fed the ids the text file
# computed: the same graph behind the tokenizer.
TWIN_ATOL = TOLERANCES["onnx-text"].twin_atol


def quantized_file(model, parent, path: Path, scheme: str, *, tokenizer=None, seq_len: int = 128,
                   opset: int | None = None):
    """Write the ``scheme`` twin of the verified fp32 text file ``parent`` (a
    converters.result.ConvertedFile) at ``path``, beside it: the fp32 token-id .onnx is quantized by
    albert_edge.quantize (which checks it and measures it against the fp32 .onnx on held-out
    text), and the tokenizer is put in front. The file must store each weight once, compute the
    tokenizer's ids (as its parent does) and give the int8 .onnx's outputs for them within
    :data:`TWIN_ATOL`. Returns its ConvertedFile."""
    from albert_edge.formats import manifest as manifest_io
    from albert_edge.formats.copies import weight_copies
    from albert_edge.formats.weights import analyze, read_file
    from albert_edge.quantize import QuantizeConfig, quantize
    from albert_edge.tokenizer import find_spiece

    from .result import ConvertedFile
    from .twin import TwinReport, check_twin, verified_onnx

    spiece = find_spiece(getattr(tokenizer, "path", tokenizer))
    t0 = time.perf_counter()
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix=".onnx-text-quantize-", dir=path.parent) as scratch:
        scratch = Path(scratch)
        fp32 = verified_onnx(model, scratch, seq_len, tokenizer, opset)
        result = quantize(fp32, QuantizeConfig(scheme=scheme, tokenizer=spiece, seq_len=seq_len),
                          scratch / f"model.{scheme}.onnx")
        quantized_entry = manifest_io.read(scratch).file(result.out_path.name)
        _with_tokenizer(result.out_path, spiece, model, path)
        t1 = time.perf_counter()
        twin = _twin_diff(result.out_path, path, model.config, spiece, problems)
    contents = read_file(path)
    weights = analyze(contents, model)
    copies = weight_copies(read_file(parent.path), contents)
    check_twin(path.name, weights, copies, twin, TWIN_ATOL, problems)
    figures = {**quantized_entry.parity, "parent": parent.name, "parent_sha256": parent.entry.sha256,
               "measured_on": f"the token-id .onnx pair (model.onnx, model.{scheme}.onnx) this file and its parent "
                              "were made from; this file gives the int8 .onnx's outputs for the ids its tokenizer "
                              "computes (twin_max_abs_diff)",
               "twin_max_abs_diff": twin, "twin_atol": TWIN_ATOL, "weights_checked": len(copies),
               "backend": "onnxruntime+extensions", "ok": True}
    report = TwinReport(contents, weights, figures)
    entry = manifest_io.file_entry(path, report)
    entry.precision = scheme
    return ConvertedFile(path.name, path, "onnx-text", t1 - t0, time.perf_counter() - t1, report, entry)


def _twin_diff(int8_onnx: Path, path: Path, config, spiece: Path, problems: list[str]) -> dict[str, float]:
    """The largest difference of each output between the text file ``path`` and the int8 token-id
    .onnx it was made from, fed the ids the text file computed for each of :func:`_texts` (a text
    whose ids differ in no known way is added to ``problems``)."""
    import onnxruntime

    # onnxruntime's defaults on both sides, as run_texts opens the text file: a session set up
    # otherwise may run another graph (a fusion on, or off), sum the float parts in another
    # order, and an int8 activation quantized from them round to the next step (measured up to
    # 0.015 in a logit against Session's options, before the residuals were written as Sum).
    plain = onnxruntime.InferenceSession(str(int8_onnx), providers=["CPUExecutionProvider"])
    names = [o.name for o in plain.get_outputs()]
    twin: dict[str, float] = {}
    for _, ids, got in _checked_ids(path, config, spiece, problems):
        want = dict(zip(names, plain.run(names, {"input_ids": ids, "attention_mask": np.ones_like(ids),
                                                 "token_type_ids": np.zeros_like(ids)})))
        for name, value in want.items():
            diff = float(np.abs(value.astype(np.float64) - got[name].astype(np.float64)).max())
            twin[name] = max(twin.get(name, 0.0), diff)
    return twin
