"""The main job as a new user runs it: `albert-edge pipeline` on its built-in default, from nothing
cached (a fresh cache folder: the corpus gathered, the tokenizer trained, the small model
pretrained), timed, its largest process's peak memory taken; then what its reports say (files,
compute, latency with intervals, the small model's accuracy) kept in a result file that the docs
render (docs/pipeline.md, benchmarks/render_results.py).

    python benchmarks/pipeline_run.py --out benchmarks/results/pipeline.json
    python benchmarks/pipeline_run.py --work /tmp/pl --keep-cache --out /tmp/pipeline.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _harness as harness  # noqa: E402  (options, the result file)

# What the result keeps of each report: the figures the docs show, not the app snippets.
FILE_FIELDS = ("name", "format", "scheme", "bytes", "stored_weight_bytes", "unique_weight_bytes", "duplicates",
               "bytes_by_precision", "parent", "accuracy")
PROFILE_FIELDS = ("file_name", "format", "scheme", "runtime", "threads", "batch", "seq_len", "p50_ms", "p90_ms",
                  "p50_ci", "quality", "quality_reasons", "peak_rss", "load_ms", "device")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = harness.parser(__doc__)
    harness.options(p, out={"required": True, "help": "The result file to write."},
                    work={"type": Path, "help": "The pipeline's output folder (default: a temporary one, removed)."})
    p.add_argument("--keep-cache", action="store_true",
                   help="Use the user's cache (the small model as already trained) instead of a fresh one.")
    return p.parse_args(argv)


def _report(folder: Path) -> dict:
    report = json.loads((folder / "report" / "report.json").read_text(encoding="utf-8"))
    return {"model": folder.name,
            "files": [{k: f.get(k) for k in FILE_FIELDS} for f in report["files"]],
            "compute": report["compute"], "params": {k: report["params"][k] for k in ("total", "bert_total")},
            "profile": [{k: r.get(k) for k in PROFILE_FIELDS} for r in report["profile_rows"]],
            "missing": report["missing"]}


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    header = harness.start("pipeline", versions=("torch", "onnxruntime", "ai-edge-litert", "tensorflow"))
    with tempfile.TemporaryDirectory(prefix="albert-pipeline-") as tmp:
        work = args.work or Path(tmp) / "albert-edge-pipeline"
        env = dict(os.environ)
        if not args.keep_cache:
            env["XDG_CACHE_HOME"] = str(Path(tmp) / "cache")
        albert_edge = shutil.which("albert-edge") or str(Path(sys.executable).with_name("albert-edge"))
        start = time.perf_counter()
        done = subprocess.run([albert_edge, "pipeline", "--out", str(work), "--force"], env=env)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            sys.exit(f"albert-edge pipeline failed ({done.returncode}); nothing written")
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # the largest single process
        models = [_report(folder) for folder in sorted(work.iterdir())
                  if (folder / "report" / "report.json").is_file()]
    body = {"cache": "the user's" if args.keep_cache else "fresh (nothing cached)",
            "wall_s": round(wall, 1), "peak_rss_bytes": peak, "models": models}
    print(f"wrote {harness.write(args.out, header, body)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
