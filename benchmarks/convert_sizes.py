"""Conversion time, peak memory and stored-vs-unique weight bytes for ALBERT presets.

For each preset: transformers builds a random-init model and saves it as a Hugging Face
checkpoint (every parameter nudged by noise, so zero biases and unit LayerNorm weights cannot
be folded away and flatter the numbers); then `albert-edge convert` runs once per target in
its own process, timed, with two peaks: the largest process's RSS, read from the kernel (the
TFLite converter runs in child processes), and the PSS summed over the whole process tree,
sampled; then `albert-edge inspect` reads each file back. The bound is the converters issue's: stored weight bytes at most
1.005 x the model's unique parameter bytes + 64 KiB, and zero duplicates.

    python benchmarks/convert_sizes.py albert-base-v2 albert-large-v2 --to onnx --to tflite
    python benchmarks/convert_sizes.py albert-xxlarge-v2 --head base --json
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _harness as harness  # noqa: E402  (the options every benchmark shares)

HF_CLASS = {"base": "AlbertModel", "pretraining": "AlbertForPreTraining", "mlm": "AlbertForMaskedLM",
            "classification": "AlbertForSequenceClassification"}


def make_checkpoint(preset: str, head: str, out: Path) -> int:
    import torch
    import transformers

    from albert_edge.config import AlbertConfig
    from albert_edge.model import build_model, num_params

    config = AlbertConfig.preset(preset)
    hf_config = transformers.AlbertConfig(**{k: v for k, v in config.to_hf_dict().items() if k != "model_type"})
    torch.manual_seed(0)
    model = getattr(transformers, HF_CLASS[head])(hf_config)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    model.save_pretrained(out)
    with torch.device("meta"):
        return num_params(build_model(config, head)) * 4


def _tree_pss(pid: int) -> int:
    """Proportional set size (bytes) of ``pid`` and all its descendants, from /proc: pages a
    forked child shares with its parent count once between them, not once in each."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    todo += [int(c) for c in f.read().split()]
            with open(f"/proc/{p}/smaps_rollup") as f:
                total += next(int(line.split()[1]) * 1024 for line in f if line.startswith("Pss:"))
        except (OSError, StopIteration):  # gone meanwhile
            pass
    return total


def run_child(args: list[str]) -> tuple[float, int, int, subprocess.CompletedProcess]:
    """Wall seconds, peak RSS of the largest process (bytes; the kernel's rusage from wait4,
    which covers the child and every descendant it waited for) and the peak of the summed PSS
    of the child and its descendants (sampled every 0.1 s) of one conversion."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        child = subprocess.Popen(args, stdout=out, stderr=err, text=True)
        tree_peak = 0
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            tree_peak = max(tree_peak, _tree_pss(child.pid))
            time.sleep(0.1)
        wall = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(args, child.returncode, out.read(), err.read())
    return wall, usage.ru_maxrss * 1024, tree_peak, done


def measure(preset: str, head: str, target: str, work: Path, unique_bytes: int, seq_len: int) -> dict:
    ckpt = work / f"{preset}-{head}"
    out = work / f"{preset}-{head}-{target}"
    cli = [sys.executable, "-m", "albert_edge"]
    wall, peak, tree_peak, done = run_child(cli + ["convert", str(ckpt), "--to", target, "--out", str(out),
                                        "--head", head, "--seq-len", str(seq_len), "--json"])
    if done.returncode != 0:
        return {"preset": preset, "head": head, "target": target, "error": done.stderr.strip().splitlines()[-1]}
    result = json.loads(done.stdout)
    path = next(out.glob(f"*.{target}"))
    inspected = json.loads(subprocess.run(cli + ["inspect", str(path), "--json"], capture_output=True,
                                          text=True, check=True).stdout)
    stored = inspected["stored_bytes"]
    bound = 1.005 * unique_bytes + 64 * 1024
    return {
        "preset": preset, "head": head, "target": target, "convert_s": round(wall, 1),
        "peak_rss_gib": round(peak / 2**30, 2), "peak_tree_pss_gib": round(tree_peak / 2**30, 2),
        "file_bytes": path.stat().st_size, "stored_weight_bytes": stored, "unique_param_bytes": unique_bytes,
        "stored_over_unique": round(stored / unique_bytes, 5), "within_bound": stored <= bound,
        "duplicates": len(inspected["duplicates"]), "conversion": result,
    }


def main() -> int:
    parser = harness.parser(__doc__)
    parser.add_argument("presets", nargs="+", help="albert-base-v2, albert-large-v2, albert-xxlarge-v2, ...")
    parser.add_argument("--head", default="base", choices=sorted(HF_CLASS), help="head to convert (default base)")
    parser.add_argument("--to", action="append", choices=["onnx", "tflite"], help="targets (default both)")
    harness.options(parser, seq_len={"default": 128, "help": "length to build and verify at (default 128)"},
                    work={"type": Path, "help": "keep checkpoints and files here (default: a temp dir)"},
                    json={"help": "print the rows as JSON"})
    args = parser.parse_args()
    targets = args.to or ["onnx", "tflite"]
    rows = []
    with tempfile.TemporaryDirectory(prefix="albert-edge-sizes-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for preset in args.presets:
            unique = make_checkpoint(preset, args.head, work / f"{preset}-{args.head}")
            for target in targets:
                rows.append(measure(preset, args.head, target, work, unique, args.seq_len))
                print(f"measured {preset} {target}", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"{'preset':<20}{'target':<8}{'convert s':>10}{'peak GiB':>10}{'tree PSS':>10}{'file MiB':>10}"
              f"{'stored/unique':>15}{'bound':>7}{'dups':>6}")
        for r in rows:
            if "error" in r:
                print(f"{r['preset']:<20}{r['target']:<8} error: {r['error']}")
                continue
            print(f"{r['preset']:<20}{r['target']:<8}{r['convert_s']:>10.1f}{r['peak_rss_gib']:>10.2f}"
                  f"{r['peak_tree_pss_gib']:>10.2f}"
                  f"{r['file_bytes'] / 2**20:>10.1f}{r['stored_over_unique']:>15.5f}"
                  f"{'ok' if r['within_bound'] else 'OVER':>7}{r['duplicates']:>6}")
    return 0 if all(r.get("within_bound") and r.get("duplicates") == 0 for r in rows) else 1


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main())
