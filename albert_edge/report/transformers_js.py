"""The transformers.js lines of the report's snippets (:mod:`.snippets`): the folder a file's
manifest entry lists beside it (its ``folder_files``, the transformers-js target's model folder),
what transformers.js' ``pipeline`` makes of it and the device and dtype an app asks for.

The device and dtype are what tests/web/test_webgpu.py measured in headless Chromium: on WebGPU
the fp32 file answers as transformers' model of the checkpoint; the fp16 file needs an adapter
with ``shader-f16`` (transformers.js and onnxruntime-web refuse it on one without); the int8
file's attention (onnxruntime's MultiHeadAttention with a padding mask) is not implemented by
onnxruntime-web's WebGPU provider, so it runs on WebAssembly. Device side: reads the manifest and
the folder's config.json, imports nothing beyond the standard library."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

__all__ = ["MODEL_FILES", "PIPELINES", "WEBGPU_DTYPE", "PACKAGE", "Folder", "folder_of", "folder_fields"]

# transformers.js' dtype -> the file of the folder it loads for it.
MODEL_FILES = {"fp32": "onnx/model.onnx", "q8": "onnx/model_quantized.onnx", "fp16": "onnx/model_fp16.onnx"}
# The dtype that runs on WebGPU on any adapter (tests/web/test_webgpu.py), and the one that needs shader-f16.
WEBGPU_DTYPE, F16_DTYPE, WASM_DTYPE = "fp32", "fp16", "q8"
PACKAGE = "npm: @huggingface/transformers 4.3.2"
# config.json's architecture -> the pipeline's task, the name the code gives it and the line that calls it
# ({text}: the app's text; a second field of a question-answering call is its context).
PIPELINES = {
    "AlbertForSequenceClassification": (
        "text-classification", "classify",
        "const [best] = await classify({text});  // {{ label, score }}: config.json's id2label names the label"),
    "AlbertModel": ("feature-extraction", "embed",
                    'const embedding = await embed({text}, {{ pooling: "mean" }});  // a Tensor [1, hidden]'),
    "AlbertForMaskedLM": ("fill-mask", "fill",
                          "const top = await fill({text});  // a text with one [MASK]: [{{ token_str, score }}]"),
    "AlbertForQuestionAnswering": (
        "question-answering", "answer",
        "const found = await answer({text}, /* the context, a string */);  // {{ answer, score }}"),
}

# The device the code asks for (the app's choice, marked), by whether the fp32 file runs on WebGPU.
_DEVICES = {True: ('"webgpu"', 'the choice: "webgpu" where the browser has WebGPU, "wasm" where it has not, '
                               '"cpu" in Node'),
            False: ('"wasm"', "the choice: WebAssembly, as onnxruntime-web's WebGPU provider does not run this "
                              'file; "cpu" in Node')}


@dataclass(frozen=True)
class Folder:
    """A transformers.js model folder beside a file: its name, the pipeline its head makes and
    the dtypes whose files it holds."""

    name: str  # transformers-js
    architecture: str  # config.json's: AlbertForSequenceClassification
    dtypes: tuple[str, ...]  # of MODEL_FILES, in its order

    @property
    def task(self) -> str:
        return PIPELINES[self.architecture][0]


def folder_of(row: dict[str, Any]) -> Folder | None:
    """The transformers.js folder the manifest beside the row's file lists with it (its entry's
    ``folder_files``, checked against the folder when the report read the manifest), None where it
    lists none or the folder's config.json names no ALBERT class transformers.js runs."""
    from ..formats import manifest as manifest_io

    path = Path(row["path"]) if row.get("path") else None
    if path is None or not (path.parent / manifest_io.MANIFEST_NAME).is_file():
        return None
    entry = next((e for e in manifest_io.read(path.parent).files if e.name == path.name), None)
    names = [PurePosixPath(f["name"]) for f in (entry.folder_files if entry else ())]
    tops = {n.parts[0] for n in names if len(n.parts) > 1}
    if len(tops) != 1:
        return None
    (top,) = tops
    inside = {n.relative_to(top).as_posix() for n in names}
    if "config.json" not in inside:
        return None
    config = json.loads((path.parent / top / "config.json").read_text(encoding="utf-8"))
    architecture = next((a for a in config.get("architectures") or () if a in PIPELINES), None)
    if architecture is None:
        return None
    return Folder(top, architecture, tuple(d for d, f in MODEL_FILES.items() if f in inside))


def folder_fields(folder: Folder, webgpu: bool, text: str) -> dict[str, str]:
    """The fields of the transformers.js template and note for ``folder``: ``webgpu``, whether its
    fp32 file runs on onnxruntime-web's WebGPU provider; ``text``, the app's text in the code."""
    task, call, read = PIPELINES[folder.architecture]
    fp16 = (f'// "{F16_DTYPE}" ({MODEL_FILES[F16_DTYPE]}) needs an adapter with shader-f16, which transformers.js '
            'refuses it without:\n//   (await navigator.gpu.requestAdapter())?.features.has("shader-f16")'
            if F16_DTYPE in folder.dtypes and webgpu else "")
    q8 = (f'// "{WASM_DTYPE}" ({MODEL_FILES[WASM_DTYPE]}, the int8 file) runs on WebAssembly only: '
          f'device "wasm", dtype "{WASM_DTYPE}"' if WASM_DTYPE in folder.dtypes else "")
    return {
        "folder": folder.name, "task": task, "call": call, "read": read.format(text=text),
        "device": _DEVICES[webgpu][0], "device_note": _DEVICES[webgpu][1],
        "dtype": f'"{WEBGPU_DTYPE}"', "dtype_note": f"{MODEL_FILES[WEBGPU_DTYPE]}, the float32 file: it runs on WebGPU",
        "other_dtypes": "".join(f"\n{line}" for line in (fp16, q8) if line),
        "dtypes": ", ".join(f"{d} ({MODEL_FILES[d]})" for d in folder.dtypes),
    }
