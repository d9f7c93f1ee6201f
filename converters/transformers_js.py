"""The transformers-js target: a folder that transformers.js (``@huggingface/transformers`` v3
and v4) loads as it is, laid out as optimum exports a model for it, from files albert-edge makes
and checks itself.

``albert-edge convert CKPT --to transformers-js --out OUT`` writes::

    OUT/
      model.transformers-js.onnx        the fp32 file the manifest lists (a hard link of the one below)
      manifest.json
      transformers-js/                  the model folder: give transformers.js OUT as its local model path
        config.json                     model_type albert, architectures (AlbertModel, AlbertForMaskedLM,
                                        AlbertForSequenceClassification or AlbertForQuestionAnswering),
                                        id2label / label2id
        tokenizer.json                  ALBERT's tokenizer from spiece.model (converters.tokenizer_json)
        tokenizer_config.json           tokenizer_class AlbertTokenizer, special tokens, model_max_length
        special_tokens_map.json
        onnx/model.onnx                 fp32, each shared weight stored once (the onnx target's exporter)
        onnx/model_quantized.onnx       int8-dynamic (albert_edge.quantize), what transformers.js takes
                                        for dtype "q8", its default on WebAssembly
        onnx/model_fp16.onnx            fp16 (albert_edge.quantize's fp16 scheme: the same graph, each
                                        weight once in float16, outputs cast back to float32), what
                                        transformers.js takes for dtype "fp16", its pairing for WebGPU

and an app loads it with ``env.localModelPath = OUT; env.allowRemoteModels = false;
pipeline(task, "transformers-js")`` (or ``local_files_only: true``).

What transformers.js feeds and reads: int64 ``input_ids``, ``attention_mask`` and
``token_type_ids`` (it makes zeros of the last when the tokenizer gives none; AlbertTokenizer
gives them); it reads the output its model class names: ``last_hidden_state`` (feature
extraction), ``logits`` (text classification, fill mask: our masked-LM head's
``prediction_logits`` is renamed in every file), ``start_logits`` / ``end_logits`` (question
answering). The model files are found by name, ``onnx/model{suffix}.onnx``, the suffix by dtype
("" for fp32, "_quantized" for q8, "_fp16" for fp16).

A folder is not one file, and the registry, the manifest and the device side deal in files: so
the target's file is ``model.transformers-js.onnx`` beside the folder, the folder's fp32 model
linked (its bytes are on disk once), verified and listed in the manifest like any .onnx; the rest
of the folder is checked by :func:`verify` before the conversion is put in place: its three ONNX files
in onnxruntime against PyTorch, the tokenizer.json in Hugging Face's ``tokenizers`` against
albert_edge.tokenizer on a sample of hard strings, config.json against the model.

Refused in one line, before anything is written: a head transformers.js has no ALBERT class for
(pretraining, token classification), a checkpoint without a spiece.model, or whose spiece.model
is not a Unigram model or has not one piece per embedding row, a classifier whose labels are not
names (albert_edge.labels.check_labels).

tests/web runs transformers.js (@huggingface/transformers, pinned in web/package-lock.json) on such
folders in Node and in headless Chromium: the text-classification, feature-extraction and
fill-mask pipelines at dtype fp32 (against PyTorch) and q8 (against albert-edge's Session on the
same int8 file).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from torch import Tensor, nn

from albert_edge.errors import ConversionError
from albert_edge.quantize.schemes import Scheme
from albert_edge.files import link_or_copy
from albert_edge.report.transformers_js import MODEL_FILES  # dtype -> the file transformers.js loads for it

from .spiece_rules import checked_spiece
from .tokenizer_json import TOKENIZER_FILES, load_tokenizer, tokenizer_json, write_tokenizer_files
from .verify import TOLERANCES, failure, weights_problems

__all__ = ["export", "verify_folder", "check", "folder_of", "file_model", "FOLDER", "ARCHITECTURES", "MODEL_FILES",
           "SCHEMES", "QUANTIZED_SCHEME"]

log = logging.getLogger(__name__)

FOLDER = "transformers-js"
# --head -> the class transformers.js maps config.json's architectures to (its models/registry.js).
ARCHITECTURES = {"base": "AlbertModel", "mlm": "AlbertForMaskedLM", "classification": "AlbertForSequenceClassification",
                 "qa": "AlbertForQuestionAnswering"}
# dtype -> the quantize scheme its file is made with (fp32 is the onnx target's file itself).
SCHEMES = {"q8": Scheme.INT8_DYNAMIC, "fp16": Scheme.FP16}
QUANTIZED_SCHEME = SCHEMES["q8"]
# Our output name -> the one transformers.js's output class reads.
RENAMED = {"prediction_logits": "logits"}
# Strings the tokenizer.json is checked on at conversion (the tests check 2,400).
TOKENIZER_SAMPLE = 400
# The int8 file against PyTorch on real text: the least cosine of each output (all its values in a
# batch: a classifier's few logits per row are too few for a cosine of their own).
MIN_COSINE = TOLERANCES["transformers-js"].min_cosine


def folder_of(path: str | os.PathLike) -> Path:
    """The model folder written beside the target's file ``path``."""
    return Path(path).parent / FOLDER


def export(model, out_path: str | os.PathLike, *, seq_len: int = 128, tokenizer=None,
           opset: int | None = None) -> Path:
    """Write the transformers.js folder of ``model`` beside ``out_path`` (:func:`folder_of`) and
    its fp32 model at ``out_path``. ``tokenizer``: an AlbertTokenizer or the path of a spiece.model
    (or a directory with one), required. Returns ``out_path``."""
    out_path = Path(out_path)
    head = _head(model)
    config = model.config
    if tokenizer is None:
        raise ConversionError("the transformers-js target writes the tokenizer into its folder and found no "
                              "spiece.model beside the checkpoint: put ALBERT's spiece.model there")
    tok = load_tokenizer(tokenizer)
    tokenizer_json(tok)  # a model that cannot be a tokenizer.json is refused before any work
    checked_spiece(tokenizer, model, "transformers-js")  # one piece per embedding row
    hf_config = _hf_config(model, head)
    folder = folder_of(out_path)
    shutil.rmtree(folder, ignore_errors=True)  # replaced whole: nothing of an earlier folder stays in it
    (folder / "onnx").mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(hf_config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    write_tokenizer_files(tok, folder, config.max_position_embeddings)
    with tempfile.TemporaryDirectory(prefix=".transformers-js-", dir=out_path.parent) as scratch:
        for dtype, made in _model_files(model, Path(scratch), seq_len, tok, opset).items():
            _with_output_names(made, folder / MODEL_FILES[dtype])
    out_path.unlink(missing_ok=True)
    link_or_copy(folder / MODEL_FILES["fp32"], out_path)
    return out_path


def check(model, path: Path, seq_len: int, tokenizer):
    """The registry's verify: the target's file as every .onnx is verified (against the model whose
    outputs it holds, :func:`file_model`), then the folder beside it (:func:`verify_folder`).
    Returns the file's VerifyReport; a folder that fails is one ConversionError line."""
    from .verify import verify

    report = verify(file_model(model), path, seq_len=seq_len, tokenizer=tokenizer)
    if report.ok:
        verify_folder(model, folder_of(path), seq_len, tokenizer, file=path)
    return report


def file_model(model):
    """The PyTorch module whose outputs the folder's files hold, by name: the masked-LM head's
    output is ``logits`` there."""
    if not any(name in RENAMED for name in model.output_names):
        return model
    return _Renamed(model).eval()


def verify_folder(model, folder: str | os.PathLike, seq_len: int, tokenizer,
                  file: Path | None = None) -> dict[str, Any]:
    """Check a transformers.js folder against ``model``: config.json; each ONNX file in
    onnxruntime, fed as transformers.js feeds them, against PyTorch (fp32 within the verify
    tolerances, int8 and fp16 by the cosine of each output); each weight stored once in each;
    tokenizer.json in ``tokenizers`` against our tokenizer. ``file``: the target's file, which must
    be the fp32 model's bytes. Returns the figures; ConversionError naming the first problem."""
    from albert_edge.formats.manifest import sha256_of
    from albert_edge.formats.weights import analyze, read_file

    folder = Path(folder)
    tok = load_tokenizer(tokenizer)
    head = _head(model)
    missing = [name for name in ("config.json", *TOKENIZER_FILES, *MODEL_FILES.values())
               if not (folder / name).is_file()]
    if missing:
        raise ConversionError(f"{', '.join(missing)} missing from the {FOLDER} folder")
    written = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    if written != json.loads(json.dumps(_hf_config(model, head))):
        raise ConversionError(f"{FOLDER}/config.json does not describe the model converted")
    if file is not None and sha256_of(file) != sha256_of(folder / MODEL_FILES["fp32"]):
        raise ConversionError(f"{file.name} is not the folder's {MODEL_FILES['fp32']}")
    reference = file_model(model)
    figures: dict[str, Any] = {}
    length = min(seq_len, model.config.max_position_embeddings)
    batches = [tok(texts, pairs, max_length=length, padding="longest") for texts, pairs in _sentences()]
    for dtype, name in MODEL_FILES.items():
        weights = analyze(read_file(folder / name), model)
        if not weights.ok:
            raise failure(weights_problems(weights), name, more=False)
        figures[dtype] = {}
        for batch in batches:
            got = _run(folder / name, batch, tuple(reference.output_names))
            for output, value in _agreement(name, dtype, _pytorch(reference, batch), got,
                                            batch["attention_mask"]).items():
                worst = min if dtype != "fp32" else max
                figures[dtype][output] = worst(figures[dtype].get(output, value), value)
    figures["tokenizer"] = check_tokenizer_json(folder / "tokenizer.json", tok, model.config.max_position_embeddings)
    log.info("transformers.js folder checked: %s", figures)
    return figures


def check_tokenizer_json(path: str | os.PathLike, tok, seq_len: int, n: int = TOKENIZER_SAMPLE) -> dict[str, int]:
    """tokenizer.json loaded by Hugging Face's ``tokenizers`` against ``tok`` on ``n`` of the hard
    strings of :mod:`.tokenizer_parity` and on a pair: the count of each difference class
    (:func:`.tokenizer_json.difference`); ConversionError where one is a difference no class names."""
    from .tokenizer_json import count_differences
    from .tokenizer_parity import OTHER, hard_strings

    engine = _tokenizers().Tokenizer.from_file(str(path))
    engine.enable_truncation(seq_len)
    texts = [text for _, text in hard_strings(n)]
    counts, examples = count_differences(tok, engine, texts, seq_len)
    if OTHER in counts:
        raise ConversionError(f"{Path(path).name} gives other ids than albert-edge's tokenizer for {counts[OTHER]} of "
                              f"{n} texts, in no known way (the first: {examples[OTHER][0][:60]!r})")
    a, b = _sentences()[1][0][0], _sentences()[1][1][0]
    pair = engine.encode(a, b)
    want = tok(a, b, max_length=seq_len, padding=False)
    if pair.ids != want["input_ids"][0].tolist() or pair.type_ids != want["token_type_ids"][0].tolist():
        raise ConversionError(f"{Path(path).name} makes a pair of texts otherwise than albert-edge's tokenizer")
    return counts


# -- the parts -----------------------------------------------------------------------------------

def _head(model) -> str:
    from .outputs import head_of

    head = head_of(model)
    if head not in ARCHITECTURES:
        heads = ", ".join(ARCHITECTURES)
        raise ConversionError(f"transformers.js has no ALBERT model class for the {head!r} head; the transformers-js "
                              f"target takes {heads} (--head mlm for a pretraining checkpoint's masked-LM head)")
    return head


def _hf_config(model, head: str) -> dict[str, Any]:
    """config.json: the checkpoint's config with the architecture transformers.js maps to its
    pipeline; a classifier's labels checked as every label an app shows is."""
    from albert_edge.labels import check_labels

    config = model.config
    if head == "classification":
        labels = config.label_names or tuple(f"LABEL_{i}" for i in range(config.num_labels))
        check_labels(labels, config.num_labels, where="config.json id2label")
    return config.to_hf_dict([ARCHITECTURES[head]])


def _model_files(model, scratch: Path, seq_len: int, tok, opset: int | None) -> dict[str, Path]:
    """The fp32 .onnx (the onnx target's exporter, verified) and its int8-dynamic and fp16 twins
    (the quantizer's checks: each weight once, no unintended float32 weight, measured against the
    fp32 file on held-out text), in ``scratch``, by dtype."""
    from albert_edge.quantize import QuantizeConfig, quantize

    from .twin import verified_onnx

    files = {"fp32": verified_onnx(model, scratch, seq_len, tok, opset)}
    for dtype, scheme in SCHEMES.items():
        result = quantize(files["fp32"], QuantizeConfig(scheme=scheme, tokenizer=tok.path, seq_len=seq_len),
                          scratch / f"model.{scheme}.onnx")
        if not result.kept:  # a max_drop is never set here; a guard
            raise ConversionError(f"the {scheme} file was not kept")
        files[dtype] = result.out_path
    return files


def _with_output_names(src: Path, dst: Path) -> None:
    """``src`` at ``dst`` (a staging directory's), each output of RENAMED under the name
    transformers.js reads."""
    import onnx

    proto = onnx.load(str(src), load_external_data=False)
    renamed = {o.name: RENAMED[o.name] for o in proto.graph.output if o.name in RENAMED}
    if any(init.data_location == onnx.TensorProto.EXTERNAL for init in proto.graph.initializer):
        raise ConversionError("the transformers-js target writes single-file models (no external data): this model's "
                              "weights are over 2 GiB")
    for node in proto.graph.node:
        node.output[:] = [renamed.get(n, n) for n in node.output]
        node.input[:] = [renamed.get(n, n) for n in node.input]
    for output in proto.graph.output:
        output.name = renamed.get(output.name, output.name)
    onnx.save(proto, str(dst))


class _Renamed(nn.Module):
    """``model`` with its outputs under RENAMED's names. It holds no weight of its own: every
    parameter is the model's, so the weights-once check counts the same bytes."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.config = model.config
        self.output_names = tuple(RENAMED.get(n, n) for n in model.output_names)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None):
        return self.model(input_ids, attention_mask, token_type_ids)


def _sentences() -> list[tuple[list[str], list[str] | None]]:
    """verify's real sentences as a batch of single texts and a batch of pairs."""
    from .verify import SENTENCES

    pairs = [(a, b) for a, b in SENTENCES if b is not None]
    return [([a for a, b in SENTENCES if b is None], None), ([a for a, _ in pairs], [b for _, b in pairs])]


def _pytorch(model, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    from .verify import _reference

    return _reference(model, batch)


def _run(path: Path, batch: dict[str, np.ndarray], outputs: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The file in onnxruntime with its default options, fed as transformers.js feeds it: int64
    tensors under the names the session lists."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    inputs = {i.name: i.type for i in session.get_inputs()}
    want = {"input_ids": "tensor(int64)", "attention_mask": "tensor(int64)", "token_type_ids": "tensor(int64)"}
    if inputs != want:
        raise ConversionError(f"{path.name} takes {inputs}; transformers.js feeds {want}")
    names = [o.name for o in session.get_outputs()]
    if sorted(names) != sorted(outputs):
        raise ConversionError(f"{path.name} gives {', '.join(names)}; transformers.js reads {', '.join(outputs)}")
    return dict(zip(names, session.run(names, {k: batch[k].astype(np.int64) for k in want})))


def _agreement(name: str, dtype: str, expected: dict[str, np.ndarray], got: dict[str, np.ndarray],
               mask: np.ndarray) -> dict[str, float]:
    """fp32: each output within verify's tolerances; int8: the cosine of each output's values
    (real tokens only) with PyTorch's at least MIN_COSINE. An adaptive file's (convert --adaptive)
    int8 answers are compared where it stopped at PyTorch's pass (elsewhere they are another pass's
    answers), and how often it did is its ``passes`` figure."""
    from .verify import ATOL, RTOL, OutputMatchError

    figures = {}
    same = np.ones(len(mask), bool)
    if dtype != "fp32" and "passes" in expected:
        same = got["passes"] == expected["passes"]
        figures["passes"] = float(same.mean())
    for output, want in expected.items():
        have = got[output].astype(np.float64)
        want = want.astype(np.float64)
        if dtype != "fp32" and output == "passes":
            continue
        have, want = have[same], want[same]
        if have.ndim == 3:  # per token: the real tokens only
            keep = mask[same].astype(bool)
            have, want = have[keep], want[keep]
        if dtype == "fp32":
            diff = float(np.max(np.abs(have - want) - RTOL * np.abs(want)))
            figures[output] = float(np.max(np.abs(have - want)))
            if not diff <= ATOL:
                raise OutputMatchError(f"{name}: {output} differs from PyTorch by {figures[output]:.3g} "
                                       f"(atol {ATOL:g}, rtol {RTOL:g})", output=output,
                                       max_abs_diff=figures[output], atol=ATOL, rtol=RTOL)
        else:
            have, want = have.ravel(), want.ravel()
            figures[output] = float(have @ want / (np.linalg.norm(have) * np.linalg.norm(want) + 1e-30))
            if not figures[output] >= MIN_COSINE:
                raise OutputMatchError(f"{name}: {output} has a cosine of {figures[output]:.4f} with PyTorch's "
                                       f"(at least {MIN_COSINE} expected)", output=output)
    return figures


def _tokenizers():
    try:
        import tokenizers
    except ImportError:
        raise ConversionError("the transformers-js target checks its tokenizer.json with Hugging Face's tokenizers "
                              "package, which is not installed: pip install tokenizers") from None
    return tokenizers
