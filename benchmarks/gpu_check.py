"""Static ONNX files on an NVIDIA GPU (a Jetson, or a datacenter card standing in for one):
onnxruntime's CUDA and TensorRT execution providers, where each file's nodes run, how close the
outputs are to PyTorch's, and `albert-edge profile` records of the static files.

For each model shape (the tiny preset; ALBERT-base's shape, random weights): ``convert --to onnx
--static`` (fp32, [1, N] inputs), its fp16 file (``quantize --scheme fp16``) and the dynamic fp32
file for comparison. Each file x provider is opened as ``runtime.Session`` opens it (the provider,
then the CPU for what it does not take) with onnxruntime's profiler on: the providers the session
really holds, the nodes each provider ran (from the profiler's trace: every node event names its
provider), and the outputs on one padded, two-segment row against PyTorch's (largest absolute
difference and cosine). Then ``albert-edge profile --provider P`` times the static files (its
records are appended to a .jsonl beside the result). One JSON result file: versions (onnxruntime
build, CUDA runtime, cuDNN, TensorRT), the GPU and driver from nvidia-smi, commit, date.

    benchmarks/gpu_check.sh                         # installs onnxruntime-gpu, then runs this
    python benchmarks/gpu_check.py --providers cpu  # the dry run: the same steps on the CPU provider

Exit status: 0 every check passed; 1 a check failed (the result file says which); 2 bad options;
3 no usable CUDA execution provider here (one line; nothing is built).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _harness as harness  # noqa: E402  (options, the child mode, the result file)
from gpu_check_steps import FULL, ROOT, SHAPES  # noqa: E402  (the child steps)
NO_CUDA = 3


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__)
    parser.add_argument("--providers", default="cuda,tensorrt",
                        help="execution providers to check, comma-separated: cuda, tensorrt, or cpu alone for a dry "
                             "run with the CPU onnxruntime (default: cuda,tensorrt; TensorRT is recorded as not "
                             "available where its libraries are missing)")
    parser.add_argument("--shapes", default="tiny,albert-base", help=f"model shapes: {', '.join(SHAPES)}")
    harness.options(parser, seq_len={"default": 128, "help": "N of the static files' [1, N] inputs"})
    parser.add_argument("--profile-seconds", type=float, default=2.0,
                        help="albert-edge profile --max-seconds per file x provider (0: no profile records)")
    parser.add_argument("--budget", type=float, default=300.0,
                        help="seconds for the whole run: a step that would start past it is recorded as skipped")
    parser.add_argument("--device-name", default=None, help="the <device> of gpu_check-<device>.json (default: "
                                                            "the GPU's name from nvidia-smi, or the board's)")
    harness.options(parser, out={"help": "result file (default: benchmarks/results/gpu_check-<device>.json; a "
                                         "--providers cpu run: under --work)"},
                    work={"type": Path, "help": "folder for the files (default: a temporary one)"})
    parser.add_argument("--setup-seconds", type=float, default=None,
                        help="seconds the venv took to make (gpu_check.sh passes it), kept in the result")
    args = parser.parse_args(argv)
    providers = [p.strip().lower() for p in args.providers.split(",") if p.strip()]
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    bad = [p for p in providers if p not in FULL] + [s for s in shapes if s not in SHAPES]
    if bad or not providers or not shapes or ("cpu" in providers and len(providers) > 1):
        parser.error(f"--providers takes cuda and/or tensorrt, or cpu alone; --shapes {', '.join(SHAPES)} "
                     f"(got {', '.join(bad) or args.providers})")
    if args.work is None:
        with tempfile.TemporaryDirectory(prefix="gpu-check-") as work:
            return run(args, providers, shapes, Path(work))
    args.work.mkdir(parents=True, exist_ok=True)
    return run(args, providers, shapes, args.work)


def run(args, providers: list[str], shapes: list[str], work: Path) -> int:
    start = time.monotonic()
    deadline = start + args.budget
    env = child_env(work)
    probes = {p: child("probe", {"provider": p, "work": str(work)}, env, timeout=120) for p in providers}
    cuda = probes.get("cuda")
    if cuda is not None and not cuda.get("taken"):
        print(f"gpu_check: no usable CUDA execution provider: {cuda.get('reason')} (or run with --providers cpu for "
              "the dry run)", file=sys.stderr)
        return NO_CUDA
    usable = [p for p in providers if probes[p].get("taken")]
    gpu = nvidia_smi()
    device = args.device_name or slug((gpu[0]["name"] if gpu else None) or board() or "cpu")
    out = args.out or (work / f"gpu_check-{device}.json" if providers == ["cpu"]
                       else ROOT / "benchmarks" / "results" / f"gpu_check-{device}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    records = out.with_suffix(".profile.jsonl")
    records.unlink(missing_ok=True)
    result = {
        "benchmark": "gpu_check",
        "what": "static ONNX files (fp32, fp16; the dynamic fp32 for comparison) on onnxruntime's GPU execution "
                "providers: providers held, nodes per provider, outputs against PyTorch, profile records; random "
                "weights",
        "dry_run": providers == ["cpu"], "device": device, "seq_len": args.seq_len, "weights": "random (seed 0)",
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "commit": harness.commit(),
        "machine": {**harness.platform_info(), "board": board(),
                    "cpu_cores": os.cpu_count(), "gpus": gpu, "driver_cuda": driver_cuda()},
        "versions": versions(probes),
        "providers": {p: ({"available": True} if probes[p].get("taken") else
                          {"available": False, "reason": f"not available: {probes[p].get('reason')}"})
                      for p in providers},
        "engine_cache": "TensorRT engines cached per file (ORT_TENSORRT_ENGINE_CACHE_ENABLE) so profile's children "
                        "reuse the check's build" if "tensorrt" in usable else None,
        "files": [], "checks": [], "profiles": [], "skipped": [], "failed": [],
        "profile_records": records.name,
        "seconds": {} if args.setup_seconds is None else {"setup (venv, installs)": args.setup_seconds},
    }
    for shape in shapes:
        if time.monotonic() > deadline:
            result["skipped"].append({"shape": shape, "why": "time budget"})
            continue
        built = time.monotonic()
        files = child("build", {"shape": shape, "seq_len": args.seq_len, "work": str(work / shape)}, None, timeout=600)
        if "error" in files:
            result["failed"].append({"shape": shape, "why": f"build failed: {files['error']}"})
            continue
        result["seconds"][f"build {shape}"] = round(time.monotonic() - built, 1)
        result["files"] += [{k: v for k, v in f.items() if k != "path"} for f in files["files"]]
        for f in files["files"]:
            for p in usable:
                if time.monotonic() > deadline:
                    result["skipped"].append({"shape": shape, "kind": f["kind"], "provider": p, "why": "time budget"})
                    continue
                job = {**f, "provider": p, "reference": files["reference"], "work": str(work)}
                result["checks"].append({"shape": shape, "kind": f["kind"], **child("check", job, env, timeout=400)})
                harness.write_json(out, result)
        for f in (f for f in files["files"] if f["static_len"] and args.profile_seconds > 0):
            for p in usable:
                if time.monotonic() > deadline:
                    result["skipped"].append({"shape": shape, "kind": f["kind"], "provider": p,
                                              "why": "time budget (profile)"})
                    continue
                row = profile(f, p, args.seq_len, args.profile_seconds, records, env, work)
                result["profiles"].append({"shape": shape, "kind": f["kind"], **row})
                harness.write_json(out, result)
    result["seconds"]["total"] = round(time.monotonic() - start, 1)
    result["ok"] = (bool(result["checks"]) and not result["failed"] and all(c.get("ok") for c in result["checks"])
                    and all(p.get("ok") for p in result["profiles"]))
    harness.write_json(out, result)
    print(table(result))
    print(out)
    return 0 if result["ok"] else 1


# ---- the steps that run in a child process (a fresh onnxruntime, or torch kept out of the GPU runs)



def child(step: str, job: dict, env: dict | None, timeout: float) -> dict:
    """``step`` (gpu_check_steps.STEP_step) in a fresh Python: its JSON answer, or {"error": ...} with the
    last line it said."""
    cmd = harness.child_argv(f"gpu_check_steps:{step}_step", job)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"error": f"{step} ran past {timeout:.0f} s", "ok": False, "problems": [f"{step}: timed out"]}
    lines = done.stdout.strip().splitlines()
    if done.returncode == 0 and lines:
        return json.loads(lines[-1])
    said = [line for line in done.stderr.strip().splitlines() if line.strip()]
    error = f"{step} exited {done.returncode}: {said[-1] if said else '(nothing said)'}"
    return {"error": error, "ok": False, "problems": [error], "taken": False, "reason": error}


def child_env(work: Path) -> dict:
    """The environment of the GPU steps: the CUDA, cuDNN and TensorRT libraries that pip installed
    on the library path (onnxruntime-gpu's own requirements' first), TensorRT engines cached."""
    env = dict(os.environ)
    dirs = cuda_library_dirs()
    if dirs:
        old = [d for d in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
        env["LD_LIBRARY_PATH"] = os.pathsep.join(dirs + old)
    env.setdefault("ORT_TENSORRT_ENGINE_CACHE_ENABLE", "1")
    env.setdefault("ORT_TENSORRT_CACHE_PATH", str(work / "trt-cache"))
    return env


def cuda_library_dirs() -> list[str]:
    """Folders of shared libraries in pip's nvidia-* and tensorrt* packages, those onnxruntime-gpu
    requires first (a CUDA 12 build beside torch's CUDA 13 libraries must find its own cuDNN)."""
    try:
        needs = metadata.requires("onnxruntime-gpu") or ()
        wanted = [re.split(r"[ ;<>=~!\[]", r, maxsplit=1)[0].lower() for r in needs]
    except metadata.PackageNotFoundError:
        wanted = []
    ranked: list[tuple[int, str]] = []
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if not (name.startswith(("nvidia-", "tensorrt")) and dist.files):
            continue
        for d in sorted({str(dist.locate_file(f).parent) for f in dist.files if ".so" in f.name}):
            ranked.append((0 if name in wanted else 1, d))
    return list(dict.fromkeys(d for _, d in sorted(ranked, key=lambda r: r[0])))


def profile(file: dict, provider: str, seq_len: int, seconds: float, records: Path, env: dict, work: Path) -> dict:
    """`albert-edge profile` of one static file on one provider; its record appended to ``records``
    (the file named relative to the work folder, as the record keeps the path it was given)."""
    cmd = [sys.executable, "-m", "albert_edge", "profile", os.path.relpath(file["path"], work),
           "--provider", provider, "--seq-len", str(seq_len), "--batch", "1", "--threads", "1", "--warmup", "10",
           "--runs", "50", "--min-seconds", str(min(1.0, seconds)), "--max-seconds", str(seconds), "--json",
           "--append", str(records.resolve())]
    row = {"file": file["file"], "provider": provider}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=work, timeout=300)
    if done.returncode != 0:
        said = [line for line in done.stderr.splitlines() if line.strip()]
        return {**row, "ok": False, "problems": [f"profile exited {done.returncode}: {said[-1] if said else ''}"]}
    (record,) = json.loads(done.stdout)
    lat = record["latency"]
    row.update({"record_provider": record["provider"], "count": lat["count"], "p50_ms": lat["p50"],
                "p50_ci": lat["p50_ci"], "p90_ms": lat["p90"], "p90_ci": lat["p90_ci"], "quality": lat["quality"],
                "load_ms": record["load_ms"], "first_call_ms": record["first_call_ms"]})
    wrong = record["provider"] != FULL[provider]
    return {**row, "ok": not wrong, "problems": [f"profile ran on {record['provider']}"] if wrong else []}


# ---- the machine

def nvidia_smi() -> list[dict]:
    fields = ("name", "driver_version", "memory.total", "compute_cap", "pci.bus_id")
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [dict(zip(fields, (v.strip() for v in line.split(",")))) for line in out.splitlines() if line.strip()]


def driver_cuda() -> str | None:
    """The newest CUDA version the driver supports (nvidia-smi's header)."""
    try:
        out = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"CUDA Version:\s*([\d.]+)", out)
    return match.group(1) if match else None


def board() -> str | None:
    from albert_edge.device import board as device_board

    return device_board()


def versions(probes: dict) -> dict:
    found = harness.package_versions(("albert-edge", "onnxruntime", "onnxruntime-gpu", "onnx", "torch", "numpy"))
    probe = next(iter(probes.values()), {})
    found.update({k: probe.get(k) for k in ("cuda_runtime", "cudnn", "tensorrt")})
    found["onnxruntime_build"] = probe.get("onnxruntime")
    found["pip_cuda_packages"] = sorted(f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions()
                                        if (d.metadata["Name"] or "").lower().startswith(("nvidia-", "tensorrt")))
    return found


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "gpu"


def table(result: dict) -> str:
    prof = {(p["shape"], p["kind"], p["provider"]): p for p in result["profiles"]}
    lines = [f"{'shape':<12}{'file':<14}{'provider':<10}{'held':<6}{'nodes (cpu)':<13}{'max diff':<10}"
             f"{'cosine':<10}p50 ms [95% CI]"]
    for c in result["checks"]:
        p = prof.get((c["shape"], c["kind"], c["provider"]), {})
        nodes = c.get("nodes", {})
        held = "yes" if c.get("providers_used", [""])[0] == FULL[c["provider"]] else "NO"
        diff = max(c.get("max_abs_diff", {}).values(), default=float("nan"))
        cos = min(c.get("cosine", {}).values(), default=float("nan"))
        timing = (f"{p['p50_ms']:.3g} [{p['p50_ci'][0]:.3g}, {p['p50_ci'][1]:.3g}]"
                  if p.get("p50_ci") else ("-" if not p else "failed"))
        lines.append(f"{c['shape']:<12}{c['kind']:<14}{c['provider']:<10}{held:<6}"
                     f"{sum(nodes.values())} ({c.get('cpu_fallback_nodes', '?')})".ljust(55)[:55]
                     + f"{diff:<10.2g}{cos:<10.6f}{timing}")
        lines += [f"    problem: {problem}" for problem in c.get("problems", [])]
    lines += [f"{name}: {value['reason']}" for name, value in result["providers"].items() if not value["available"]]
    lines += [f"skipped: {s}" for s in result["skipped"]] + [f"FAILED: {f['why']}" for f in result["failed"]]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
