"""LiteRT's GPU accelerator on a .tflite file, and what ``Session(path, accelerator="gpu")`` runs.

In a child process (:func:`gpu_placement`, :func:`run_on_gpu`, :func:`placed_run`): which operators
the accelerator takes, which it leaves on the CPU and why, whether it refuses the file, and what
the file answers on it, from the accelerator's own report (its log on stderr), so that a GPU
driver that crashes cannot take the caller down.

In this process (:class:`GpuTFLite`, Session's backend on the GPU): a static-shape .tflite on
ai-edge-litert's ``CompiledModel`` with ``HardwareAccelerator.GPU | CPU``, the operators it does
not take on the CPU, as an app runs it; an .onnx runs on onnxruntime's CUDA provider instead
(:func:`onnx_gpu_provider`). The placement is read from the same report, the accelerator's log
while the file compiles: the process's stdout and stderr are held for that moment and their lines
given to the parser the child's log goes through. The GPU computes in float32 by default here
(``GpuOptions(enforce_f32=True)``: within 1e-5 of the CPU); "fp16" is the accelerator's own
default, faster on a phone's GPU and about 1e-2 off.

ai-edge-litert ships the accelerator as ``libLiteRtWebGpuAccelerator.so``: WebGPU (Dawn) over
Vulkan on Linux. Mesa's lavapipe is a real Vulkan implementation on the CPU, so the accelerator's
decisions (what it delegates, what it refuses, its precision) are checked on any Linux machine;
timings on lavapipe say nothing about a GPU (:func:`software_adapter` tells such a device, "llvmpipe"
to the accelerator). Debian 12's Mesa 22.3 is not taken by it ("No adapters found"); Mesa 25 from
bookworm-backports is (``.ci/gpu.sh`` installs it).

The accelerator takes static-shape files only: one dynamic-sized tensor in the graph (a position
slice sized by the input's SHAPE, say) and it refuses the whole file. TensorFlow's GPU
compatibility Analyzer is no guide to that: it passes files the accelerator refuses.

Device side: standard library and numpy; ai-edge-litert is imported in the child, and in this
process only when a file is opened on the GPU.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import weakref
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ..children import child_env, python
from ..errors import RuntimeUnavailable, optional_import
from ..formats.kinds import TFLITE

__all__ = ["NoVulkanDevice", "StaticShapeOnly", "CpuFallback", "GpuPlacement", "vulkan_available", "vulkan_devices",
           "no_vulkan", "input_shapes", "refusal_message", "gpu_placement", "run_on_gpu", "placed_run", "NO_VULKAN_FIX",
           "ACCELERATORS", "PRECISIONS", "NO_CUDA", "GpuTFLite", "onnx_gpu_provider", "software_adapter",
           "software_warning"]

log = logging.getLogger(__name__)

NO_VULKAN_FIX = "install Mesa's lavapipe (.ci/gpu.sh) or run on a device with a GPU"
_TIMEOUT = 600  # seconds a child may take: lavapipe compiles a large graph's kernels slowly


class NoVulkanDevice(RuntimeUnavailable):
    """No Vulkan device that LiteRT's GPU accelerator takes."""


class StaticShapeOnly(RuntimeUnavailable):
    """A file with dynamic-sized tensors, which LiteRT's GPU accelerator refuses whole."""


@dataclasses.dataclass(frozen=True)
class CpuFallback:
    """An operator type the accelerator leaves on the CPU, with its reason, as it words them."""

    op: str
    reason: str


@dataclasses.dataclass(frozen=True)
class GpuPlacement:
    """Where LiteRT's GPU accelerator puts a file's operators (with the CPU as the fallback).

    ``ops`` counts the operators of the graph the signature runs (not the bodies of WHILE loops);
    ``fallbacks`` lists the operator types the accelerator leaves on the CPU with its reason,
    once each, as its report lists them. A refused file runs nothing on the GPU: ``reason`` says
    why."""

    path: str
    ops: int
    gpu_ops: int
    cpu_ops: int
    fallbacks: tuple[CpuFallback, ...]
    refused: bool
    reason: str | None
    adapter: str | None  # the adapter the accelerator selected, as it names it
    enforce_f32: bool
    runtime: str  # "ai-edge-litert 2.3.0"
    note: str = "placement only: timings on a software Vulkan device (lavapipe) say nothing about a GPU"

    @property
    def all_on_gpu(self) -> bool:
        return not self.refused and self.cpu_ops == 0

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "all_on_gpu": self.all_on_gpu}

    def check(self) -> None:
        """Raise the refusal as an error: StaticShapeOnly for a dynamic-shape file, which albert-edge
        does not run on the GPU even where the accelerator takes some of it (it leaves the shape
        arithmetic on the CPU, a copy between the two at each hand-over): the static file is the fix."""
        shapes = input_shapes(self.path)
        if not self.refused and any(d < 0 for shape in shapes for d in shape):
            raise StaticShapeOnly(refusal_message(self.path, f"shape arithmetic runs on the CPU ({self.cpu_ops} of "
                                                  f"{self.ops} operators): it is dynamic-sized", shapes))
        if self.refused:
            kind = StaticShapeOnly if "dynamic-sized" in (self.reason or "") else RuntimeUnavailable
            raise kind(refusal_message(self.path, self.reason or "refused", shapes))


# -- Vulkan ---------------------------------------------------------------------------------------

# Run in a child with the standard library only: creating a Vulkan instance loads every driver the
# loader finds (lavapipe brings LLVM), which the caller's process need not hold.
_VULKAN_PROBE = r"""
import ctypes as C, json, struct
RESULTS = {-1: "VK_ERROR_OUT_OF_HOST_MEMORY", -3: "VK_ERROR_INITIALIZATION_FAILED",
           -9: "VK_ERROR_INCOMPATIBLE_DRIVER", -7: "VK_ERROR_EXTENSION_NOT_PRESENT"}
TYPES = {0: "other", 1: "integrated GPU", 2: "discrete GPU", 3: "virtual GPU", 4: "CPU"}

class CreateInfo(C.Structure):  # VkInstanceCreateInfo
    _fields_ = [("sType", C.c_int), ("pNext", C.c_void_p), ("flags", C.c_uint32), ("app", C.c_void_p),
                ("layers", C.c_uint32), ("layer_names", C.c_void_p), ("extensions", C.c_uint32),
                ("extension_names", C.c_void_p)]

def probe():
    try:
        vk = C.CDLL("libvulkan.so.1")
    except OSError:
        return {"error": "no Vulkan loader (libvulkan.so.1 is not installed)"}
    instance = C.c_void_p()
    status = vk.vkCreateInstance(C.byref(CreateInfo(sType=1)), None, C.byref(instance))
    if status != 0:
        return {"error": f"Vulkan finds no driver (vkCreateInstance: {RESULTS.get(status, status)})"}
    try:
        count = C.c_uint32()
        vk.vkEnumeratePhysicalDevices(instance, C.byref(count), None)
        handles = (C.c_void_p * count.value)()
        vk.vkEnumeratePhysicalDevices(instance, C.byref(count), handles)
        devices = []
        for handle in handles[:count.value]:
            props = C.create_string_buffer(4096)  # VkPhysicalDeviceProperties is ~830 bytes
            vk.vkGetPhysicalDeviceProperties(C.c_void_p(handle), props)
            api, _, _, _, kind = struct.unpack_from("<5I", props.raw, 0)
            name = props.raw[20:276].split(b"\0")[0].decode(errors="replace")
            devices.append({"name": name, "type": TYPES.get(kind, str(kind)),
                            "api": f"{api >> 22 & 0x7f}.{api >> 12 & 0x3ff}.{api & 0xfff}"})
        return {"devices": devices}
    finally:
        vk.vkDestroyInstance(instance, None)

print(json.dumps(probe()))
"""


def vulkan_devices() -> list[dict] | str:
    """The Vulkan devices this machine has (name, type, API version), or why there are none."""
    try:
        done = subprocess.run(python("-c", _VULKAN_PROBE), env=child_env(), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return "the Vulkan loader did not answer in 60 s"
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return f"the Vulkan loader failed ({_died(done.returncode)}{_last_error(done.stderr)})"
    found = json.loads(lines[-1])
    if "error" in found:
        return found["error"]
    return found["devices"] or "Vulkan finds no device (vkEnumeratePhysicalDevices returned none)"


def vulkan_available() -> str | None:
    """Why this machine has no Vulkan device, or None when it has one. The accelerator may still
    refuse the device (Mesa 22.3's lavapipe): :func:`gpu_placement` raises NoVulkanDevice then."""
    if not sys.platform.startswith("linux"):
        return f"LiteRT's GPU accelerator runs on Vulkan on Linux only here, and this is {sys.platform}"
    devices = vulkan_devices()
    return devices if isinstance(devices, str) else None


def no_vulkan(detail: str) -> NoVulkanDevice:
    """The one line for no Vulkan device the accelerator takes: ``detail`` (why) and the fix."""
    return NoVulkanDevice(f"no Vulkan device ({detail}): {NO_VULKAN_FIX}")


# -- the accelerator's report -----------------------------------------------------------------------

_UNSUPPORTED = "Following operations are not supported by GPU delegate:"
_SPLIT = re.compile(r"(\d+) operations will run on the GPU, and the remaining (\d+) operations will run on the CPU")
_NONE = re.compile(r"No operations will run on the GPU, and all (\d+) operations will run on the CPU")
_DYNAMIC = re.compile(r"tensor#(-?\d+) is a dynamic-sized tensor")
_ADAPTER = re.compile(r"Selected adapter: (.+)")
_NO_ADAPTER = "No adapters found"
_OP = re.compile(r"[A-Z][A-Z0-9_]*")


@dataclasses.dataclass
class _Report:
    """What the accelerator's log says, summed over the graphs it was offered."""

    gpu: int = 0
    cpu: int = 0
    counted: bool = False
    fallbacks: list[CpuFallback] = dataclasses.field(default_factory=list)
    dynamic_tensor: int | None = None
    adapter: str | None = None
    no_adapter: bool = False
    errors: list[str] = dataclasses.field(default_factory=list)


def _parse(log: str) -> _Report:
    report, listing = _Report(), False
    for raw in log.splitlines():
        line = raw.strip()
        if _UNSUPPORTED in line:
            listing = True
            continue
        split, none = _SPLIT.search(line), _NONE.search(line)
        if split or none:
            listing = False
            report.counted = True
            if split:
                report.gpu += int(split[1])
                report.cpu += int(split[2])
            else:
                report.cpu += int(none[1])
            continue
        if listing:
            op, colon, reason = line.partition(":")
            if colon and _OP.fullmatch(op):
                # Some operators come with no reason (fp16 DEQUANTIZE).
                fallback = CpuFallback(op, reason.strip() or "(no reason given)")
                if fallback not in report.fallbacks:
                    report.fallbacks.append(fallback)
                continue
            listing = False
        if (found := _DYNAMIC.search(line)) and report.dynamic_tensor is None:
            report.dynamic_tensor = int(found[1])
        if (found := _ADAPTER.search(line)) and report.adapter is None:
            report.adapter = found[1].strip()
        if _NO_ADAPTER in line:
            report.no_adapter = True
        if line.startswith(("ERROR:", "E0000")) or line.startswith("└"):
            report.errors.append(line)
    return report


# -- the file, read here (no ai-edge-litert in this process) -----------------------------------------

def _graph(path: str | Path):
    """(schema, model, the signature's subgraph) of a .tflite file, read whole."""
    from ..formats.tflite_reader import SIGNATURE, schema_module

    schema = schema_module()
    raw = Path(path).read_bytes()
    if not TFLITE.identifies(raw):
        raise RuntimeUnavailable(f"{path}: {TFLITE.identifier.refusal}")
    model = schema.Model.GetRootAs(raw, 0)
    keys = [model.SignatureDefs(i).SignatureKey().decode() for i in range(model.SignatureDefsLength())]
    index = model.SignatureDefs(keys.index(SIGNATURE)).SubgraphIndex() if SIGNATURE in keys else 0
    return schema, model, model.Subgraphs(index)


def _op_count(path: str | Path) -> int:
    return int(_graph(path)[2].OperatorsLength())


# Operators whose output size is read from some of their inputs (by index): with one of those
# computed rather than constant, the output is dynamic-sized. (Not RESHAPE: the interpreter works
# out its shape while preparing, from a shape computed from static input shapes; the accelerator
# named the position SLICE, never a RESHAPE before it.)
_SIZED_BY = {"SLICE": (1, 2), "STRIDED_SLICE": (1, 2, 3), "RANGE": (0, 1, 2), "FILL": (0,), "BROADCAST_TO": (1,)}


def _first_dynamic(schema, model, sub, names: dict[int, str]) -> int | None:
    """The first tensor of ``sub`` whose size an operator reads from a computed tensor."""
    constant = {t for t in range(sub.TensorsLength()) if model.Buffers(sub.Tensors(t).Buffer()).DataLength() > 0}
    for i in range(sub.OperatorsLength()):
        op = sub.Operators(i)
        code = model.OperatorCodes(op.OpcodeIndex())
        inputs = op.InputsAsNumpy().tolist()
        sizes = _SIZED_BY.get(names.get(max(code.BuiltinCode(), code.DeprecatedBuiltinCode()), ""), ())
        if any(k < len(inputs) and inputs[k] >= 0 and inputs[k] not in constant for k in sizes):
            return int(op.OutputsAsNumpy()[0])
    return None


def _tensor_origin(path: str | Path, tensor: int) -> str:
    """``tensor#N 'name' (made by OP)`` of the signature's subgraph, for the accelerator's refusal.
    Where the accelerator names no tensor (``tensor#-1``), the first one sized by a computed tensor."""
    schema, model, sub = _graph(path)
    if tensor < 0:
        names = {v: k for k, v in vars(schema.BuiltinOperator).items() if isinstance(v, int)}
        tensor = _first_dynamic(schema, model, sub, names)
        if tensor is None:
            return "a tensor"
    if not 0 <= tensor < sub.TensorsLength():
        return f"tensor#{tensor}"
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if isinstance(v, int)}
    label = f"tensor#{tensor} '{(sub.Tensors(tensor).Name() or b'').decode(errors='replace')}'"
    for i in range(sub.OperatorsLength()):
        op = sub.Operators(i)
        if tensor in op.OutputsAsNumpy().tolist():
            code = model.OperatorCodes(op.OpcodeIndex())
            return f"{label} (made by {names.get(max(code.BuiltinCode(), code.DeprecatedBuiltinCode()), '?')})"
    return label


def input_shapes(path: str | Path) -> list[list[int]]:
    """Each signature input's shape signature (-1 where dynamic)."""
    from .compiled import read_signature

    signature = read_signature(path)
    return [list(s.shape) for s in signature[1]] if signature else []


def refusal_message(path, reason: str, shapes: list[list[int]]) -> str:
    """The line for a file the accelerator refuses for ``reason``; for a dynamic-sized tensor it names
    the fix (convert --static) and the file's input ``shapes`` (:func:`input_shapes`)."""
    if "dynamic-sized" in reason:
        inputs = ", ".join(sorted({str(s) for s in shapes})) or "?"
        return (f"{path}: the GPU accelerator takes static-shape files only: convert with a fixed length "
                f"(`albert-edge convert --static`: [1, N] inputs; this file's inputs are {inputs}, and its {reason})")
    return f"{path}: LiteRT's GPU accelerator refuses it: {reason}"


# -- the child ------------------------------------------------------------------------------------

_CHILD = "import sys; from albert_edge.runtime.accelerator import _child_main; _child_main(sys.argv[1])"


def _child_main(argument: str) -> None:
    """The child's whole life: compile ``path`` with the GPU accelerator (CPU as the fallback),
    run the feeds when given, write the answer as JSON to ``answer``. LiteRT's log goes to this
    process's stderr, which the parent reads."""
    from importlib.metadata import version

    request = json.loads(argument)
    answer: dict = {"runtime": f"ai-edge-litert {version('ai-edge-litert')}"}
    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.hardware_accelerator import HardwareAccelerator
    from ai_edge_litert.options import GpuOptions, Options

    options = Options(hardware_accelerators=HardwareAccelerator.GPU | HardwareAccelerator.CPU,
                      gpu_options=GpuOptions(enforce_f32=request["enforce_f32"]))
    try:
        model = CompiledModel.from_file(request["path"], options=options)
    except RuntimeError as exc:
        answer["error"] = " ".join(str(exc).split())
    else:
        answer["fully_accelerated"] = bool(model.is_fully_accelerated())
        if request.get("feeds"):
            answer["outputs"] = _run(model, request["feeds"], request["outputs"])
    sys.stderr.flush()
    Path(request["answer"]).write_text(json.dumps(answer))


def _run(model, feeds_path: str, outputs_path: str) -> list[str]:
    """Run the signature on the feeds (a static file: every buffer sized as the file says)."""
    signatures = model.get_signature_list()
    key = "serving_default" if "serving_default" in signatures else next(iter(signatures))
    index, names = model.get_signature_index(key), signatures[key]
    feeds = np.load(feeds_path)
    inputs, outputs = model.create_input_buffers(index), model.create_output_buffers(index)
    for name, buffer in zip(names["inputs"], inputs):
        buffer.write(np.ascontiguousarray(feeds[name]))
    model.run_by_index(index, inputs, outputs)
    details = model.get_output_tensor_details(key)
    results = {}
    for name, buffer in zip(names["outputs"], outputs):
        shape, dtype = details[name]["shape"], np.dtype(details[name]["dtype"])
        results[name] = buffer.read(int(np.prod(shape)), dtype).reshape(shape)
    np.savez(outputs_path, **results)
    return list(results)


def _in_child(path: Path, enforce_f32: bool, feeds: dict[str, np.ndarray] | None,
              timeout: float) -> tuple[dict, _Report, dict[str, np.ndarray] | None]:
    """Run :func:`_child_main` on ``path``; (its answer, its log read, the outputs when run)."""
    with tempfile.TemporaryDirectory(prefix="albert-edge-gpu-") as work:
        request = {"path": str(path), "enforce_f32": bool(enforce_f32), "answer": f"{work}/answer.json"}
        if feeds is not None:
            np.savez(f"{work}/feeds.npz", **feeds)
            request.update(feeds=f"{work}/feeds.npz", outputs=f"{work}/outputs.npz")
        try:
            # stdout too: Dawn writes its warnings there.
            done = subprocess.run(python("-c", _CHILD, json.dumps(request)), env=child_env(),
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, errors="replace", timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeUnavailable(f"{path}: LiteRT's GPU accelerator did not answer in {timeout:g} s") from None
        report = _parse(done.stdout)
        answer_file = Path(request["answer"])
        if done.returncode != 0 or not answer_file.exists():
            if report.no_adapter:
                raise no_vulkan(_no_adapter_detail())
            raise RuntimeUnavailable(f"{path}: LiteRT's GPU accelerator failed ({_died(done.returncode)}"
                                     f"{_last_error(done.stdout)})")
        answer = json.loads(answer_file.read_text())
        outputs = None
        if "outputs" in answer:
            with np.load(request["outputs"]) as saved:
                outputs = {name: saved[name] for name in answer["outputs"]}
    return answer, report, outputs


def _no_adapter_detail() -> str:
    devices = vulkan_devices()
    if isinstance(devices, str):
        return devices
    names = ", ".join(f"{d['name']} (Vulkan {d['api']})" for d in devices)
    return f"the GPU accelerator takes none of this machine's Vulkan devices: {names}"


def _died(code: int) -> str:
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit status {code}"


def _last_error(log: str) -> str:
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    wanted = [line for line in lines if line.startswith(("ERROR", "E0000", "└", "RuntimeError"))
              or "invalid pointer" in line or "free()" in line]
    line = (wanted or lines or [""])[-1]
    return f": {line[:300]}" if line else ""


# -- the API --------------------------------------------------------------------------------------

def gpu_placement(path: str | Path, *, enforce_f32: bool = True, timeout: float = _TIMEOUT) -> GpuPlacement:
    """Where LiteRT's GPU accelerator puts the operators of the .tflite file at ``path``, from its
    own report, measured in a child process. A file the accelerator refuses (dynamic-sized
    tensors) gives ``refused=True`` and the reason; ``GpuPlacement.check()`` raises it.

    Raises NoVulkanDevice when the accelerator finds no adapter, RuntimeUnavailable when the
    child fails otherwise (its last error line in the message)."""
    path = Path(path)
    ops = _op_count(path)
    answer, report, _ = _in_child(path, enforce_f32, None, timeout)
    return _placement(path, ops, answer, report, enforce_f32)


def _placement(path: Path, ops: int, answer: dict, report: _Report, enforce_f32: bool) -> GpuPlacement:
    if report.no_adapter:
        raise no_vulkan(_no_adapter_detail())
    refused = "error" in answer
    reason = None
    if refused:
        if report.dynamic_tensor is not None:
            reason = (f"{_tensor_origin(path, report.dynamic_tensor)} is a dynamic-sized tensor, and the "
                      "accelerator takes static-sized tensors only")
        else:
            reason = next((e.removeprefix("ERROR:").strip() for e in report.errors), answer["error"])
        gpu = 0
    elif report.counted:
        gpu = report.gpu
    else:  # the accelerator says nothing when it takes every operator
        gpu = ops if answer.get("fully_accelerated") else 0
    return GpuPlacement(path=str(path), ops=ops, gpu_ops=gpu, cpu_ops=ops - gpu, fallbacks=tuple(report.fallbacks),
                        refused=refused, reason=reason, adapter=report.adapter, enforce_f32=enforce_f32,
                        runtime=answer["runtime"])


def run_on_gpu(path: str | Path, feeds: dict[str, np.ndarray], *, enforce_f32: bool = True,
               timeout: float = _TIMEOUT) -> dict[str, np.ndarray]:
    """The outputs of the static-shape .tflite file at ``path`` for ``feeds``, computed by LiteRT's
    GPU accelerator (operators it does not take run on the CPU), in a child process.
    ``enforce_f32`` keeps the GPU's arithmetic in float32 (its default computes in float16).

    Raises StaticShapeOnly for a file with dynamic shapes, NoVulkanDevice when the accelerator
    finds no adapter, ValueError when the feeds do not match the file's inputs."""
    return placed_run(path, feeds, enforce_f32=enforce_f32, timeout=timeout)[1]


def placed_run(path: str | Path, feeds: dict[str, np.ndarray], *, enforce_f32: bool = True,
               timeout: float = _TIMEOUT) -> tuple[GpuPlacement, dict[str, np.ndarray]]:
    """:func:`run_on_gpu` with the placement of that run (one child, one compilation)."""
    path = Path(path)
    shapes = input_shapes(path)
    if any(d < 0 for shape in shapes for d in shape):
        raise StaticShapeOnly(refusal_message(path, "inputs are dynamic-sized", shapes))
    from .compiled import read_signature

    specs = read_signature(path)[1]
    missing = sorted({s.name for s in specs} - set(feeds))
    if missing:
        raise ValueError(f"{path}: feeds lack {', '.join(missing)}")
    wrong = [f"{s.name} {tuple(np.shape(feeds[s.name]))} (the file takes {s.shape})"
             for s in specs if tuple(np.shape(feeds[s.name])) != tuple(s.shape)]
    if wrong:
        raise ValueError(f"{path}: a static-shape file takes its own input shapes only: {'; '.join(wrong)}")
    arrays = {s.name: np.asarray(feeds[s.name], dtype=s.dtype) for s in specs}
    ops = _op_count(path)
    answer, report, outputs = _in_child(path, enforce_f32, arrays, timeout)
    placement = _placement(path, ops, answer, report, enforce_f32)
    placement.check()
    if outputs is None:
        raise RuntimeUnavailable(f"{path}: LiteRT's GPU accelerator returned no outputs")
    return placement, outputs


# -- accelerator="gpu" in this process: Session's backend -------------------------------------------

ACCELERATORS = ("cpu", "gpu")
# GPU arithmetic: "fp32" keeps it in float32 (GpuOptions.enforce_f32), "fp16" is the accelerator's default.
PRECISIONS = {"fp32": True, "fp16": False}
_SOFTWARE = ("llvmpipe", "lavapipe", "swiftshader")
NO_CUDA = ("CUDAExecutionProvider is not available in this onnxruntime build: install onnxruntime-gpu on a "
           "machine with CUDA")


def software_adapter(adapter: str | None) -> str | None:
    """The name of the software Vulkan device ``adapter`` is ("llvmpipe"), None for a real GPU.
    The accelerator names its adapter as "llvmpipe (LLVM 15.0.6, 256 bits), arch=software, ..."."""
    if not adapter:
        return None
    text = adapter.lower()
    found = next((name for name in _SOFTWARE if name in text), None)
    if found is None and ("arch=software" in text or "adaptertype=cpu" in text):
        found = adapter.split(" (")[0].split(",")[0].strip() or "software"
    return found


def software_warning(adapter: str | None) -> str | None:
    """The warning a measurement on a software Vulkan device carries, None on a real GPU."""
    name = software_adapter(adapter)
    if name is None:
        return None
    return (f"timings on a software Vulkan device ({name}) mean nothing: it proves the GPU path takes the file "
            "and computes right, not how fast")


def onnx_gpu_provider(provider: str | None) -> str:
    """The onnxruntime provider ``accelerator="gpu"`` runs an .onnx on: ``provider`` when it names a
    GPU one, else CUDA; RuntimeUnavailable in one line when this onnxruntime build lacks it."""
    from .onnx_engine import PROVIDERS

    wanted = PROVIDERS.get((provider or "cuda").lower(), provider)
    if wanted == PROVIDERS["cpu"]:
        wanted = PROVIDERS["cuda"]
    available = optional_import("onnxruntime").get_available_providers()
    if wanted not in available:
        if wanted == PROVIDERS["cuda"]:
            raise RuntimeUnavailable(NO_CUDA)
        raise RuntimeUnavailable(f"{wanted} is not available in this onnxruntime build: install onnxruntime-gpu "
                                 "on a machine with CUDA")
    return wanted


@contextlib.contextmanager
def _held_output() -> Iterator[list[str]]:
    """Hold this process's stdout and stderr (file descriptors 1 and 2) in a temporary file while
    the block runs, and put their lines in the yielded list when it ends: LiteRT logs on stderr,
    Dawn (WebGPU) writes its warnings on stdout."""
    lines: list[str] = []
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
    try:
        held = tempfile.TemporaryFile()
        saved = os.dup(1), os.dup(2)
    except OSError:  # nowhere to hold them: the placement then rests on is_fully_accelerated alone
        yield lines
        return
    with held:
        os.dup2(held.fileno(), 1)
        os.dup2(held.fileno(), 2)
        try:
            yield lines
        finally:
            with contextlib.suppress(OSError, AttributeError):
                ctypes.CDLL(None).fflush(None)  # C stdio's buffered stdout, before it is given back
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            held.seek(0)
            lines.extend(held.read().decode(errors="replace").splitlines())
    if log.isEnabledFor(logging.DEBUG):
        log.debug("LiteRT's log while compiling:\n%s", "\n".join(lines))


class GpuTFLite:
    """A static-shape .tflite compiled for LiteRT's GPU accelerator, the CPU taking what it leaves.
    ``placement`` says where its operators went, from the accelerator's own report.

    Raises StaticShapeOnly for a file with dynamic shapes (before anything compiles),
    NoVulkanDevice when the accelerator finds no adapter, RuntimeUnavailable when it refuses the
    file otherwise (its reason in the message)."""

    name = "ai_edge_litert"
    accelerator = "gpu"
    weights_once = None  # how the GPU holds a shared weight is not measured here

    def __init__(self, path: str | os.PathLike, num_threads: int | None = None, precision: str = "fp32"):
        if precision not in PRECISIONS:
            raise RuntimeUnavailable(f"unknown GPU precision {precision!r}; expected one of {', '.join(PRECISIONS)}")
        self.path, self.precision = Path(path), precision
        from .compiled import read_signature
        from .engines import version_of

        signature = read_signature(self.path)
        if signature is None:
            raise RuntimeUnavailable(f"{self.path}: no signature; LiteRT's CompiledModel runs signatures only")
        self._key, self.inputs, self.outputs = signature
        shapes = input_shapes(self.path)
        if any(d < 0 for shape in shapes for d in shape):
            raise StaticShapeOnly(refusal_message(self.path, "inputs are dynamic-sized", shapes))
        if "tensorflow" in sys.modules:
            # Measured with tensorflow 2.x: CompiledModel.from_file dies with SIGSEGV on the GPU then.
            raise RuntimeUnavailable(
                "LiteRT's GPU accelerator crashes in a process that has imported TensorFlow: open the file on the "
                "GPU in a process without tensorflow (albert_edge.runtime.accelerator.run_on_gpu runs it in a child)")
        enforce_f32 = PRECISIONS[precision]
        compiled_model = optional_import("ai_edge_litert.compiled_model")
        from ai_edge_litert.cpu_options import CpuOptions
        from ai_edge_litert.hardware_accelerator import HardwareAccelerator
        from ai_edge_litert.options import GpuOptions, Options

        options = Options(hardware_accelerators=HardwareAccelerator.GPU | HardwareAccelerator.CPU,
                          cpu_options=CpuOptions(num_threads=int(num_threads or 0)),
                          gpu_options=GpuOptions(enforce_f32=enforce_f32))
        answer = {"runtime": f"ai-edge-litert {version_of('ai_edge_litert') or 'unknown'}"}
        self._model = None
        with _held_output() as lines:
            try:
                self._model = compiled_model.CompiledModel.from_file(str(self.path), options=options)
            except RuntimeError as exc:
                answer["error"] = " ".join(str(exc).split())
        report = _parse("\n".join(lines))
        if report.no_adapter:
            raise no_vulkan(_no_adapter_detail())
        if self._model is not None:
            answer["fully_accelerated"] = bool(self._model.is_fully_accelerated())
        self.placement: GpuPlacement = _placement(self.path, _op_count(self.path), answer, report, enforce_f32)
        self.placement.check()
        model, self._model = self._model, None  # held in self._held only, so that its finalizer frees it
        self._index = model.get_signature_index(self._key)
        names = model.get_signature_list()[self._key]
        self._in_names, self._out_names = names["inputs"], names["outputs"]
        with _held_output():  # LiteRT's INFO lines as it makes the buffers' environment
            ins, outs = model.create_input_buffers(self._index), model.create_output_buffers(self._index)
        details = model.get_output_tensor_details(self._key)
        self._out_shapes = {n: (tuple(details[n]["shape"]), np.dtype(details[n]["dtype"])) for n in self._out_names}
        self._in_dtypes = {s.name: np.dtype(s.dtype) for s in self.inputs}
        self._ran = False
        # LiteRT logs a line per accelerator it destroys: held too, when this object goes.
        self._held = [model, ins, outs]
        self._closer = weakref.finalize(self, _release, self._held)

    @property
    def adapter(self) -> str | None:
        return self.placement.adapter

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if not self._ran:
            with _held_output():  # the first call makes an environment of its own, and LiteRT says so
                results = self._run(feeds)
            self._ran = True
            return results
        return self._run(feeds)

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if not self._held:
            raise RuntimeUnavailable(f"{self.path}: the GPU session is closed")
        model, ins, outs = self._held
        for name, buffer in zip(self._in_names, ins):
            buffer.write(np.ascontiguousarray(feeds[name], dtype=self._in_dtypes[name]))
        model.run_by_index(self._index, ins, outs)
        results = {}
        for name, buffer in zip(self._out_names, outs):
            shape, dtype = self._out_shapes[name]
            results[name] = buffer.read(int(np.prod(shape)), dtype).reshape(shape)
        return {s.name: results[s.name] for s in self.outputs}

    def close(self) -> None:
        """Free LiteRT's objects now rather than when this object is collected."""
        self._closer()


def _release(held: list) -> None:
    with _held_output():
        held.clear()
