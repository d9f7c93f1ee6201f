"""``manifest.json``: what a conversion wrote, beside the files. For each file its name, sha256,
size, format (and opset or TFLite schema version), inputs and outputs, parity with PyTorch and
stored vs unique weight bytes; for the whole directory the source checkpoint and its config, and
the files an app reads beside the model files (``app_files``: the tokenizer, a classifier's
labels) with a note for each it could not have (``app_notes``). Reading it needs only the
standard library (``albert-edge info`` runs on the device).

Every reader of a conversion folder or bundle checks the files it uses against their entries
with :func:`check_beside` (a model file: the file, its folder, the app files; :func:`check_used`
where the caller has read the manifest) or
:func:`check_listed` (the whole directory): ``info``, ``inspect``, ``profile``, ``report``,
``quantize`` and the demo. A file that is missing, whose size differs, or whose sha256 differs is
one :class:`FileChanged` line."""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from albert_edge import __version__
from albert_edge.errors import ConversionError
from albert_edge.files import atomic_write

from .kinds import by_name

__all__ = ["MANIFEST_NAME", "SCHEMA_VERSION", "FileEntry", "AppFile", "APP_ROLES", "Manifest", "app_file_entry",
           "file_entry", "to_text", "write", "read", "sha256_of",
           "static_length", "FileChanged", "file_sha256", "check_file", "check_beside", "check_listed",
           "check_used", "folder_entries"]

MANIFEST_NAME = "manifest.json"
# 2: app_files and app_notes. A manifest of 1 has neither and reads as listing no app file (its
# folder may still hold one, unchecked: convert again to have it listed).
# 3: a file's folder_files (the transformers-js/ folder beside its file). An entry of 2 has none
# and reads as a file with no folder (one still there is unchecked: convert again to have it listed).
SCHEMA_VERSION = 3


@dataclass
class FileEntry:
    name: str
    format: str  # "onnx" | "ort" | "tflite" | "executorch"
    sha256: str
    size: int
    # {"opset": 17}, {"schema_version": 3}, or for .pte {"executorch_version", "delegate_blocks", "backends", "batch"}
    format_version: dict[str, Any]
    inputs: list[dict[str, Any]]  # [{"name", "dtype", "shape"}]
    outputs: list[dict[str, Any]]
    parity: dict[str, Any]
    weights: dict[str, Any]  # stored_bytes, unique_bytes, model_param_bytes, duplicates, ...
    data_files: list[dict[str, Any]] = field(default_factory=list)  # ONNX external data
    precision: str = "fp32"
    # .tflite: the first TFLite runtime (TensorFlow numbering) with every operator version the file
    # uses (converters.op_versions); .ort: the oldest onnxruntime that loads it (formats.ort_runtime);
    # None for ONNX, or when an operator version (.ort: the opset) is not in the table.
    min_runtime: str | None = None
    # A static-shape file (convert --static): N of its [1, N] inputs, the length every input is
    # padded to; what GPU and NPU delegates take. None for a dynamic-shape file (and in manifests
    # written before the field).
    static_len: int | None = None
    # The folder written with the file and used with it (the transformers-js target's
    # transformers-js/), each of its files: [{"name": path relative to the manifest's directory, "sha256", "size"}].
    folder_files: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class AppFile:
    """A file an app reads beside the model files, as the conversion copied or wrote it."""

    name: str  # spiece.model, labels.json
    role: str  # "tokenizer" (the checkpoint's sentencepiece model, as it is) | "labels" (a JSON list, class order)
    sha256: str
    size: int


APP_ROLES = ("tokenizer", "labels")


@dataclass
class Manifest:
    source: dict[str, Any]  # {"checkpoint": path or None, "head": ..., "format": ...}
    config: dict[str, Any]  # the Hugging Face config.json dict
    files: list[FileEntry]
    seq_len: int | None = None
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    albert_edge_version: str = __version__
    schema_version: int = SCHEMA_VERSION
    app_files: list[AppFile] = field(default_factory=list)
    app_notes: list[str] = field(default_factory=list)  # why an app file is not there ("no spiece.model: ...")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def file(self, name: str) -> FileEntry:
        for entry in self.files:
            if entry.name == name:
                return entry
        raise KeyError(name)

    def app_file(self, role: str) -> AppFile | None:
        """The app file of ``role`` ("tokenizer" or "labels"), None when the folder has none."""
        return next((a for a in self.app_files if a.role == role), None)


def sha256_of(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class FileChanged(ConversionError):
    """A file is missing, or is not the one its manifest entry describes (size or sha256)."""


# (path, device, inode, size, mtime_ns) -> sha256: each file is hashed once per process.
_HASHED: dict[tuple[str, int, int, int, int], str] = {}


def file_sha256(path: str | os.PathLike) -> str:
    """The sha256 of the file at ``path``, read once per process while its size and
    modification time stay the same (a later call with both unchanged answers from memory)."""
    path = Path(path)
    st = path.stat()
    key = (str(path.resolve()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _HASHED:
        _HASHED[key] = sha256_of(path)
    return _HASHED[key]


def check_file(path: str | os.PathLike, entry: FileEntry | dict[str, Any], manifest_path: str | os.PathLike,
               fix: str = "convert again") -> str:
    """Check the file at ``path`` against its manifest entry and return its sha256; FileChanged
    naming the file, the manifest and ``fix`` when the file is missing or differs.

    What is checked when: the size first, from the file system (no read, so a cut or grown file
    costs nothing); then the sha256 of the whole file, computed once per process per file (see
    :func:`file_sha256`), so every reader in one process pays for one read of a big file. An
    ONNX file's external data files and the files of the folder written with it (``folder_files``)
    listed in the entry are checked the same way."""
    path, manifest_path = Path(path), Path(manifest_path)
    expected = _entry_dict(entry)
    if not path.is_file():
        raise FileChanged(f"{manifest_path} lists {_shown(path, manifest_path)}, which is missing from "
                          f"{path.parent}: {fix}")
    size, sha = expected.get("size"), expected.get("sha256")
    actual_size = path.stat().st_size
    if actual_size != size:
        shown = f"{size:,}" if isinstance(size, int) and not isinstance(size, bool) else repr(size)
        raise FileChanged(f"{path} has changed since {manifest_path} was written (it is {actual_size:,} bytes, the "
                          f"manifest says {shown}): {fix}")
    digest = file_sha256(path)
    if digest != sha:
        raise FileChanged(f"{path} has changed since {manifest_path} was written (same size, sha256 differs): {fix}")
    for data in [*(expected.get("data_files") or ()), *(expected.get("folder_files") or ())]:
        if isinstance(data, dict) and isinstance(data.get("name"), str):
            check_file(_listed_path(manifest_path, data["name"], fix), data, manifest_path, fix)
    return digest


def check_beside(path: str | os.PathLike, fix: str = "convert again") -> FileEntry | None:
    """The one check of a model file before it is used: against the manifest.json beside it, when
    there is one that lists it, the file (:func:`check_file`: its data files and its folder too)
    and the app files an app reads with it (the tokenizer, the labels). Its entry, or None when
    no readable manifest there lists it."""
    path = Path(path)
    manifest_path = path.parent / MANIFEST_NAME
    if not manifest_path.is_file():
        return None
    try:
        manifest = read(manifest_path)
        entry = manifest.file(path.name)
    except (ConversionError, KeyError):
        return None
    check_used(path, entry, manifest.app_files, manifest_path, fix)
    return entry


def check_used(path: str | os.PathLike, entry: FileEntry | dict[str, Any],
               app_files: list[AppFile] | list[dict[str, Any]], manifest_path: str | os.PathLike,
               fix: str = "convert again") -> str:
    """:func:`check_file` of a model file, then of each of ``app_files`` (the manifest's, as read
    or as its JSON holds them): what a reader uses with the file. Its sha256."""
    manifest_path = Path(manifest_path)
    digest = check_file(path, entry, manifest_path, fix)
    for app in app_files:
        name = app.get("name") if isinstance(app, dict) else app.name
        if isinstance(name, str):
            check_file(_listed_path(manifest_path, name, fix, nested=False), app, manifest_path, fix)
    return digest


def check_listed(directory: str | os.PathLike, fix: str = "convert again") -> Manifest:
    """Read ``directory``'s manifest and check every file it lists (:func:`check_file`), the app
    files and each file's folder too."""
    directory = Path(directory)
    manifest_path = directory / MANIFEST_NAME
    manifest = read(directory)
    for entry in manifest.files:
        check_used(_listed_path(manifest_path, entry.name, fix, nested=False), entry, manifest.app_files,
                   manifest_path, fix)
    return manifest


def _listed_path(manifest_path: Path, name: str, fix: str, nested: bool = True) -> Path:
    """Where the file a manifest lists as ``name`` is: in its directory (``nested``: or in a folder
    below it); FileChanged for a name that points elsewhere."""
    parts = name.split("/")
    if (not name or name.startswith("/") or "\\" in name or any(p in ("", ".", "..") for p in parts)
            or (not nested and len(parts) > 1)):
        raise FileChanged(f"{manifest_path} lists {name!r}, which is not a file of its folder: {fix}")
    return manifest_path.parent.joinpath(*parts)


def _shown(path: Path, manifest_path: Path) -> str:
    """A listed file's name as the manifest lists it (transformers-js/tokenizer.json)."""
    try:
        return path.relative_to(manifest_path.parent).as_posix()
    except ValueError:
        return path.name


def _entry_dict(entry: FileEntry | dict[str, Any]) -> dict[str, Any]:
    return entry if isinstance(entry, dict) else {"size": entry.size, "sha256": entry.sha256,
                                                  "data_files": getattr(entry, "data_files", []),
                                                  "folder_files": getattr(entry, "folder_files", [])}


def folder_entries(folder: str | os.PathLike) -> list[dict[str, Any]]:
    """The ``folder_files`` of the folder at ``folder`` (written beside the manifest): each file
    in it, by its path from the manifest's directory, with sha256 and size."""
    folder = Path(folder)
    return [{"name": p.relative_to(folder.parent).as_posix(), "sha256": sha256_of(p), "size": p.stat().st_size}
            for p in sorted(folder.rglob("*")) if p.is_file()]


def app_file_entry(path: str | os.PathLike, role: str, name: str | None = None) -> AppFile:
    """The manifest entry of an app file at ``path`` (``name``: its final name)."""
    path = Path(path)
    return AppFile(name=name or path.name, role=role, sha256=sha256_of(path), size=path.stat().st_size)


def file_entry(path: str | os.PathLike, report, name: str | None = None) -> FileEntry:
    """The manifest entry of one verified file. ``report`` is its converters.verify.VerifyReport;
    ``name`` is the file's final name when ``path`` is still a temporary one."""
    path = Path(path)
    contents = report.contents
    kind = by_name(contents.format)
    meta = contents.metadata
    version = meta.get("format_version") or {kind.version_key: meta.get(kind.version_key)}
    data_files = [
        {"name": f, "sha256": sha256_of(path.parent / f), "size": (path.parent / f).stat().st_size}
        for f in meta.get("external_data", [])
    ]
    weights = report.weights.to_dict()
    return FileEntry(
        name=name or path.name,
        format=contents.format,
        sha256=sha256_of(path),
        size=path.stat().st_size,
        format_version=version,
        inputs=[_spec(s) for s in contents.inputs],
        outputs=[_spec(s) for s in contents.outputs],
        parity=report.parity(),
        weights=weights,
        data_files=data_files,
        min_runtime=(_min_runtime(path) if kind.op_versions
                     else meta.get(kind.min_runtime_key) if kind.min_runtime_key else None),
        static_len=static_length(path, contents),
    )


def static_length(path: str | os.PathLike, contents) -> int | None:
    """N when the file at ``path`` (read back as ``contents``) is static-shape: every input
    ``[1, N]`` and, for a .tflite, no tensor of any of its graphs with a dynamic size (a file
    whose inputs alone were fixed, like a MediaPipe task file, is not: GPU delegates refuse it).
    None otherwise, and for a .pte (its input sizes are the bounds it was exported with)."""
    kind = by_name(contents.format)
    if not kind.static_shapes:
        return None
    shapes = {tuple(s.shape) for s in contents.inputs}
    if len(shapes) != 1:
        return None
    shape = next(iter(shapes))
    if len(shape) != 2 or shape[0] != 1 or not isinstance(shape[1], int) or shape[1] < 1:
        return None
    if kind.sized_at_run_time is not None and kind.sized_at_run_time(Path(path)):
        return None
    return shape[1]


def _min_runtime(path: Path) -> str | None:
    from .op_versions import min_runtime, op_versions

    return min_runtime(op_versions(path))


def _spec(spec) -> dict[str, Any]:
    return {"name": spec.name, "dtype": spec.dtype, "shape": list(spec.shape)}


def to_text(manifest: Manifest) -> str:
    """The manifest as its file holds it."""
    return json.dumps(manifest.to_dict(), indent=2, default=str) + "\n"


def write(manifest: Manifest, out_dir: str | os.PathLike) -> Path:
    """Write ``out_dir/manifest.json`` through a temporary name, so it is whole or absent."""
    out = Path(out_dir) / MANIFEST_NAME
    atomic_write(out, to_text(manifest))
    return out


def read(path: str | os.PathLike) -> Manifest:
    """Read a manifest from its file or from the directory holding it."""
    path = Path(path)
    if path.is_dir():
        path = path / MANIFEST_NAME
    if not path.is_file():
        raise ConversionError(f"{path}: no such manifest")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        files = [FileEntry(**entry) for entry in data.pop("files")]
        app_files = [AppFile(**entry) for entry in data.pop("app_files", None) or ()]  # none before schema 2
        manifest = Manifest(files=files, app_files=app_files, **data)
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise ConversionError(f"{path} is not an albert-edge manifest: {exc}") from None
    for app in manifest.app_files:
        if app.role not in APP_ROLES or not isinstance(app.name, str) or Path(app.name).name != app.name:
            raise ConversionError(f"{path} is not an albert-edge manifest: app file {app.name!r} ({app.role!r}) "
                                  f"is not a {' or '.join(APP_ROLES)} file of its folder")
    return manifest
