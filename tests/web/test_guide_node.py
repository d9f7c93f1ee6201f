"""The web guide's Node example runs as written: its shell steps from an empty folder (the pinned
package.json and package-lock.json of the clone's web/app/, `npm ci`, `albert-edge convert`) and
its JavaScript saved as classify.mjs and run by node, as the guide says. Where npm's cache lacks
the packages and the registry cannot be reached, the test skips and says so."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .checkpoints import HF_LABELS, hf_checkpoints  # noqa: F401  (fixture)
from .runtimes import WEB, node_missing

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guides" / "web.md"
OFFLINE = ("ENOTCACHED", "EAI_AGAIN", "ENOTFOUND", "ECONNREFUSED", "ETIMEDOUT", "ENETUNREACH")

if not GUIDE.is_file():
    pytest.skip("docs/ is in the repository, not in the installed package", allow_module_level=True)


def guide_example() -> tuple[list[str], str]:
    """The Node example's shell lines (comments dropped) and the JavaScript after them."""
    blocks = re.findall(r"```([\w-]*)\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.S)
    n = next(i for i, (language, code) in enumerate(blocks) if language == "bash" and "npm ci" in code)
    assert blocks[n + 1][0] == "javascript", "the guide's JavaScript no longer follows its npm steps"
    lines = [line.split("  #", 1)[0].strip() for line in blocks[n][1].splitlines()]
    return [line for line in lines if line], blocks[n + 1][1]


def test_the_app_lockfile_is_the_tests_own():
    """web/app/ pins what web/package-lock.json (the versions tests/web runs) pins."""
    app = json.loads((WEB / "app" / "package-lock.json").read_text(encoding="utf-8"))["packages"]
    tests = json.loads((WEB / "package-lock.json").read_text(encoding="utf-8"))["packages"]
    differ = [name for name, entry in app.items() if name and entry != tests.get(name)]
    assert not differ and "node_modules/@huggingface/transformers" in app, differ


def test_the_node_example_runs_from_an_empty_folder(tmp_path, hf_checkpoints):  # noqa: F811
    missing = node_missing() or (None if shutil.which("npm") else "npm is not installed")
    if missing:
        pytest.skip(missing)
    steps, javascript = guide_example()
    assert steps[-1] == "node classify.mjs", steps
    script = "set -e\n" + "\n".join(steps[:-1]).replace("CLONE/", f"{ROOT}/").replace(
        "CLASSIFIER_CHECKPOINT", str(hf_checkpoints["classification"]))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "npm_config_prefer_offline": "true", "npm_config_audit": "false", "npm_config_fund": "false"}
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0 and any(code in done.stderr for code in OFFLINE):
        pytest.skip(f"npm's cache lacks web/app's packages and the registry cannot be reached: {done.stderr[-300:]}")
    assert done.returncode == 0, done.stderr[-3000:]
    app = tmp_path / "classify-app"
    (app / "classify.mjs").write_text(javascript, encoding="utf-8")
    ran = subprocess.run(["node", "classify.mjs"], cwd=app, env=env, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert re.search(rf"label: '({'|'.join(HF_LABELS)})'", ran.stdout), ran.stdout
