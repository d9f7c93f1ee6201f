"""Checkpoints by Hugging Face model id, fetched by the real huggingface_hub client from a small
hub on 127.0.0.1 that serves a tiny ALBERT: every command that takes a checkpoint, revisions,
the offline cache, and each way a download goes wrong (gated, missing, cut off mid-file)."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import torch
from click.testing import CliRunner
from huggingface_hub import constants as hf_constants

from albert_edge import checkpoints, hub
from albert_edge.cli import main
from albert_edge.config import AlbertConfig
from albert_edge.model import build_model

REPO = "tiny-org/tiny-albert"
BIN_REPO = "tiny-org/tiny-albert-bin"  # pytorch_model.bin only, no safetensors
GATED = "tiny-org/gated-albert"
TINY = AlbertConfig.preset("tiny").replace(vocab_size=400)  # the vocabulary of the spiece_model fixture
NEEDED = {"config.json", "model.safetensors", "spiece.model"}
NOT_NEEDED = {"README.md", "tf_model.h5", "pytorch_model.bin"}  # served beside them, never to be fetched
SCRIPT = Path(sys.executable).with_name("albert-edge")


class Hub:
    """The endpoints huggingface_hub's snapshot_download calls, as the Hugging Face hub answers them:
    ``GET /api/models/{repo}/revision/{ref}`` (the commit), ``GET /api/models/{repo}/tree/{commit}``
    (the files), and ``HEAD``/``GET /{repo}/resolve/{commit}/{file}`` (X-Repo-Commit, ETag,
    Content-Length, then the bytes). Errors carry the hub's X-Error-Code header."""

    def __init__(self):
        self.repos: dict[str, dict[str, tuple[str, dict[str, bytes]]]] = {}  # repo -> ref -> (commit, files)
        self.gated: set[str] = set()
        self.cut: set[str] = set()  # files whose download is cut off halfway (and every resume refused)
        self.requests: list[tuple[str, str]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def publish(self, repo: str, files: dict[str, bytes], ref: str = "main") -> str:
        commit = hashlib.sha1(repr(sorted(files.items())).encode()).hexdigest()
        self.repos.setdefault(repo, {})[ref] = (commit, files)
        return commit

    def commit(self, repo: str, ref: str = "main") -> str:
        return self.repos[repo][ref][0]

    def fetched(self) -> set[str]:
        """Names of the files downloaded (GET of /resolve/)."""
        return {path.split("/resolve/")[1].split("/", 1)[1] for method, path in self.requests
                if method == "GET" and "/resolve/" in path}

    def answer(self, request: BaseHTTPRequestHandler, body: bool) -> None:
        path = urlsplit(request.path).path
        self.requests.append((request.command, unquote(path)))
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] in ("revision", "tree"):
            repo, kind, ref = "/".join(parts[2:4]), parts[4], "/".join(parts[5:])
            found = self._find(request, repo, ref, body)
            if found:
                commit, files = found
                data = ({"id": repo, "sha": commit, "siblings": [{"rfilename": f} for f in files]} if kind == "revision"
                        else [{"type": "file", "path": f, "size": len(b), "oid": hashlib.sha1(b).hexdigest()}
                              for f, b in files.items()])
                _send(request, 200, json.dumps(data).encode(), body, {"Content-Type": "application/json"})
        elif len(parts) >= 5 and parts[2] == "resolve":
            self._file(request, "/".join(parts[:2]), parts[3], "/".join(parts[4:]), body)
        else:
            _send(request, 404, b"not found", body)

    def _find(self, request, repo: str, ref: str, body: bool) -> tuple[str, dict[str, bytes]] | None:
        refs = self.repos.get(repo)
        if refs is None:
            _send(request, 404, b"Repository not found", body, {"X-Error-Code": "RepoNotFound"})
            return None
        found = refs.get(ref) or next((r for r in refs.values() if r[0] == ref), None)
        if found is None:
            _send(request, 404, b"Invalid rev id", body, {"X-Error-Code": "RevisionNotFound"})
        return found

    def _file(self, request, repo: str, ref: str, name: str, body: bool) -> None:
        if repo in self.gated:
            _send(request, 401, b"gated", body, {"X-Error-Code": "GatedRepo", "X-Error-Message":
                                                 f"Access to model {repo} is restricted. Please log in."})
            return
        found = self._find(request, repo, ref, body)
        if not found:
            return
        commit, files = found
        if name not in files:
            _send(request, 404, b"Entry not found", body, {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": commit})
            return
        data = files[name]
        headers = {"X-Repo-Commit": commit, "ETag": f'"{hashlib.sha256(data).hexdigest()}"'}
        if body and name in self.cut:
            if request.headers.get("Range"):  # the connection is gone for good: no resume either
                return
            data = data[: len(data) // 2]  # Content-Length says the whole file; half comes, then the line drops
            headers["Content-Length"] = str(len(files[name]))
        _send(request, 200, data, body, headers)


def _handler(hub_: Hub):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            hub_.answer(self, body=True)

        def do_HEAD(self):
            hub_.answer(self, body=False)

        def log_message(self, *args):
            pass

    return Handler


def _send(request: BaseHTTPRequestHandler, status: int, data: bytes, body: bool, headers: dict | None = None) -> None:
    request.send_response(status)
    headers = {"Content-Length": str(len(data)), **(headers or {})}
    for key, value in headers.items():
        request.send_header(key, value)
    request.end_headers()
    if body:
        request.wfile.write(data)


def _save(config: AlbertConfig, directory: Path, spiece: Path, seed: int) -> Path:
    torch.manual_seed(seed)
    model = build_model(config, "pretraining")
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return checkpoints.save(model, directory, spiece=spiece)


@pytest.fixture(scope="module")
def published(tmp_path_factory, spiece_model) -> Path:
    """The checkpoint REPO serves on its main branch, as a local directory."""
    return _save(TINY, tmp_path_factory.mktemp("published") / "main", spiece_model, seed=0)


@pytest.fixture(scope="module")
def server(published, tmp_path_factory, spiece_model):
    """The hub, serving REPO (main, and branch v1 with one group less), BIN_REPO and GATED."""
    files = {p.name: p.read_bytes() for p in published.iterdir()}
    extras = {"README.md": b"# tiny\n", "tf_model.h5": b"\x89HDF" + bytes(64), "pytorch_model.bin": b"not loaded"}
    v1 = _save(TINY.replace(num_hidden_groups=1), tmp_path_factory.mktemp("published") / "v1", spiece_model, seed=1)
    pickled = published.parent / "pytorch_model.bin"
    torch.save(checkpoints.load(published).state, pickled)
    hub_ = Hub()
    hub_.publish(REPO, {**files, **extras})
    hub_.publish(REPO, {p.name: p.read_bytes() for p in v1.iterdir()}, ref="v1")
    hub_.publish(BIN_REPO, {"config.json": files["config.json"], "pytorch_model.bin": pickled.read_bytes()})
    hub_.publish(GATED, files)
    hub_.gated.add(GATED)
    thread = threading.Thread(target=hub_.server.serve_forever, daemon=True)
    thread.start()
    yield hub_
    hub_.server.shutdown()
    hub_.server.server_close()


@pytest.fixture()
def served(server, tmp_path, monkeypatch):
    """The hub with a fresh, empty Hugging Face cache in tmp_path, and this hub as HF_ENDPOINT."""
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    # huggingface_hub reads HF_HUB_OFFLINE once, when first imported (by whichever test came first).
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    server.requests.clear()
    server.cut.clear()
    return server


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def data(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def one_line_error(result, *texts: str) -> str:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    for text in texts:
        assert text in lines[0], lines[0]
    return lines[0]


def snapshot(tmp_path: Path, commit: str, repo: str = REPO) -> Path:
    return tmp_path / "hf" / "hub" / f"models--{repo.replace('/', '--')}" / "snapshots" / commit


# -- what is a hub id --------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("albert/albert-base-v2", True),
    ("albert/albert-base-v2@main", True),
    ("org/name@0123456789abcdef0123456789abcdef01234567", True),
    ("org/name@refs/pr/1", True),
    ("albert-base-v2", False),  # a preset
    ("tiny", False),
    ("./org/name", False),
    ("/abs/org/name", False),
    ("org/name/extra", False),
    ("org/model.onnx", False),  # a missing local file, not a model name
    ("org/results.json", False),
    ("org/na--me", False),
    ("org/name@", False),
    ("", False),
])
def test_what_is_a_hub_id(text, expected):
    assert hub.is_hub_id(text) is expected


def test_an_existing_local_path_wins_over_a_hub_id(served, tmp_path, monkeypatch):
    local = tmp_path / "tiny-org" / "tiny-albert"
    local.mkdir(parents=True)
    (local / "config.json").write_text(json.dumps(TINY.replace(num_hidden_layers=6).to_hf_dict()))
    monkeypatch.chdir(tmp_path)
    assert not hub.is_hub_id(REPO) and hub.resolve(REPO) == Path(REPO)
    assert data(run("params", REPO, "--json"))["config"]["num_hidden_layers"] == 6
    assert served.requests == []


def test_presets_stay_presets(served, tmp_path):
    assert data(run("params", "albert-base-v2", "--json"))["total"] == 11_683_584
    assert data(run("report", "albert-base-v2", "--out", tmp_path / "r", "--no-charts", "--json"))
    assert served.requests == []
    for command in (("convert", "albert-base-v2", "--out", tmp_path / "c"), ("info", "albert-base-v2")):
        one_line_error(run(*command), "albert-base-v2 is a preset", "give its hub id, albert/albert-base-v2")
    one_line_error(run("info", "tiny"), "tiny is a preset", "give a checkpoint")
    assert served.requests == [] and not (tmp_path / "c").exists()


# -- every command, by id -----------------------------------------------------------------------

def test_convert_info_params_report_by_id(served, published, tmp_path):
    out = tmp_path / "out"
    result = data(run("convert", REPO, "--to", "onnx", "--out", out, "--seq-len", "16", "--json"))
    assert [f["name"] for f in result["files"]] == ["model.onnx"]
    folder = snapshot(tmp_path, served.commit(REPO))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["source"]["checkpoint"] == str(folder.resolve())
    assert {p.name for p in folder.iterdir()} == NEEDED  # the checkpoint's own spiece.model came too
    assert served.fetched() == NEEDED and not served.fetched() & NOT_NEEDED

    info = data(run("info", REPO, "--json"))
    assert info["kind"] == "checkpoint" and info["files"] == ["model.safetensors"]
    assert info["path"] == str(folder)
    assert {k: info[k] for k in ("parameters", "config")} == {k: data(run("info", published, "--json"))[k]
                                                              for k in ("parameters", "config")}
    assert served.fetched() == NEEDED  # from the cache: nothing downloaded twice

    params = data(run("params", REPO, "--json"))
    assert params["name"] == REPO and params["config"]["num_hidden_groups"] == 2

    report = data(run("report", REPO, out, "--out", tmp_path / "report", "--no-charts", "--json"))
    assert [f["name"] for f in report["files"]] == ["model.onnx"]
    assert (tmp_path / "report" / "report.html").is_file()
    assert "albert-edge report: tiny-albert" in (tmp_path / "report" / "report.md").read_text()


def test_params_and_report_fetch_the_config_alone(served, tmp_path):
    assert data(run("params", REPO, "--json"))["config"]["vocab_size"] == 400
    data(run("report", REPO, "--out", tmp_path / "r", "--no-charts", "--json"))
    assert served.fetched() == {"config.json"}
    assert {p.name for p in snapshot(tmp_path, served.commit(REPO)).iterdir()} == {"config.json"}


def test_a_revision(served, tmp_path):
    assert data(run("params", f"{REPO}@v1", "--json"))["config"]["num_hidden_groups"] == 1
    info = data(run("info", f"{REPO}@v1", "--json"))
    assert info["config"]["num_hidden_groups"] == 1 and info["path"] == str(snapshot(tmp_path, served.commit(REPO, "v1")))
    by_commit = data(run("info", f"{REPO}@{served.commit(REPO)}", "--json"))
    assert by_commit["config"]["num_hidden_groups"] == 2


def test_pickled_weights_only_where_there_is_no_safetensors(served, published):
    info = data(run("info", BIN_REPO, "--json"))
    assert info["files"] == ["pytorch_model.bin"]
    assert info["parameters"] == data(run("info", published, "--json"))["parameters"]
    assert served.fetched() == {"config.json", "pytorch_model.bin"}


def test_pipeline_by_id(served, tmp_path):
    result = data(run("pipeline", REPO, "--out", tmp_path / "p", "--only", "convert", "--to", "onnx",
                      "--seq-len", "16", "--profile-seq-len", "16", "--json"))
    assert (tmp_path / "p" / "tiny-albert" / "files" / "model.onnx").is_file()
    assert {s["step"]: s["status"] for s in result["steps"]}["convert"] == "ran"


def test_params_by_id_runs_without_torch(served, run_blocked):
    result = run_blocked(f"""
        import sys
        from albert_edge.cli import main
        sys.argv = ["albert-edge", "params", {REPO!r}, "--json"]
        main()
    """)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["name"] == REPO


# -- offline -------------------------------------------------------------------------------------

def test_offline_uses_the_cache(served, tmp_path, monkeypatch):
    data(run("info", REPO, "--json"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    served.requests.clear()
    result = data(run("convert", REPO, "--to", "onnx", "--out", tmp_path / "out", "--seq-len", "16", "--json"))
    assert result["files"][0]["name"] == "model.onnx"
    assert data(run("params", REPO, "--json"))["name"] == REPO
    assert served.requests == []
    # v1 was never fetched: offline, it is not to be had
    one_line_error(run("info", f"{REPO}@v1"), f"{REPO}@v1: not in the Hugging Face cache", "HF_HUB_OFFLINE=1")


def test_offline_without_the_cache(served, tmp_path):
    """In a real process, where huggingface_hub reads HF_HUB_OFFLINE as it is imported."""
    result = subprocess.run([str(SCRIPT), "convert", REPO, "--out", str(tmp_path / "out")], capture_output=True,
                            text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == (f"Error: {REPO}: not in the Hugging Face cache ({tmp_path / 'hf' / 'hub'}) and "
                                     "the hub cannot be reached (HF_HUB_OFFLINE=1); download it once with network "
                                     "access or give a local checkpoint directory")
    assert served.requests == [] and not (tmp_path / "out").exists()


def test_config_alone_in_the_cache_is_not_a_checkpoint_offline(served, tmp_path, monkeypatch):
    data(run("params", REPO, "--json"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    one_line_error(run("info", REPO), f"{REPO}: not in the Hugging Face cache", "HF_HUB_OFFLINE=1")


# -- what goes wrong ---------------------------------------------------------------------------

@pytest.mark.parametrize("args, texts", [
    (("info", GATED), (f"{GATED}: a gated model (HTTP 401)", "log in")),
    (("params", "tiny-org/nothing-here"), ("tiny-org/nothing-here: no such local path, and no model of that name",
                                           "HTTP 404")),
    (("info", f"{REPO}@no-such-branch"), (f"{REPO}@no-such-branch: the model has no revision 'no-such-branch'",)),
    (("report", "tiny-org/nothing-here", "--out", "{tmp}/r"), ("tiny-org/nothing-here: no such local path",)),
])
def test_hub_errors_are_one_line(served, tmp_path, args, texts):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    line = one_line_error(run(*args), *texts)
    assert served.url in line
    assert not (tmp_path / "r").exists()


def test_unreachable_hub_without_the_cache(served, monkeypatch):
    with socket.socket() as sock:  # a port that nothing listens on
        sock.bind(("127.0.0.1", 0))
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{sock.getsockname()[1]}")
        one_line_error(run("info", REPO), f"{REPO}: not in the Hugging Face cache", "cannot be reached",
                       "download it once")
    assert served.requests == []


def test_a_download_cut_off_midway_then_retried(served, tmp_path):
    """In a real process: the connection drops halfway through the weights and every resume fails;
    one line, exit 2, no output directory. The same command once the hub is reachable again
    finishes the download and the conversion."""
    served.cut.add("model.safetensors")
    out = tmp_path / "out"
    args = [str(SCRIPT), "convert", REPO, "--to", "onnx", "--out", str(out), "--seq-len", "16"]
    failed = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert failed.returncode == 2, failed.stderr
    lines = failed.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {REPO}: the download from {served.url} was interrupted"), \
        failed.stderr
    assert not out.exists()
    blobs = tmp_path / "hf" / "hub" / f"models--{REPO.replace('/', '--')}" / "blobs"
    weights = hashlib.sha256(served.repos[REPO]["main"][1]["model.safetensors"]).hexdigest()
    assert not (blobs / weights).exists()

    served.cut.clear()
    done = subprocess.run([*args, "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["files"][0]["name"] == "model.onnx" and (out / "manifest.json").is_file()
    assert (blobs / weights).read_bytes() == served.repos[REPO]["main"][1]["model.safetensors"]



def test_the_readme_quickstart_runs_as_written(served, tmp_path, spiece_model):
    """README's quickstart, its albert-edge lines word for word, with albert/albert-base-v2 served by
    this hub (a tiny ALBERT under that id): a model id to an int8 TFLite file that inspect reads."""
    import re
    import shlex

    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## Quickstart.*?```bash\n(.*?)```", readme, re.S).group(1)
    lines = [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.startswith("albert-edge ")]
    assert [shlex.split(line)[1] for line in lines] == ["convert", "quantize"], lines
    model = _save(TINY.replace(max_position_embeddings=128), tmp_path / "base", spiece_model, seed=2)
    served.publish("albert/albert-base-v2", {p.name: p.read_bytes() for p in model.iterdir()})
    work = tmp_path / "work"
    work.mkdir()
    for line in lines:
        done = subprocess.run([str(SCRIPT), *shlex.split(line)[1:]], cwd=work, capture_output=True, text=True,
                              timeout=900, env=os.environ.copy())
        assert done.returncode == 0, f"{line}\n{done.stderr[-3000:]}"
    assert {"model.tflite", "model.onnx", "model.int8-dynamic.tflite", "manifest.json"} <= {
        p.name for p in (work / "edge").iterdir()}
    inspected = subprocess.run([str(SCRIPT), "inspect", "edge/model.int8-dynamic.tflite", "--json"], cwd=work,
                               capture_output=True, text=True, timeout=300)
    assert inspected.returncode == 0 and json.loads(inspected.stdout)["duplicates"] == [], inspected.stderr[-2000:]
