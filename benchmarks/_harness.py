"""What every result file says about where its figures come from: the command, the commit, the
date, the machine (CPU, its flags, the load while it ran) and the versions of the packages that
ran. The documentation renders its tables from these files (benchmarks/render_results.py), and
each table names the file, its machine, date and commit.

    header = harness.start("peers", versions=("onnxruntime", "ai-edge-litert"))
    ...                                  # the benchmark runs
    harness.write(path, header, {"rows": rows})
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

__all__ = ["commit", "start", "write", "RESULTS"]

RESULTS = Path(__file__).parent / "results"
# The CPU flags that decide which kernels the runtimes take (MLAS, XNNPACK, oneDNN).
_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni",
          "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16", "asimd", "asimddp", "i8mm", "sve")


def commit() -> str | None:
    """The checkout's commit (None outside a git checkout)."""
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def _dirty() -> bool | None:
    """Whether tracked files differ from the commit (the figures then come from a changed tree)."""
    try:
        done = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                              text=True, check=True, cwd=Path(__file__).parent)
        return bool(done.stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        return None


def _cpu() -> dict:
    """The CPU's model name, core count and the kernel-deciding flags it has."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("model name", "Model") and model in (platform.processor(), platform.machine()):
                model = value.strip()
            elif key in ("flags", "Features") and not flags:
                flags = set(value.split())
    except OSError:
        pass
    return {"model": model, "cores": os.cpu_count(), "flags": [f for f in _FLAGS if f in flags]}


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _versions(packages: tuple[str, ...]) -> dict[str, str | None]:
    out = {}
    for name in ("albert-edge", "numpy", *packages):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def start(benchmark: str, versions: tuple[str, ...] = ()) -> dict:
    """The header of a result, taken when the benchmark starts: what ran, where, when."""
    argv = [Path(sys.argv[0]).name if i == 0 else a for i, a in enumerate(sys.argv)]
    return {"benchmark": benchmark, "command": "python benchmarks/" + " ".join(argv),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": commit(), "tree_changed": _dirty(),
            "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpu": _cpu(),
                        "load_at_start": _load()},
            "versions": _versions(versions)}


def write(path: Path, header: dict, body: dict) -> Path:
    """The result file: ``header`` (from :func:`start`), the load when it ended, and ``body``."""
    result = {**header, "machine": {**header["machine"], "load_at_end": _load()}, **body}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def evict(path: Path) -> None:
    """Drop ``path`` (a file, or each file of a checkpoint directory) from the page cache, so every
    child reads its model cold, as after a boot. Runtimes map model files, and a mapped file's
    resident pages count in the process's RSS: how many a fault maps depends on how the kernel
    holds the file in its cache (a file written in one large write() is cached in large folios,
    and the same ALBERT-base int8 file then peaked 8 MiB higher), so a warm cache would make the
    figure depend on how and when the file was written."""
    for file in ([path] if path.is_file() else sorted(p for p in path.iterdir() if p.is_file())):
        fd = os.open(file, os.O_RDONLY)
        try:
            os.fdatasync(fd)  # dirty pages cannot be dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def fresh_process(argv: list[str], what: str, model: Path | None = None, env: dict | None = None) -> dict:
    """Run ``python ARGV`` (a benchmark script's child) in a fresh process, OpenMP threads passive,
    ``model`` read cold (see ``evict``), and return the JSON object it printed last; a failed
    child stops the benchmark with the tail of its stderr. Every benchmark here times this way."""
    if model is not None:
        evict(model)
    done = subprocess.run([sys.executable, *argv], capture_output=True, text=True,
                          env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE", **(env or {})})
    if done.returncode != 0:
        raise SystemExit(f"{what}: child failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
