"""The app snippets' lines for the files beside a model file (:mod:`.snippets`): which of them its
folder holds (the manifest's ``app_files``, each checked against its entry, the labels by
:func:`albert_edge.labels.check_labels`), and the code that loads them by those names, the
tokenizer where the app makes the token ids, the labels where the file's first output is the
classes' scores, with the label of the best one. Device side: standard library only."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .code_templates import template

__all__ = ["AppFiles", "app_files_of", "with_app_files"]


@dataclass(frozen=True)
class AppFiles:
    """The files an app reads beside a model file, as its folder names them (none: not there)."""

    tokenizer: str | None = None  # spiece.model
    labels: str | None = None  # labels.json
    classes: int = 0  # how many labels it holds


def app_files_of(row: dict[str, Any]) -> AppFiles:
    """The app files the manifest beside the row's file lists, each checked against its entry
    (size, then sha256: FileChanged when it was edited) and labels.json by
    :func:`albert_edge.labels.check_labels`, one per class of the file's first output. None for
    a file no manifest lists or a manifest written before it listed them."""
    from ..formats import manifest as manifest_io
    from ..labels import check_labels

    path = Path(row["path"]) if row.get("path") else None
    if path is None or not (path.parent / manifest_io.MANIFEST_NAME).is_file():
        return AppFiles()
    manifest_path = path.parent / manifest_io.MANIFEST_NAME
    manifest = manifest_io.read(manifest_path)
    if path.name not in {e.name for e in manifest.files}:
        return AppFiles()
    tokenizer, labels = manifest.app_file("tokenizer"), manifest.app_file("labels")
    for app in (tokenizer, labels):
        if app is not None:
            manifest_io.check_file(path.parent / app.name, app, manifest_path)
    if labels is None:
        return AppFiles(tokenizer.name if tokenizer else None)
    try:
        names = json.loads((path.parent / labels.name).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise manifest_io.FileChanged(f"{path.parent / labels.name} is not a JSON list of labels ({exc}): "
                                      "convert again") from None
    outputs = row["inspect"]["outputs"]
    classes = outputs[0]["shape"][-1] if outputs and outputs[0]["shape"] else None
    names = check_labels(names if isinstance(names, list) else [names],
                         classes if isinstance(classes, int) and classes > 0 else None,
                         where=str(path.parent / labels.name), fix="convert again")
    return AppFiles(tokenizer.name if tokenizer else None, labels.name, len(names))


# -- the files beside the model: loaded by their names, the labels indexed by the best score ------

# The comment above the tokenizer's load (the templates load-tokenizer's {note}); the loads and the
# label of the best score are the templates load-tokenizer, load-labels and best-label of each platform.
_SPIECE_NOTE = ("the tokenizer, ALBERT's sentencepiece model: the app's sentencepiece library makes the token ids "
                "with it")

# Where each framework's code has its first output, and that output's (1, classes) scores as a
# flat float array: (the start of the line that has it, the expression).
_KT_ORT = ("val {o} = result.get(", "({o} as Array<FloatArray>)[0]")
_SWIFT_ORT = ("let data = try outputs[", "(data as Data).withUnsafeBytes {{ Array($0.bindMemory(to: Float.self)) }}")
_SCORES = {
    ("litert", "kotlin"): ("interpreter.runSignature(", '(outputs["{o}"] as Array<FloatArray>)[0]'),
    ("litert", "swift"): ("let {o} = try runner.output(", "{o}.data.withUnsafeBytes {{ Array($0.bindMemory(to: "
                                                            "Float.self)) }}"),
    ("onnxruntime", "kotlin"): _KT_ORT, ("onnxruntime-text", "kotlin"): _KT_ORT,
    ("onnxruntime-nnapi", "kotlin"): _KT_ORT,
    ("onnxruntime", "swift"): _SWIFT_ORT, ("onnxruntime-text", "swift"): _SWIFT_ORT,
    ("onnxruntime-coreml", "swift"): _SWIFT_ORT,
    ("onnxruntime", "js"): ("const {o} = outputs.{o}.data", "{o}"),
    ("executorch", "kotlin"): ("val {o} = outputs[0]", "{o}"),
    ("executorch", "swift"): ("let {o}: Tensor<Float>", "{o}.scalars()"),
    ("litert-gpu", "kotlin"): ("val {o} = outputs[0].readFloat()", "{o}"),
}


def with_app_files(code: str, platform: str, framework: str, tokenize: bool, app: AppFiles,
                   outputs: tuple[tuple[str, tuple[int | str, ...]], ...]) -> str:
    """``code`` of ``framework`` (a key of the snippets' FRAMEWORKS) for a file of ``outputs``,
    loading by their names in the folder, after its imports, the tokenizer (where the app makes
    the token ids: ``tokenize``) and the labels (where the outputs are not MediaPipe's named
    categories); where the first output is the classes' scores, the label of the best one."""
    lines = code.split("\n")
    loads = []
    if tokenize and app.tokenizer:
        loads.append(_named(template(platform, "load-tokenizer"), app.tokenizer))
    if framework != "mediapipe" and app.labels:
        loads.append(_named(template(platform, "load-labels"), app.labels))
    if not loads:
        return code
    key = (framework, platform)
    scores = _SCORES.get(key) if classified(app, outputs) else None
    if scores is not None:
        start, expression = (part.format(o=outputs[0][0]) for part in scores)
        at = next((i for i, line in enumerate(lines) if line.strip().startswith(start)), None)
        if at is not None:
            indent = lines[at][:len(lines[at]) - len(lines[at].lstrip())]
            best = template(platform, "best-label").format(scores=expression)
            lines[at + 1:at + 1] = [indent + line for line in best.split("\n")]
    imports = [i for i, line in enumerate(lines) if line.startswith("import ")]
    at = imports[-1] + 1 if imports else 0
    lines[at:at] = (["", *loads] if imports else [*loads, ""])
    return "\n".join(lines)


def classified(app: AppFiles, outputs: tuple[tuple[str, tuple[int | str, ...]], ...]) -> bool:
    """The first of ``outputs`` (name, shape) scores the labels' classes, one row:
    ``(1, classes)``; the index of its highest score names the label."""
    shape = outputs[0][1] if outputs else ()
    return bool(app.labels) and len(shape) == 2 and shape[-1] == app.classes


def _named(text: str, name: str) -> str:
    stem, _, ext = name.rpartition(".")
    return text.format(name=name, stem=stem or name, ext=ext if stem else "", note=_SPIECE_NOTE)
