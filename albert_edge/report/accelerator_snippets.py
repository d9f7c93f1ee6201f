"""The lines an app needs to hand a file to an accelerator: LiteRT's GPU accelerator (Kotlin),
ONNX Runtime's NNAPI execution provider (Kotlin) and its Core ML provider in the MLProgram form
(Swift), each for the file the report's Accelerators table says to take for it. Written against
the APIs named in each framework's packages line; like the other snippets, not compiled on a
phone. Like them, each loads the tokenizer and a classifier's labels by their names in the file's
folder and names the class the file scores highest (:func:`.snippets.file_snippet`). Device side:
standard library only."""

from __future__ import annotations

from typing import Any

from .code_templates import templates
from .snippets import TOKEN_IDS_NOTE, Framework, facts_of, file_snippet, new_group

__all__ = ["ACCELERATED", "accelerator_snippets"]

_LITERT_GPU = Framework(
    key="litert-gpu", name="LiteRT on the GPU (CompiledModel, Accelerator.GPU)",
    packages={"kotlin": "com.google.ai.edge.litert:litert:{litert} (its GPU accelerator is in the package); "
                        "written against LiteRT {litert}'s CompiledModel Kotlin API"},
    code=templates("litert-gpu", "kotlin"),
    note=TOKEN_IDS_NOTE,
    missing="LiteRT's GPU path on iOS (the Metal delegate) and in a browser (LiteRT.js on WebGPU) is another API, "
            "not checked here: run the file there on the CPU (the LiteRT lines above)",
)

_ORT_NNAPI = Framework(
    key="onnxruntime-nnapi", name="ONNX Runtime Mobile with NNAPI",
    packages={"kotlin": "com.microsoft.onnxruntime:onnxruntime-android:1.20.0; written against its 1.20 Java API "
                        "(SessionOptions.addNnapi, ai.onnxruntime.providers.NNAPIFlags); Android 15 deprecates "
                        "NNAPI, which still runs there"},
    code=templates("onnxruntime-nnapi", "kotlin", run="onnxruntime-run"),
    note=TOKEN_IDS_NOTE,
    missing="NNAPI is Android's: on iOS the Core ML provider takes an .onnx (its lines below, where the report "
            "names a file for it); a browser has neither",
)

_ORT_COREML = Framework(
    key="onnxruntime-coreml", name="ONNX Runtime Mobile with Core ML (MLProgram)",
    packages={"swift": "CocoaPods: pod 'onnxruntime-objc', '~> 1.20.0'; written against its 1.20 API "
                       "(ORTCoreMLExecutionProviderOptions.createMLProgram)"},
    code=templates("onnxruntime-coreml", "swift", run="onnxruntime-run"),
    note=TOKEN_IDS_NOTE,
    missing="Core ML is Apple's: on Android the NNAPI provider takes an .onnx (its lines above); a browser has neither",
)

# The accelerator (a key of report.accelerators.ACCELERATORS) each framework hands its file to.
ACCELERATED = {"gpu": _LITERT_GPU, "nnapi": _ORT_NNAPI, "coreml": _ORT_COREML}


def accelerator_snippets(files: list[dict[str, Any]], accelerators: dict[str, Any] | None) -> list[dict[str, Any]]:
    """One snippet group per accelerator the report names a static file for (the file it says to
    take), in the report's snippet format."""
    if not accelerators:
        return []
    by_label = {f["label"]: f for f in files}
    groups = []
    for key, framework in ACCELERATED.items():
        take = accelerators["take"][key]
        row = by_label.get(take["file"]) if take["status"] in ("whole", "part") else None
        if row is None or row["static_len"] is None:  # a dynamic file's share is too small to hand over
            continue
        group = new_group(framework, framework.name)
        litert = _litert_version(row)
        group["packages"] = {p: text.replace("{litert}", litert) for p, text in group["packages"].items()}
        group["files"].append(file_snippet(framework, facts_of(row), row["label"]))
        groups.append(group)
    return groups


def _litert_version(row: dict[str, Any]) -> str:
    """The LiteRT version whose GPU accelerator placed the file ("2.3.0"), from its record."""
    runtime = ((row.get("gpu") or {}).get("placement") or {}).get("runtime") or ""
    return runtime.rsplit(" ", 1)[-1] if runtime.startswith("ai-edge-litert ") else "2.x"
