"""The few lines an Android (Kotlin), iOS (Swift) and Web (JavaScript) app needs to run each model
file, filled with the file's own facts: its name, input names, dtypes and shape (batch 1, a
dynamic or a fixed sequence axis), output names and, for a MediaPipe file, its task; and the files
an app reads beside it, by the names they have in its folder (its manifest's ``app_files``): the
tokenizer (spiece.model) the code loads to make the token ids, and a classifier's labels
(labels.json) the code loads and indexes with the class the file scores highest.

One table (:data:`FRAMEWORKS`) says which framework loads which file and holds its code's
templates (files of the templates folder, :mod:`.code_templates`); :func:`snippets` picks the row
of each file and fills it in. Device side: reads the inspect analysis the report already made and
the manifest beside the file (the app files checked against it, the labels by
:func:`albert_edge.labels.check_labels`), imports nothing beyond the standard library.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .app_lines import AppFiles, app_files_of, classified, with_app_files
from .code_templates import template, templates
from .transformers_js import PACKAGE as TRANSFORMERS_JS_PACKAGE
from .transformers_js import Folder, folder_fields, folder_of

__all__ = ["PLATFORMS", "PLATFORM_TITLES", "FRAMEWORKS", "TOKEN_IDS_NOTE", "WEBGPU_REFUSES", "Framework", "FileFacts",
           "AppFiles",
           "facts_of", "app_files_of", "framework_of", "snippets", "blocks", "new_group", "file_snippet"]

PLATFORMS = ("kotlin", "swift", "js")  # Android, iOS, Web
PLATFORM_TITLES = {"kotlin": "Android (Kotlin)", "swift": "iOS (Swift)", "js": "Web (JavaScript)"}
LANGUAGES = {"kotlin": "kotlin", "swift": "swift", "js": "javascript"}

TOKENIZE_NOTE = ("the app tokenizes: ALBERT's sentencepiece model (spiece.model) after lower-casing and stripping "
                 "accents, [CLS] text [SEP]; attention_mask 1 per token, token_type_ids 0")
# The note of a file that takes token ids, in most frameworks (filled as the templates are).
TOKEN_IDS_NOTE = "the file takes token ids ({dtype}, shape 1 x {n}); outputs: {output_names}"


@dataclass(frozen=True)
class Dtype:
    """How each platform spells an integer input dtype."""

    kotlin_array: str  # LongArray
    kotlin_buffer: str  # LongBuffer
    swift: str  # Int64
    js_array: str  # BigInt64Array
    js_map: str  # what turns a JS number into an element of js_array
    kotlin_write: str = "writeInt"  # LiteRT's Kotlin TensorBuffer method

    def js(self, values: str) -> str:
        return f"{self.js_array}.from({values}{', ' + self.js_map if self.js_map else ''})"


DTYPES = {
    "int64": Dtype("LongArray", "LongBuffer", "Int64", "BigInt64Array", "BigInt", "writeLong"),
    "int32": Dtype("IntArray", "IntBuffer", "Int32", "Int32Array", ""),
}
# The app's own part of a JavaScript snippet that takes the text: a test puts a string literal in its place.
JS_TEXT = "/* the text, a string */"
_PAD = "the file's fixed length: ids padded with 0, mask 0 on the padding"  # tokens-fixed's {pad}
# What the Interpreter with default options makes of the shared layer (the docs' "Against the standard
# tools" has the measured figures; none is quoted here, where it would go stale).
_LOOP_NOTE = ("its layers are one WHILE body, so the Interpreter with default options packs each shared weight "
              "once")
_UNROLLED_NOTE = ("with default options the Interpreter packs the shared layer once per layer application "
                  "(about twice the peak RSS of the loop form, convert's default: convert --layers loop)")

# A MediaPipe classifier that stops early (convert --adaptive): its second head is the passes.
_PASSES_NOTE = ("; it stops early (convert --adaptive): its second head, classifications[1], has one category "
                "whose score is the passes it ran")

# Operators onnxruntime-web's WebGPU provider places on the GPU and then fails to run (the int8 .onnx's
# attention with its padding mask as key_padding_mask): a file with one runs on WebAssembly only.
WEBGPU_REFUSES = ("MultiHeadAttention",)
# onnxruntime-web's execution providers in the printed code: WebGPU first where the file runs there
# (onnxruntime-web goes on to WebAssembly where the browser has no WebGPU adapter), else WebAssembly.
_JS_DEVICES = {True: ('"webgpu", "wasm"', "on the GPU where the browser has WebGPU, else WebAssembly"),
               False: ('"wasm"', "WebAssembly: onnxruntime-web's WebGPU provider does not run this file's "
                                 + ", ".join(WEBGPU_REFUSES))}

# The option albert-edge's own onnxruntime session sets and an app's API exposes (runtime.onnx_engine).
_MEM_PATTERN = "one arena for every length, not a block planned per input shape: a lower peak"


@dataclass(frozen=True)
class FileFacts:
    """What the code needs to know about one file."""

    name: str
    format: str
    inputs: tuple[tuple[str, str], ...]  # (name, dtype), in the file's order
    outputs: tuple[tuple[str, tuple[int | str, ...]], ...]  # (name, shape)
    seq_len: int | None  # fixed sequence length, None when the axis is dynamic
    max_len: int | None  # the longest sequence a dynamic axis takes, where the file bounds it (.pte)
    task: str | None  # MediaPipe task ("TextClassifier" / "TextEmbedder") of a file with TFLite metadata
    labels: tuple[str, ...] = ()  # a MediaPipe classifier's labels, from its metadata
    loop: bool = False  # a .tflite whose layers are a WHILE body (convert --layers loop)
    webgpu: bool = True  # onnxruntime-web's WebGPU provider runs it (no operator of WEBGPU_REFUSES)
    app: AppFiles = AppFiles()  # the tokenizer and labels files beside it
    folder: Folder | None = None  # the transformers.js folder the manifest lists with it

    @property
    def classified(self) -> bool:
        """The first output scores the labels' classes, one row: ``(1, classes)``, the index
        of its highest score names the label."""
        return classified(self.app, self.outputs)

    @property
    def takes_text(self) -> bool:
        """An .onnx whose one input is the text (convert --to onnx-text): the tokenizer is inside."""
        return [name for name, _ in self.inputs] == ["text"]

    @property
    def n(self) -> str:
        """The sequence length in code: the token count, or the fixed length the app pads to."""
        return "n" if self.seq_len is None else str(self.seq_len)

    @property
    def stem(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def suffix(self) -> str:
        return self.name.split(".", 1)[1] if "." in self.name else ""


def facts_of(row: dict[str, Any]) -> FileFacts:
    """The facts of one report file row (its inspect analysis; the app files of its folder,
    :func:`app_files_of`, or the row's ``app`` where a caller gives them)."""
    inspected = row["inspect"]
    inputs = tuple((i["name"], i["dtype"]) for i in inspected["inputs"])
    outputs = tuple((o["name"], tuple(o["shape"])) for o in inspected["outputs"])
    shape = inspected["inputs"][0]["shape"] if inspected["inputs"] else ()
    seq = shape[1] if len(shape) > 1 else None
    metadata = inspected.get("metadata") or {}
    task = metadata.get("task") or {}
    fixed = isinstance(seq, int) and seq > 0
    bounded = fixed and "dynamic bound" in (metadata.get("input_dynamism") or ())[:1]  # a .pte: up to seq
    return FileFacts(name=row["name"], format=row["format"], inputs=inputs, outputs=outputs,
                     seq_len=seq if fixed and not bounded else None, max_len=seq if bounded else None,
                     task=task.get("task") if task.get("task") in ("TextClassifier", "TextEmbedder") else None,
                     labels=tuple(task.get("labels") or ()), loop="WHILE" in (inspected.get("ops") or {}),
                     webgpu=not set(WEBGPU_REFUSES) & set(inspected.get("ops") or {}),
                     app=row["app"] if isinstance(row.get("app"), AppFiles) else app_files_of(row),
                     folder=folder_of(row))


# -- code pieces per platform: small builders the templates call --------------------------------

def _dims(shape: tuple[int | str, ...], n: str) -> list[str]:
    """An output's dimensions in code: batch 1, the sequence axis n, fixed sizes as they are."""
    out = []
    for i, d in enumerate(shape):
        out.append("1" if i == 0 else str(d) if isinstance(d, int) and d > 0 else n)
    return out


def _kotlin_array(dims: list[str]) -> str:
    # FloatArray(16) / Array(1) { FloatArray(16) } / Array(1) { Array(n) { FloatArray(16) } }
    code = f"FloatArray({dims[-1]})"
    for d in reversed(dims[:-1]):
        code = f"Array({d}) {{ {code} }}"
    return code


def _dtype(f: FileFacts) -> Dtype:
    dtypes = {d for _, d in f.inputs}
    if len(dtypes) != 1 or next(iter(dtypes)) not in DTYPES:
        raise ValueError(f"{f.name}: inputs of dtypes {sorted(dtypes)}; the snippets know int64 and int32")
    return DTYPES[next(iter(dtypes))]


def _value(name: str) -> str:
    """Which token array feeds an input: the ids, ones (mask) or zeros (types)."""
    return {"input_ids": "ids", "attention_mask": "mask", "token_type_ids": "types"}.get(name, "ids")


def _fill(f: FileFacts, text: str) -> str:
    """``text`` (a template or a note) with the file's facts (and its MediaPipe task's calls) in
    place."""
    d = _dtype(f) if f.task is None and not f.takes_text else None
    fields = _fields(f)
    if d is not None:
        fields.update(_token_fields(f, d))
    return text.format(**fields).strip("\n")


def _fields(f: FileFacts) -> dict[str, str]:
    """What every template and note may name: the file, its inputs, outputs and length, the
    notes on how it runs, and its MediaPipe task's calls."""
    return {
        "file": f.name, "stem": f.stem, "suffix": f.suffix, "n": f.n, "task": f.task or "",
        "input_names": ", ".join(name for name, _ in f.inputs),
        "output_names": ", ".join(name for name, _ in f.outputs),
        "first_output": f.outputs[0][0] if f.outputs else "",
        "dtype": f.inputs[0][1] if f.inputs else "", "bound": _bound(f),
        "cut": f"; each text is cut or padded to {f.seq_len} tokens inside" if f.seq_len else "",
        "labels": f"; labels: {', '.join(f.labels)}" if f.labels else "",
        "passes": _PASSES_NOTE if f.task == "TextClassifier" and "passes" in dict(f.outputs) else "",
        "js_text": JS_TEXT, "packing": _LOOP_NOTE if f.loop else _UNROLLED_NOTE, "mem_pattern": _MEM_PATTERN,
        "js_devices": _JS_DEVICES[f.webgpu][0], "js_device_note": _JS_DEVICES[f.webgpu][1],
        **_TASKS.get(f.task or "", {}),
        **(folder_fields(f.folder, f.webgpu, JS_TEXT) if f.folder else {}),
    }


def _bound(f: FileFacts) -> str:
    return f"; at most {f.max_len}, the file's bound" if f.max_len else ""


# The field of each platform's token arrays (the templates tokens-fixed and tokens-dynamic, filled).
_LENGTH_FIELDS = {"kotlin": "length", "swift": "swift_length", "js": "js_length"}


def _token_fields(f: FileFacts, d: Dtype) -> dict[str, str]:
    """The code that makes the token ids, mask and types of a file whose inputs are ``d``: padded
    to its fixed length or as long as the tokens, and fed to each of its inputs."""
    types = {"kt_array": d.kotlin_array, "kt_buffer": d.kotlin_buffer, "swift_type": d.swift, "js_array": d.js_array}
    arrays = "tokens-fixed" if f.seq_len is not None else "tokens-dynamic"
    facts = {**types, "n": f.n, "bound": _bound(f), "pad": _PAD}
    lengths = {field: template(p, arrays).format(**facts) for p, field in _LENGTH_FIELDS.items()}
    return {**types, **lengths, **_input_lines(f, d)}


def _input_lines(f: FileFacts, d: Dtype) -> dict[str, str]:
    """Each platform's lines that hand the token arrays to the file's inputs, one per input."""
    dtype, n = f.inputs[0][1], f.n
    return {
        "kt_litert_inputs": "\n".join(f'    "{name}" to arrayOf({_value(name)}),' for name, _ in f.inputs),
        "kt_litert_outputs": "\n".join(f'    "{name}" to {_kotlin_array(_dims(shape, n))},'
                                      for name, shape in f.outputs),
        "kt_ort_inputs": "\n".join(f'    "{name}" to OnnxTensor.createTensor(env, {d.kotlin_buffer}.wrap('
                                   f'{_value(name)}), longArrayOf(1, n.toLong())),' for name, _ in f.inputs),
        "kt_gpu_writes": "\n".join(f"inputs[{i}].{d.kotlin_write}({_value(name)})  // {name}"
                                    for i, (name, _) in enumerate(f.inputs)),
        "kt_pte_inputs": ", ".join(f"EValue.from(Tensor.fromBlob({_value(name)}, longArrayOf(1, n.toLong())))"
                                   for name, _ in f.inputs),
        "swift_litert_inputs": "\n".join(
            f'    "{name}": {_value(name)}.withUnsafeBufferPointer {{ Data(buffer: $0) }},' for name, _ in f.inputs),
        "swift_litert_resize": "\n".join(f'try runner.resizeInput(named: "{name}", toShape: Tensor.Shape([1, n]))'
                                          for name, _ in f.inputs),
        "swift_ort_inputs": "\n".join(
            f'    "{name}": try ORTValue(tensorData: NSMutableData(data: {_value(name)}.withUnsafeBufferPointer '
            f'{{ Data(buffer: $0) }}), elementType: .{dtype}, shape: [1, NSNumber(value: n)]),'
            for name, _ in f.inputs),
        "swift_pte_inputs": ", ".join(f"Tensor<{d.swift}>({_value(name)}, shape: [1, n])" for name, _ in f.inputs),
        "js_ort_inputs": "\n".join(f'  {name}: new ort.Tensor("{dtype}", {d.js(_value(name))}, [1, n]),'
                                   for name, _ in f.inputs),
    }


# -- the table ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Framework:
    """One framework an app loads files with: its name, what each platform adds to the build, the
    code's template per platform (None: it has no runtime there, ``missing`` says why) and a note."""

    key: str
    name: str
    packages: dict[str, str]
    code: dict[str, str | None]
    note: str
    missing: str = ""
    tokenize: bool = True  # the app feeds token ids (False: the framework takes the string)


_LITERT = Framework(
    key="litert", name="LiteRT (TensorFlow Lite) Interpreter",
    packages={"kotlin": "com.google.ai.edge.litert:litert:1.4.1 (its Interpreter API; "
                        "or org.tensorflow:tensorflow-lite:2.16.1)",
              "swift": "CocoaPods: pod 'TensorFlowLiteSwift', '~> 2.17.0' (Interpreter.signatureRunner)",
              "js": ""},
    code=templates("litert", "kotlin", "swift"),
    note=TOKEN_IDS_NOTE + "; {packing}",
    missing="No browser runtime albert-edge's tests run takes this file as printed code would: TF.js's TFLite "
            "runtime (@tensorflow/tfjs-tflite 0.0.1-alpha.10, an alpha) takes only the shape a file was converted "
            "at and, fed that, answered all-zero scores for a classifier here; LiteRT.js (@litertjs/core 2.5.3) "
            "refuses a [1, n] tensor for a [-1, -1] input. A web app runs the .onnx or .ort (onnxruntime-web) or "
            "the MediaPipe file (MediaPipe Tasks for Web) instead",
)

_MEDIAPIPE = Framework(
    key="mediapipe", name="MediaPipe Tasks ({task})",
    packages={"kotlin": "com.google.mediapipe:tasks-text:0.10.21",
              "swift": "CocoaPods: pod 'MediaPipeTasksText', '~> 0.10.21'",
              "js": "npm: @mediapipe/tasks-text 1.0.1"},
    code=templates("mediapipe", "kotlin", "swift", "js"),
    note="the file takes a string: its sentencepiece tokenizer is inside (TFLite metadata){cut}{labels}{passes}",
    tokenize=False,
)

# What differs between the two MediaPipe text tasks.
_TASKS = {
    "TextClassifier": {"task_package": "textclassifier", "kt_call": "classify", "swift_call": "classify",
                       "js_call": "classify",
                       "kt_read": "val best = result.classificationResult().classifications()[0].categories()[0]"
                                  "  // categoryName(), score()",
                       "swift_read": "let best = result.classificationResult.classifications.first?.categories.first"
                                     "  // categoryName, score",
                       "js_read": "const best = result.classifications[0].categories[0];  // categoryName, score"},
    "TextEmbedder": {"task_package": "textembedder", "kt_call": "embed", "swift_call": "embed",
                     "js_call": "embed",
                     "kt_read": "val embedding = result.embeddingResult().embeddings()[0].floatEmbedding()",
                     "swift_read": "let embedding = result.embeddingResult.embeddings.first?.floatEmbedding",
                     "js_read": "const embedding = result.embeddings[0].floatEmbedding;"},
}

_ONNXRUNTIME = Framework(
    key="onnxruntime", name="ONNX Runtime (Mobile / Web)",
    packages={"kotlin": "com.microsoft.onnxruntime:onnxruntime-android:1.20.0",
              "swift": "CocoaPods: pod 'onnxruntime-objc', '~> 1.20.0' (or onnxruntime-c)",
              "js": "npm: onnxruntime-web 1.30.0"},
    code=templates("onnxruntime", "kotlin", "swift", "js", run="onnxruntime-run"),
    note=TOKEN_IDS_NOTE,
)

_ONNXRUNTIME_TEXT = Framework(
    key="onnxruntime-text", name="ONNX Runtime + onnxruntime-extensions",
    packages={"kotlin": "com.microsoft.onnxruntime:onnxruntime-android:1.20.0 + "
                        "com.microsoft.onnxruntime:onnxruntime-extensions-android:0.13.0",
              "swift": "Swift Package: github.com/microsoft/onnxruntime-swift-package-manager 1.20.0, products "
                       "onnxruntime and onnxruntime_extensions", "js": ""},
    code=templates("onnxruntime-text", "kotlin", "swift"),
    note="the file takes the text (one string, shape 1): its tokenizer is an onnxruntime-extensions node, "
         "whose library the app registers; outputs: {output_names}",
    missing="onnxruntime-web's npm package has no onnxruntime-extensions operators (a custom web build can hold "
            "them): a web app feeds token ids to the .onnx converted beside this file",
    tokenize=False,
)

_EXECUTORCH = Framework(
    key="executorch", name="ExecuTorch",
    packages={"kotlin": "org.pytorch:executorch-android:1.0.0",
              "swift": "Swift Package: github.com/pytorch/executorch (branch swiftpm-1.0.0), products "
                       "executorch + backend_xnnpack", "js": ""},
    code=templates("executorch", "kotlin", "swift"),
    note="the file takes token ids ({dtype}, shape 1 x {n}{bound}) by position: {input_names}; outputs: {output_names}",
    missing="ExecuTorch has no web runtime: a web app runs the .onnx/.ort (onnxruntime-web) or .tflite file instead",
)

# A file's transformers.js folder (convert --to transformers-js), beside the file's own framework:
# the app gives transformers.js the folder, which holds its tokenizer and labels.
_TRANSFORMERS_JS = Framework(
    key="transformers-js", name="transformers.js",
    packages={"kotlin": "", "swift": "", "js": TRANSFORMERS_JS_PACKAGE},
    code=templates("transformers-js", "js"),
    note="the app gives transformers.js the folder {folder}/, whole: its tokenizer (tokenizer.json) and "
         "config.json (the model class, the labels) are in it; its pipeline {task}; its files by dtype: {dtypes}",
    missing="transformers.js is a JavaScript library: an Android or iOS app runs the folder's .onnx files "
            "with ONNX Runtime",
    tokenize=False,
)

FRAMEWORKS = {f.key: f for f in (_LITERT, _MEDIAPIPE, _ONNXRUNTIME, _ONNXRUNTIME_TEXT, _EXECUTORCH,
                                 _TRANSFORMERS_JS)}
# Which framework loads a file, by its format; a .tflite with a MediaPipe task goes to MediaPipe.
_BY_FORMAT = {"tflite": "litert", "onnx": "onnxruntime", "ort": "onnxruntime", "executorch": "executorch"}


def framework_of(f: FileFacts) -> Framework | None:
    if f.task is not None:
        return FRAMEWORKS["mediapipe"]
    if f.takes_text:
        return FRAMEWORKS["onnxruntime-text"]
    key = _BY_FORMAT.get(f.format)
    return FRAMEWORKS[key] if key else None


def _code(framework: Framework, f: FileFacts, platform: str) -> str | None:
    code = framework.code[platform]
    if code is None:
        return None
    return with_app_files(_fill(f, code), platform, framework.key, framework.tokenize, f.app, f.outputs)


def snippets(files: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per framework the files need, in the order the files come: its name, packages,
    and per file the framework's note and the code per platform (None where it has no runtime)."""
    groups: dict[str, dict[str, Any]] = {}
    for row in files:
        f = facts_of(row)
        framework = framework_of(f)
        if framework is None:
            continue
        name = framework.name.format(task=f.task or "")
        group = groups.setdefault(name, new_group(framework, name))
        label = row.get("label", f.name)
        group["files"].append(file_snippet(framework, f, label))
        if f.folder is not None:  # the app gives transformers.js the folder: no app file of ours beside it
            group = groups.setdefault(_TRANSFORMERS_JS.name, new_group(_TRANSFORMERS_JS, _TRANSFORMERS_JS.name))
            folder_label = f"{label.rpartition('/')[0]}/{f.folder.name}/".lstrip("/")
            group["files"].append(file_snippet(_TRANSFORMERS_JS, replace(f, app=AppFiles()), folder_label))
    return list(groups.values())


def new_group(framework: Framework, name: str) -> dict[str, Any]:
    """A framework's entry in the report's snippets, without its files."""
    return {"framework": name, "key": framework.key, "packages": dict(framework.packages),
            "missing": {p: framework.missing for p in PLATFORMS if framework.code[p] is None},
            "tokenize": TOKENIZE_NOTE if framework.tokenize else None, "files": []}


def file_snippet(framework: Framework, f: FileFacts, label: str) -> dict[str, Any]:
    """One file's note and code per platform in ``framework``; ``label`` names it in the report
    (with its folder where files of two folders share a name)."""
    tokenizer = f.app.tokenizer if framework.tokenize else None
    labels = f.app.labels if framework.key != "mediapipe" else None  # MediaPipe's are in the file
    beside = [*([f"{tokenizer} (the tokenizer)"] if tokenizer else []),
              *([f"{labels} ({f.app.classes} labels, label i naming class i)"] if labels else [])]
    return {"name": f.name, "label": label, "task": f.task,
            "inputs": [{"name": n, "dtype": d} for n, d in f.inputs], "outputs": [n for n, _ in f.outputs],
            "seq_len": f.seq_len, "app_files": {"tokenizer": tokenizer, "labels": labels},
            "note": _fill(f, framework.note) + (f"; beside it: {', '.join(beside)}" if beside else ""),
            "code": {p: _code(framework, f, p) for p in PLATFORMS}}


def blocks(group: dict[str, Any], platform: str) -> list[tuple[str, list[str]]]:
    """The distinct code blocks of one framework on one platform, each with the files it runs:
    files whose lines differ only in their name share one block (shown with the first name), so a
    report of many files is not a wall of code."""
    shown: dict[str, tuple[str, list[str]]] = {}
    for f in group["files"]:
        code = f["code"][platform]
        if code is None:
            continue
        stem, _, suffix = f["name"].partition(".")
        key = code.replace(f["name"], "\0").replace(f'"{stem}", ofType: "{suffix}"', "\0")
        shown.setdefault(key, (code, []))[1].append(f.get("label", f["name"]))
    return list(shown.values())
