"""A quantized static .tflite (of a ``convert --static`` parent) on LiteRT's GPU accelerator: where
its operators ran, by the accelerator's own report, and how close its float32 run is to the same
file on the CPU. Recorded in the file's manifest entry beside its accuracy; it does not decide
whether the file is kept (the file is first of all a CPU file, measured against its parent)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from albert_edge.errors import RuntimeUnavailable
from albert_edge.runtime import Session

__all__ = ["gpu_run"]


def gpu_run(path: Path, feeds: dict[str, np.ndarray]) -> dict[str, Any]:
    """The file at ``path`` on the GPU accelerator (float32 arithmetic) on one ``[1, N]`` row
    ``feeds``, against the CPU; ``{"ran": False, "reason": ...}`` where there is no Vulkan device."""
    from albert_edge.runtime.accelerator import NoVulkanDevice, placed_run, vulkan_available

    missing = vulkan_available()
    if missing is not None:
        return {"ran": False, "reason": f"no Vulkan device: {missing}"}
    try:
        placement, got = placed_run(path, feeds, enforce_f32=True)
    except NoVulkanDevice as exc:
        return {"ran": False, "reason": str(exc)}
    except RuntimeUnavailable as exc:  # refused or crashed: the CPU file stands, the GPU record says why
        return {"ran": True, "placement": {"refused": True, "reason": str(exc), "ops": 0, "gpu_ops": 0,
                                           "cpu_ops": 0, "fallbacks": []}, "ok": False}
    cpu = Session(path).run(feeds)
    diffs = {name: float(np.max(np.abs(got[name] - cpu[name]))) for name in cpu}
    return {"ran": True, "enforce_f32": True, "against": "the same file on the CPU",
            "placement": {k: v for k, v in placement.to_dict().items() if k != "path"},  # path: a temporary name
            "max_abs_diff": diffs, "ok": True}
