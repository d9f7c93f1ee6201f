"""Which accelerator takes each file of a report, and how much of it; and, from those figures,
which file to take for each accelerator.

- **GPU (LiteRT)**: a static .tflite's run on LiteRT's GPU accelerator, as its manifest entry
  records it (``convert --static``: operators on the GPU and on the CPU with the accelerator's
  reason, the largest difference from PyTorch) or, where it records none, as a profile record of
  the file does (``profile --accelerator gpu``). A dynamic-shape .tflite is refused whole.
- **NNAPI** and **Core ML (MLProgram)**: an .onnx file's partitions by onnxruntime's own mobile
  checker (:mod:`albert_edge.formats.mobile_partitions`), run here when onnxruntime is installed.
- **CPU**: every file, every operator (XNNPACK for LiteRT and ExecuTorch, MLAS for onnxruntime).

Nothing is measured a second way: the GPU figures are the manifest's, the partitions the
checker's, the CPU latency the profile records'. Device side.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..formats.kinds import by_name

__all__ = ["Accelerator", "ACCELERATORS", "accelerator_data", "SOFTWARE_GPU_NOTE"]


@dataclass(frozen=True)
class Accelerator:
    """One accelerator a phone app can hand a file to: the formats it reads and what runs it."""

    key: str
    name: str
    formats: tuple[str, ...]
    runs_it: str
    provider: str | None = None  # the provider's name in onnxruntime's mobile checker
    spoken: str = ""  # its name in a sentence ("the GPU (LiteRT)"); default: name
    prefers: str | None = None  # of files it takes alike, the one whose scheme starts so

    @property
    def in_sentence(self) -> str:
        return self.spoken or self.name


ACCELERATORS = (
    Accelerator("gpu", "GPU (LiteRT)", ("tflite",), "LiteRT's GPU accelerator (CompiledModel, Accelerator.GPU)",
                spoken="the GPU (LiteRT)"),
    # an NPU behind NNAPI computes in integers: of files it takes alike, the int8 one
    Accelerator("nnapi", "NNAPI", ("onnx",), "ONNX Runtime Mobile's NNAPI execution provider (Android)", "NNAPI",
                prefers="int8"),
    Accelerator("coreml", "Core ML (MLProgram)", ("onnx",),
                "ONNX Runtime Mobile's Core ML execution provider in its MLProgram form (iOS)", "CoreML MLProgram"),
    Accelerator("cpu", "CPU", ("tflite", "onnx", "ort", "executorch"),
                "XNNPACK (LiteRT, ExecuTorch), MLAS (onnxruntime)", spoken="the CPU"),
)
_BY_KEY = {a.key: a for a in ACCELERATORS}

SOFTWARE_GPU_NOTE = ("{device} is a software Vulkan device (Mesa's lavapipe, on the CPU): the placement and the "
                     "outputs are the accelerator's own, a timing on it means nothing")

# The checker's reasons (formats.mobile_partitions), shortened for a table cell.
_DYNAMIC = "an input of dynamic shape"
_SHORT_REASON = {"operator not in the provider's list": "not in its list"}


def accelerator_data(files: list[dict[str, Any]], profile: list[dict[str, Any]] = ()) -> dict[str, Any] | None:
    """Per file, what each accelerator takes of it; which file to take for each; the one
    sentence saying so; notes. None for a report with no model files."""
    if not files:
        return None
    partitions, checker, unchecked = _partitions(files)
    profiled = {r["sha256"]: r["placement"] for r in profile
                if r.get("accelerator") == "gpu" and isinstance(r.get("placement"), dict) and r.get("sha256")}
    rows = []
    for f in files:
        rows.append({
            "label": f["label"], "name": f["name"], "folder": f["folder"], "format": f["format"],
            "scheme": f["scheme"], "bytes": f["bytes"], "sha256": f["sha256"], "static_len": f["static_len"],
            "gpu": _gpu_cell(f, profiled.get(f["sha256"])),
            "nnapi": _partition_cell(f, partitions, unchecked, "NNAPI"),
            "coreml": _partition_cell(f, partitions, unchecked, "CoreML MLProgram"),
            "cpu": _cpu_cell(f),
        })
    take = {a.key: _take(a, rows, profile) for a in ACCELERATORS}
    return {"accelerators": [{"key": a.key, "name": a.name, "runs_it": a.runs_it} for a in ACCELERATORS],
            "rows": rows, "take": take, "sentence": _sentence(take), "checker": checker,
            "notes": _notes(rows, checker, unchecked)}


# -- cells ----------------------------------------------------------------------------------------

def _cell(status: str, text: str, share: float | None = None, **figures: Any) -> dict[str, Any]:
    """status: "whole" (every operator), "part", "none" (the accelerator takes nothing of it),
    "unchecked" (no figure), "n/a" (it reads another format)."""
    return {"status": status, "text": text, "share": share, **figures}


def _gpu_cell(f: dict[str, Any], profiled: dict[str, Any] | None) -> dict[str, Any]:
    """From the manifest's GPU run of the file or, where it has none, a profile record's placement."""
    if not by_name(f["format"]).gpu_placement:  # the manifest's GPU run is LiteRT's, of a .tflite
        return _cell("n/a", "-")
    if f["static_len"] is None:
        return _cell("none", "CPU only: dynamic shapes; convert --static for the GPU", 0.0)
    record = f["gpu"]
    if (record is None or not record.get("ran")) and profiled is not None:
        record = {"ran": True, "placement": profiled, "source": "profile --accelerator gpu"}
    if record is None:
        return _cell("unchecked", "not checked: no GPU run in its manifest entry or a profile record "
                                  "(profile --accelerator gpu)")
    if not record.get("ran"):
        return _cell("unchecked", f"not checked: {record.get('reason') or 'the GPU check did not run'}")
    placement = record["placement"]
    device = (placement.get("adapter") or "").split(", arch=")[0] or None
    software = "software" in (placement.get("adapter") or "").lower() or "llvmpipe" in (device or "")
    if placement["refused"]:
        return _cell("none", f"refused: {placement.get('reason')}", 0.0, device=device, software=software)
    ops, on_gpu = placement["ops"], placement["gpu_ops"]
    text = f"all {ops} ops" if placement["cpu_ops"] == 0 else f"{on_gpu} of {ops} ops"
    if placement.get("fallbacks"):
        text += "; on the CPU: " + "; ".join(f"{fb['op']} ({fb['reason']})" for fb in placement["fallbacks"])
    diffs = record.get("max_abs_diff") or {}
    if diffs:
        text += f"; within {max(diffs.values()):.1g} of {record.get('against', 'PyTorch')} in float32"
    if record.get("source"):
        text += f" ({record['source']})"
    status = "whole" if placement["cpu_ops"] == 0 else "part" if on_gpu else "none"
    return _cell(status, text, on_gpu / ops if ops else 0.0, ops=ops, gpu_ops=on_gpu, device=device, software=software,
                 ok=record.get("ok"))


def _partitions(files: list[dict[str, Any]]) -> tuple[dict[str, dict], str | None, str | None]:
    """onnxruntime's mobile checker on each .onnx: {path: report dict}, the checker's name, and why
    nothing was checked (onnxruntime missing) or None."""
    from ..errors import RuntimeUnavailable
    from ..formats.mobile_partitions import mobile_partitions

    found: dict[str, dict] = {}
    checker = None
    for f in files:
        if not by_name(f["format"]).partitions_checked:
            continue
        try:
            report = mobile_partitions(f["path"]).to_dict()
        except RuntimeUnavailable as exc:
            if "needs onnxruntime" in str(exc):
                return {}, None, str(exc)
            found[f["path"]] = {"error": str(exc)}
            continue
        checker = report["checker"]
        found[f["path"]] = report
    return found, checker, None


def _partition_cell(f: dict[str, Any], partitions: dict[str, dict], unchecked: str | None,
                    provider: str) -> dict[str, Any]:
    kind = by_name(f["format"])
    if not kind.nnapi_coreml:
        return _cell("n/a", "-")
    if not kind.partitions_checked:
        return _cell("unchecked", "not checked: onnxruntime's checker reads the .onnx an .ort is made from")
    if unchecked is not None:
        return _cell("unchecked", "not checked: onnxruntime is not installed here")
    report = partitions.get(f["path"])
    if report is None or "error" in report:
        return _cell("unchecked", f"not checked: {report['error'] if report else 'no checker result'}")
    p = next(p for p in report["providers"] if p["provider"] == provider)
    count, covered, nodes = p["partitions"], p["covered"], p["nodes"]
    text = (f"{count} partition{'s' if count != 1 else ''}, every node ({nodes})" if covered == nodes
            else f"{count} partition{'s' if count != 1 else ''}, {covered} of {nodes} nodes" if covered
            else f"none of {nodes} nodes")
    shaped = sum(u["nodes"] for u in p["unsupported"] if u["reason"] == _DYNAMIC)
    if shaped:
        text += f"; dynamic shapes hold back {shaped} (convert --static)"
    left = [f"{u['op'].split(':')[-1]} x{u['nodes']} ({_SHORT_REASON.get(u['reason'], u['reason'])})"
            for u in p["unsupported"] if u["reason"] != _DYNAMIC]
    if left:
        text += "; on the CPU: " + ", ".join(left[:2]) + (f" and {len(left) - 2} more" if len(left) > 2 else "")
    status = "whole" if count == 1 and covered == nodes else "part" if covered else "none"
    return _cell(status, text, covered / nodes if nodes else 0.0, partitions=count, covered=covered, nodes=nodes,
                 unsupported=p["unsupported"], dynamic_inputs=report["dynamic_inputs"])


def _cpu_cell(f: dict[str, Any]) -> dict[str, Any]:
    kernels = by_name(f["format"]).cpu_kernels
    length = f"padded to {f['static_len']} tokens" if f["static_len"] else "any length"
    return _cell("whole", f"every op ({kernels}); {length}", 1.0)


# -- which file for which accelerator ---------------------------------------------------------------

def _take(accelerator: Accelerator, rows: list[dict[str, Any]], profile) -> dict[str, Any]:
    """The file to take for ``accelerator``: the largest share of the file on it, then the fewest
    partitions, then the scheme it prefers, then the fewest bytes; for the CPU the fastest
    measured file, or without a profile the smallest that takes any length."""
    if accelerator.key == "cpu":
        return _take_cpu(rows, profile)
    key = accelerator.key
    taken = [r for r in rows if r[key]["share"]]
    if taken:
        prefers = accelerator.prefers
        best = max(taken, key=lambda r: (r[key]["share"], -r[key].get("partitions", 1),
                                         bool(prefers and (r["scheme"] or "").startswith(prefers)), -r["bytes"]))
        why = _why(best[key], key)
        if best["static_len"] is None:
            why += "; a static file takes more: convert --static"
        return {"file": best["label"], "why": why, "status": best[key]["status"]}
    unchecked = [r for r in rows if r[key]["status"] == "unchecked"]
    if unchecked:
        best = min(unchecked, key=lambda r: r["bytes"])
        return {"file": best["label"], "why": best[key]["text"], "status": "unchecked"}
    formats = "/".join(f".{f}" for f in accelerator.formats)
    return {"file": None, "why": f"no file here: it takes a static {formats} (convert --static, or pipeline --static)",
            "status": "none"}


def _why(cell: dict[str, Any], key: str) -> str:
    if key == "gpu":
        return f"all {cell['ops']} ops on the GPU" if cell["status"] == "whole" else \
            f"{cell['gpu_ops']} of {cell['ops']} ops on the GPU"
    count = cell["partitions"]
    nodes = "every node" if cell["covered"] == cell["nodes"] else f"{cell['covered']} of {cell['nodes']} nodes"
    return f"{count} partition{'s' if count != 1 else ''}, {nodes}"


def _take_cpu(rows: list[dict[str, Any]], profile) -> dict[str, Any]:
    labels = {r["sha256"]: r["label"] for r in rows}
    measured = [p for p in profile if not p.get("estimated") and p.get("sha256") in labels
                and (p.get("accelerator") or "cpu") == "cpu"
                and (p.get("latency") or {}).get("p50") is not None and p.get("seq_len")]
    if measured:
        longest = max(p["seq_len"] for p in measured)
        best = min((p for p in measured if p["seq_len"] == longest), key=lambda p: p["latency"]["p50"])
        return {"file": labels[best["sha256"]], "status": "whole",
                "why": f"the fastest measured at {longest} tokens, p50 {best['latency']['p50']:.3g} ms"}
    dynamic = [r for r in rows if r["static_len"] is None]
    best = min(dynamic or rows, key=lambda r: r["bytes"])
    return {"file": best["label"], "status": "whole",
            "why": "the smallest file that takes any length; no profile to compare speed" if dynamic
            else "the smallest file"}


def _sentence(take: dict[str, dict[str, Any]]) -> str:
    """"For the GPU (LiteRT) take X (why); for NNAPI, Y (why); ..." in the order of ACCELERATORS."""
    parts = []
    for i, accelerator in enumerate(ACCELERATORS):
        t = take[accelerator.key]
        what = f"{t['file']} ({t['why']})" if t["file"] else t["why"]
        parts.append(f"{'For' if i == 0 else 'for'} {accelerator.in_sentence}{' take' if i == 0 else ','} {what}")
    return "; ".join(parts) + "."


def _notes(rows: list[dict[str, Any]], checker: str | None, unchecked: str | None) -> list[str]:
    notes = []
    devices = sorted({r["gpu"]["device"] for r in rows if r["gpu"].get("software")})
    if devices:
        notes.append("GPU: " + SOFTWARE_GPU_NOTE.format(device=", ".join(devices)))
    if any(r["gpu"]["status"] in ("whole", "part", "none") and r["static_len"] for r in rows):
        notes.append("GPU: placement by LiteRT's GPU accelerator itself, run when the file was converted (its "
                     "manifest entry) or profiled on the GPU; TensorFlow's GPU-compatibility Analyzer is no guide: it "
                     "passes files the accelerator refuses")
    if checker:
        notes.append(f"NNAPI, Core ML: partitions by {checker} (after its basic optimization); each partition "
                     "boundary is a copy between the CPU and the accelerator, and the nodes left out run on the CPU")
    if unchecked:
        notes.append(f"NNAPI, Core ML: not checked: {unchecked}")
    if any(by_name(r["format"]).nnapi_coreml and not by_name(r["format"]).partitions_checked for r in rows):
        notes.append(".ort: the checker reads .onnx files; a static .ort (convert --to ort --static) holds the graph "
                     "of the .onnx it was made from")
    return notes
