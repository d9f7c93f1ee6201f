"""WebGPU in headless Chromium: the builtin classifier's transformers.js folder at each dtype
(fp32, fp16, q8), through transformers.js' pipeline and onnxruntime-web itself, against PyTorch on
the held-out texts; the adapter, which nodes onnxruntime-web placed on WebGPU and which on its CPU
provider, and what each runtime refused. It runs tests/web/test_webgpu.py, which holds the figures
to their thresholds, and writes the figures that test recorded (so the result file holds nothing
a test did not check):

    python benchmarks/webgpu_parity.py --out benchmarks/results/webgpu_parity.json

On a software adapter (SwiftShader) the figures say what WebGPU computes, not how fast.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _harness as harness  # noqa: E402  (options, the result file)

ROOT = Path(__file__).resolve().parents[1]
TEST = "tests/web/test_webgpu.py"


def _recorded(junit: Path) -> tuple[list[dict], dict[str, str]]:
    """The figures each test recorded, and each test's outcome (passed, skipped: why, failed)."""
    import json

    figures, outcomes = [], {}
    for case in ET.parse(junit).iter("testcase"):
        figures += [json.loads(p.get("value")) for p in case.iter("property") if p.get("name") == "figures"]
        skipped, failed = case.find("skipped"), [case.find("failure"), case.find("error")]
        outcomes[case.get("name")] = ("failed" if any(f is not None for f in failed) else
                                      f"skipped: {skipped.get('message')}" if skipped is not None else "passed")
    return figures, outcomes


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__)
    harness.options(p, out={"help": "Also write the result file the docs render "
                                    "(benchmarks/results/webgpu_parity.json)."})
    args = p.parse_args(argv)
    header = harness.start("webgpu_parity", versions=("selenium",))
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", TEST,
                               f"--junitxml={junit}", "-o", "junit_logging=no"], cwd=ROOT,
                              env={**os.environ, "ALBERT_EDGE_WEBGPU_TEXTS": "210"})  # every text, not the suite's few
        figures, outcomes = _recorded(junit)
    print("\n".join(f"{name}: {outcome}" for name, outcome in outcomes.items()))
    if done.returncode != 0 or not figures:
        print(f"{TEST} did not pass: no result file written", file=sys.stderr)
        return 1
    if args.out:
        chromium = subprocess.run(["/usr/bin/chromium", "--version"], capture_output=True, text=True).stdout.strip()
        harness.write(args.out, header, {"browser": chromium, "test": TEST, "outcomes": outcomes,
                                         "dtypes": figures})
    return 0


if __name__ == "__main__":
    sys.exit(main())
