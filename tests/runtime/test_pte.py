"""Running .pte files: the same outputs as PyTorch, each shared weight packed once in memory,
no torch on the torch-free route, and one line for a file or an install that cannot run.

Each load that could crash runs in its own child process. Every check that runs a file is also
run with the torch-free binding (executorch-numpy-runtime, Python 3.12+) where an environment
with it is present: ET_NUMPY_PYTHON, or .venv-et-numpy in the checkout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from albert_edge.cli import main
from albert_edge.errors import RuntimeUnavailable
from albert_edge.formats.graph import INPUT_NAMES
from albert_edge.runtime import Session, engines

ROOT = Path(__file__).parents[2]
NUMPY_PYTHON = Path(os.environ.get("ET_NUMPY_PYTHON", ROOT / ".venv-et-numpy" / "bin" / "python"))
PYTHONS = [pytest.param(sys.executable, id="this-env"),
           pytest.param(str(NUMPY_PYTHON), id="numpy-runtime", marks=pytest.mark.skipif(
               not NUMPY_PYTHON.exists(), reason=f"no executorch-numpy-runtime environment at {NUMPY_PYTHON}"))]
FAST = ["--runs", "5", "--min-seconds", "0", "--max-seconds", "0.2", "--warmup", "1", "--threads", "1"]


def _feeds(seq_len: int, seed: int = 0) -> dict[str, np.ndarray]:
    ids = np.random.default_rng(seed).integers(5, 99, (1, seq_len)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[:, seq_len - 2:] = 0  # padding at the end, as a batch of unequal sentences has
    return dict(zip(INPUT_NAMES, (ids, mask, np.zeros_like(ids))))


def _child(python: str, code: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    if python != sys.executable:  # another interpreter: only albert_edge from here, its own packages
        env["PYTHONPATH"] = str(Path(__import__("albert_edge").__file__).parents[1])
    return subprocess.run([python, "-c", code, *args], capture_output=True, text=True, timeout=300, env=env)


# Runs the file on the feeds saved beside it: prints one JSON line (outputs, what was imported,
# the session's figures); exit 2 with the one line of an AlbertEdgeError; a crash is negative.
RUN = r"""
import json, sys
import numpy as np
from albert_edge.errors import AlbertEdgeError
from albert_edge.runtime import Session
try:
    session = Session(sys.argv[1], num_threads=1, weights_once=sys.argv[3] == "1")
    feeds = dict(np.load(sys.argv[2]))
    out = session.run(feeds)
except AlbertEdgeError as exc:
    print(exc, file=sys.stderr)
    sys.exit(2)
np.save(sys.argv[2] + ".out.npy", out["last_hidden_state"])
peak = [int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM")][0]
print(json.dumps({"backend": session.backend_name, "accelerator": session.accelerator,
                  "weights_once": session.weights_once, "peak": peak, "torch": "torch" in sys.modules,
                  "exir": any(m.startswith("executorch.exir") for m in sys.modules)}))
"""


def _run(python: str, pte: Path, feeds: dict, tmp_path: Path, weights_once: bool = True):
    saved = tmp_path / f"feeds-{pte.stem}.npz"
    np.savez(saved, **feeds)
    result = _child(python, RUN, str(pte), str(saved), "1" if weights_once else "0")
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1]), np.load(str(saved) + ".out.npy")


@pytest.mark.parametrize("python", PYTHONS)
@pytest.mark.parametrize("kind", ["xnnpack", "portable"])
def test_outputs_match_pytorch(pte_files, tmp_path, python, kind):
    import torch

    for seq_len in (5, 17, pte_files.max_seq_len):
        feeds = _feeds(seq_len, seed=seq_len)
        info, out = _run(python, getattr(pte_files, kind), feeds, tmp_path)
        with torch.no_grad():
            want = pte_files.model(*(torch.from_numpy(feeds[n]) for n in INPUT_NAMES)).numpy()
        assert out.shape == want.shape == (1, seq_len, 16)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    assert info["accelerator"] == ("xnnpack" if kind == "xnnpack" else "portable")
    assert info["weights_once"] is True
    assert not info["exir"]  # executorch's exporter is never imported to run a file
    if python != sys.executable:  # the torch-free binding
        assert info["backend"] == "executorch_numpy_runtime" and info["torch"] is False


def test_session_in_process(pte_files):
    session = Session(pte_files.xnnpack, num_threads=1)
    assert session.format == "executorch" and session.accelerator == "xnnpack"
    assert session.input_names == list(INPUT_NAMES) and session.output_names == ["last_hidden_state"]
    assert session.weights_once is True
    out = session.prepare(_feeds(9))()
    assert out["last_hidden_state"].shape == (1, 9, 16)
    assert Session(pte_files.xnnpack, weights_once=False).weights_once is False
    with pytest.raises(RuntimeUnavailable, match="delegates it was lowered for"):
        Session(pte_files.xnnpack, delegate="none")


@pytest.mark.parametrize("python", PYTHONS)
def test_the_weights_cache_packs_a_shared_layer_once(tmp_path_factory, python):
    """Six layers, one set of weights (1.8 MB): without XNNPACK's weights cache the process holds
    it packed six times; with it, once. Measured as each child's peak RSS."""
    pytest.importorskip("executorch.exir")
    from ..pte_fixtures import export_pte, shared_layer_config, tiny_pte_model

    out = tmp_path_factory.mktemp("pte-shared")
    model = tiny_pte_model(shared_layer_config())
    pte = export_pte(model, out / "shared.pte", max_seq_len=32)
    layer = sum(p.numel() * 4 for p in model.model.encoder.albert_layer_groups.parameters())
    feeds = _feeds(16)
    cached, _ = _run(python, pte, feeds, out, weights_once=True)
    uncached, _ = _run(python, pte, feeds, out, weights_once=False)
    assert cached["weights_once"] is True and uncached["weights_once"] is False
    # Five extra packed copies without the cache; at least half of that must show.
    assert uncached["peak"] - cached["peak"] >= 0.5 * 5 * layer, (cached, uncached, layer)


@pytest.mark.parametrize("python", PYTHONS)
def test_another_model_and_damaged_files_are_one_line(pte_files, tmp_path, python):
    pytest.importorskip("executorch.exir")
    from ..pte_fixtures import other_model_pte

    other = other_model_pte(tmp_path / "linear.pte")
    raw = bytearray(pte_files.xnnpack.read_bytes())
    truncated = tmp_path / "truncated.pte"
    truncated.write_bytes(bytes(raw[: len(raw) * 2 // 3]))
    magic = tmp_path / "magic.pte"
    magic.write_bytes(bytes(raw[:4] + b"XXXX" + raw[8:]))
    saved = tmp_path / "feeds.npz"
    np.savez(saved, **_feeds(8))
    for bad, says in ((other, "not an ALBERT program"), (truncated, "truncated"), (magic, "not an ExecuTorch program")):
        result = _child(python, RUN, str(bad), str(saved), "1")
        assert result.returncode == 2, (bad.name, result.returncode, result.stderr[-2000:])
        lines = result.stderr.strip().splitlines()
        assert says in lines[-1] and bad.name in lines[-1], result.stderr[-2000:]


def test_no_executorch_installed_is_one_line(pte_files, monkeypatch):
    missing = (engines.Engine("no_such_executorch_binding", None, ("no-such-binding",)),)
    monkeypatch.setitem(engines.ENGINES, "executorch", missing)
    with pytest.raises(RuntimeUnavailable, match="executorch-numpy-runtime"):
        Session(pte_files.portable)
    result = CliRunner().invoke(main, ["profile", str(pte_files.portable), "--seq-len", "8", *FAST])
    assert result.exit_code == 2 and "no_such_executorch_binding" in result.output


def test_the_torch_free_route_never_imports_torch(pte_files, run_blocked):
    """With torch blocked, as on a Pi: the torch-free binding runs the file; executorch's own
    bindings (which need torch) give one line saying so."""
    feeds = {k: v.tolist() for k, v in _feeds(8).items()}
    result = run_blocked(f"""
        import json, numpy as np
        from albert_edge.errors import AlbertEdgeError
        from albert_edge.runtime import Session
        try:
            session = Session({str(pte_files.xnnpack)!r})
            session.run({{k: np.array(v) for k, v in {feeds!r}.items()}})
            print("ran", session.backend_name, "torch" in sys.modules)
        except AlbertEdgeError as exc:
            print("refused", exc)
        print("attempts", attempts)
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    if engines.installed("executorch")[0].package == "executorch_numpy_runtime":
        assert "ran executorch_numpy_runtime False" in result.stdout and "attempts []" in result.stdout
    else:
        refused = [line for line in result.stdout.splitlines() if line.startswith("refused")]
        assert refused and "torch" in refused[0], result.stdout


def test_profile_records_a_pte(pte_files):
    result = CliRunner().invoke(main, ["profile", str(pte_files.xnnpack), "--seq-len", "8", *FAST, "--json"])
    assert result.exit_code == 0, result.output
    [record] = json.loads(result.stdout)
    assert record["format"] == "executorch" and record["provider"] == "xnnpack"
    assert record["runtime"] in ("executorch_numpy_runtime", "executorch") and record["runtime_version"] != "unknown"
    assert record["weights_once"] is True
    assert record["model"]["max_seq_len"] == pte_files.max_seq_len
    memory = record["memory"]
    assert memory["peak_after_timed"] >= memory["after_load_rss"] > 0


def test_profile_refuses_a_file_that_is_not_a_pte(tmp_path):
    bad = tmp_path / "model.pte"
    bad.write_bytes(b"\x08\x07" + b"\0" * 100)
    result = subprocess.run([sys.executable, "-m", "albert_edge", "profile", str(bad), "--seq-len", "8", *FAST],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.endswith(f"{bad}: not an ExecuTorch program (no ET12 identifier)")
