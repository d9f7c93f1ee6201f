"""Profile on another machine over SSH (`albert-edge profile --remote user@host[:port]`).

For each host, in parallel (one thread and one ``ssh`` child at a time per host, the system
OpenSSH client in batch mode: keys only, never a password prompt):

1. ask the device's Python whether albert-edge and the runtimes the files need are installed,
   and which files its cache already holds;
2. copy what is missing into the cache, content-addressed: ``<cache>/<sha256>/<file name>``
   (a model's manifest.json and ONNX external data go beside it; the tokenizer and the text file
   likewise), all in one tar stream over one connection, each file unpacked by the device's
   Python under a temporary name and renamed;
3. run the device-side ``python -m albert_edge profile <cached files> <same settings> --json``
   there and read its records back, with ``host`` set and ``file`` the local path as given.

Every host runs to its end; records of the hosts that worked are kept, and the ones that failed
are named in one RemoteError. Ctrl-C kills the ssh children, and the device side stops its
profiler when its connection goes away. Standard library only, plus the ``ssh`` program.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import shlex
import shutil
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..formats.manifest import MANIFEST_NAME, sha256_of
from ..formats import format_of
from ..tokenizer import find_spiece
from .record import ProfileRecord
from ..runtime.engines import ENGINES, install_hint, packages
from .runner import check_text
from .ssh import (CONNECT_TIMEOUT, Children, CommandFailed, RemoteError, SshHost, Target, last_line, parse_target,
                  tar_stream)

__all__ = ["DEFAULT_REMOTE_DIR", "DEFAULT_PYTHON", "RemoteError", "Target", "parse_target", "profile_remote"]

log = logging.getLogger(__name__)

DEFAULT_REMOTE_DIR = "~/.cache/albert-edge/profile"
DEFAULT_PYTHON = "python3"

# Run on the device with its Python: what is installed, where the cache is, what it holds.
_PROBE = """
import importlib.util as u, json, os, sys
cache = os.path.abspath(os.path.expanduser(sys.argv[1]))
os.makedirs(cache, exist_ok=True)
held = sorted(f"{d}/{n}" for d in os.listdir(cache) if os.path.isdir(os.path.join(cache, d))
              for n in os.listdir(os.path.join(cache, d)) if not n.startswith("."))
def have(m):
    try:
        return u.find_spec(m) is not None
    except (ImportError, ValueError):
        return False
try:
    import albert_edge
    version = albert_edge.__version__
except ImportError:
    version = None
mods = sys.argv[2].split(",")
print(json.dumps({"albert_edge": version, "python": sys.version.split()[0], "cache": cache, "held": held,
                  "modules": {m: have(m) for m in mods}}))
"""

# Run on the device around the profiler: it gets its own session, and when our connection goes
# away (our stdin closes: ssh was killed, Ctrl-C) its whole group gets SIGTERM.
_GUARD = """
import os, signal, subprocess, sys, threading
child = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL, start_new_session=True)
def watch():
    sys.stdin.buffer.read()
    try:
        os.killpg(child.pid, signal.SIGTERM)
    except OSError:
        pass
threading.Thread(target=watch, daemon=True).start()
code = child.wait()
os._exit(code if code >= 0 else 128 - code)  # killed by a signal: the shell's 128 + signal
"""


# Run on the device (whose albert-edge _probe has found): unpack a tar stream of new cache files
# from stdin, each written by albert_edge.files.atomic_write under a temporary name of its own
# and put in place once whole, so an interrupted copy never looks cached and two copies of the
# same file at once (one device under two names) cannot mix.
_RECEIVE = """
import os, shutil, signal, sys, tarfile
from albert_edge.files import atomic_write
cache = sys.argv[1]
for sig in (signal.SIGHUP, signal.SIGTERM):  # a dropped connection or a kill: unwind, remove the temporary file
    signal.signal(sig, lambda *_, s=sig: sys.exit(128 + s))
with tarfile.open(fileobj=sys.stdin.buffer, mode="r|") as tar:
    for member in tar:
        name = os.path.normpath(member.name)
        if not member.isfile() or name.startswith("..") or os.path.isabs(name):
            sys.exit(f"refusing {member.name!r}")
        src = tar.extractfile(member)
        def receive(part, src=src):
            with open(part, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
        atomic_write(os.path.join(cache, name), receive)
"""


def profile_remote(hosts: Sequence[str], files: Sequence[str | Path], settings, *,
                   ssh_config: str | Path | None = None, remote_dir: str = DEFAULT_REMOTE_DIR,
                   python: str = DEFAULT_PYTHON, connect_timeout: int = CONNECT_TIMEOUT,
                   timeout: float | None = None,
                   progress: Callable[[str], None] | None = None) -> list[ProfileRecord]:
    """Profile ``files`` with ``settings`` (a ProfileSettings) on every host, in parallel; the
    records of all hosts, in host order. ``python`` is the device's interpreter that has
    albert-edge (a venv's bin/python, say). ``timeout`` bounds each host's profiling run."""
    targets = [parse_target(h) for h in dict.fromkeys(hosts)]
    files = [Path(f) for f in files]
    for f in files:
        if not f.is_file():
            raise RemoteError(f"{f}: no such model file")
        format_of(f)
    if settings.text is not None:
        check_text(settings)  # the local --text and --tokenizer, before any connection
    if ssh_config is not None and not Path(ssh_config).is_file():
        raise RemoteError(f"--ssh-config {ssh_config}: no such file")
    if shutil.which("ssh") is None:
        raise RemoteError("--remote needs the OpenSSH client (ssh) on this machine (apt install openssh-client)")
    children = Children()
    machines = [SshHost(t, Path(ssh_config) if ssh_config else None, python, connect_timeout, children)
                for t in targets]
    results: list[list[ProfileRecord] | str] = [[] for _ in machines]

    def one(i: int) -> None:
        try:
            results[i] = _profile_on(machines[i], files, settings, remote_dir, timeout, progress)
        except RemoteError as exc:
            results[i] = str(exc)
        except Exception as exc:  # one host's surprise must not lose the others' records
            log.debug("remote profiling on %s failed", machines[i].target.spec, exc_info=True)
            results[i] = f"{machines[i].target.spec}: {type(exc).__name__}: {exc}"

    pool = ThreadPoolExecutor(max_workers=max(1, len(machines)), thread_name_prefix="remote")
    try:
        for future in [pool.submit(one, i) for i in range(len(machines))]:
            future.result()
    except BaseException:  # Ctrl-C, SIGTERM: no ssh child outlives us
        children.kill_all()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown()
    records = [r for res in results if not isinstance(res, str) for r in res]
    failed = [res for res in results if isinstance(res, str)]
    if failed:
        raise RemoteError("; ".join(failed), records)
    return records


def _profile_on(machine: SshHost, files: list[Path], settings, remote_dir: str, timeout: float | None,
                progress: Callable[[str], None] | None) -> list[ProfileRecord]:
    spec = machine.target.spec
    say = (lambda text: progress(f"{spec}: {text}")) if progress else (lambda text: None)
    say("checking albert-edge")
    state = _probe(machine, remote_dir, {format_of(f) for f in files})
    cache, held = state["cache"], set(state["held"])

    uploads: dict[str, Path] = {}  # name in the cache -> local file

    def put(local: Path, digest: str, always: bool = False, name: str | None = None) -> str:
        rel = f"{digest}/{name or local.name}"
        if always or rel not in held:
            uploads[rel] = local
        return f"{cache}/{rel}"

    remote_of: dict[str, Path] = {}
    for f in files:
        digest = sha256_of(f)
        remote_of[put(f, digest)] = f
        for side in _data_files(f):
            put(side, digest)
        for name in _used_with(f):  # what the device's manifest check reads with the file
            put(f.parent / name, digest, name=name)
        manifest = f.with_name(MANIFEST_NAME)
        if manifest.is_file():  # small; it can change while the model does not
            put(manifest, digest, always=True)
    changes: dict[str, Any] = {}
    if settings.tokenizer is not None:
        tok = find_spiece(settings.tokenizer)
        changes["tokenizer"] = Path(put(tok, sha256_of(tok)))
    if settings.text not in (None, "builtin"):
        text = Path(settings.text)
        changes["text"] = put(text, sha256_of(text))
    if uploads:  # one connection for all of them
        say(f"copying {', '.join(sorted({p.name for p in uploads.values()}))}")
        try:
            machine.ssh(machine.py("-c", _RECEIVE, cache), feed=lambda fh: tar_stream(list(
                (local, rel) for rel, local in uploads.items()), fh))
        except CommandFailed as exc:
            raise RemoteError(f"{spec}: copying the files into {cache} failed: {exc}") from None
    from .settings import forward_args

    args = forward_args(dataclasses.replace(settings, **changes) if changes else settings)
    say("profiling")
    command = machine.py("-c", _GUARD, machine.python, "-m", "albert_edge", "profile", *remote_of, *args, "--json")
    try:
        out = machine.ssh(f"cd {shlex.quote(cache)} && {command}", timeout=timeout)
    except CommandFailed as exc:
        raise RemoteError(f"{spec}: the profiler failed there: {exc}") from None
    return [_local_record(r, spec, remote_of) for r in _records(out, spec)]


def _data_files(model: Path) -> list[Path]:
    """An ONNX file's external data files: those its manifest entry lists, and the exporter's
    default name ``<file name>.data``, where they exist."""
    names = {model.name + ".data"}
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError, AttributeError):
        manifest = json.loads(model.with_name(MANIFEST_NAME).read_text())
        entry = next(e for e in manifest["files"] if e["name"] == model.name)
        names.update(d["name"] for d in entry.get("data_files", []))
    return [model.with_name(n) for n in sorted(names) if model.with_name(n).is_file()]


def _used_with(model: Path) -> list[str]:
    """The files the manifest beside ``model`` lists as used with it, which the profiler checks
    with it there too: the app files (spiece.model, labels.json) and the folder written with it
    (transformers-js/), by their names in the manifest, where they exist and stay in its folder."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError, AttributeError, StopIteration):
        manifest = json.loads(model.with_name(MANIFEST_NAME).read_text())
        entry = next(e for e in manifest["files"] if e["name"] == model.name)
        names = [a["name"] for a in [*manifest.get("app_files", []), *entry.get("folder_files", [])]]
        return [n for n in names if isinstance(n, str) and ".." not in n.split("/") and not n.startswith("/")
                and (model.parent / n).is_file()]
    return []


def _probe(machine: SshHost, remote_dir: str, formats: set[str]) -> dict[str, Any]:
    spec, python = machine.target.spec, machine.python
    modules = ["albert_edge", *(e.package for engines in ENGINES.values() for e in engines)]
    try:
        out = machine.ssh(machine.py("-c", _PROBE, remote_dir, ",".join(modules)))
        state = json.loads(out.strip().splitlines()[-1])
    except CommandFailed as exc:
        if exc.code == 127:
            raise RemoteError(f"{spec}: {python} is not there ({exc}); install Python 3 and albert-edge on the "
                              f"device ({install_hint(formats)}), or name its Python with --remote-python") from None
        raise RemoteError(f"{spec}: checking albert-edge with {python} failed: {exc}") from None
    except (json.JSONDecodeError, IndexError):
        raise RemoteError(f"{spec}: {python} did not answer the albert-edge check") from None
    if state.get("albert_edge") is None:
        raise RemoteError(f"{spec}: albert-edge is not installed for {python} (Python {state.get('python')}) there: "
                          f"run {install_hint(formats)} on the device, or point --remote-python at the "
                          "Python of the venv that has it")
    modules = state.get("modules", {})
    for fmt in sorted(formats):
        needed = packages(fmt)
        if not any(modules.get(m) for m in needed):
            raise RemoteError(f"{spec}: albert-edge {state['albert_edge']} is there but cannot run .{fmt} files "
                              f"({' or '.join(needed)} missing): run {install_hint({fmt})} on the device")
    return state


def _records(out: str, spec: str) -> list[dict[str, Any]]:
    """The records in the device's `profile --json` output: a JSON list, an object holding
    'records', or one JSON object per line."""
    text = out.strip()
    with contextlib.suppress(json.JSONDecodeError):
        data = json.loads(text)
        if isinstance(data, dict):
            data = data.get("records", [data])
        if isinstance(data, list):
            return [r for r in data if isinstance(r, dict)]
    rows = []
    for line in text.splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            row = json.loads(line)
            if isinstance(row, dict):
                rows.append(row)
    if not rows:
        raise RemoteError(f"{spec}: the profiler there printed no records ({last_line(text) or 'no output'})")
    return rows


def _local_record(data: dict[str, Any], spec: str, remote_of: dict[str, Path]) -> ProfileRecord:
    record = ProfileRecord.from_dict(data)
    local = remote_of.get(record.file) or next(
        (path for remote, path in remote_of.items() if Path(remote).name == record.file_name
         and remote.split("/")[-2] == record.sha256), None)
    return dataclasses.replace(record, file=str(local) if local else record.file, host=spec)
