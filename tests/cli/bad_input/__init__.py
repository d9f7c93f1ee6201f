"""Helpers of the bad-input suite: the shared world of real inputs, damaged copies of them,
mounts that cannot be written, and what "unchanged" means for an output directory."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["World", "snapshot", "damage", "DAMAGES", "mounted", "fill", "leftovers"]


@dataclass(frozen=True)
class World:
    """Real inputs every case can point at, built once per module."""

    root: Path
    ckpt: Path  # tiny HF checkpoint (pretraining head) with its spiece.model
    spiece: Path  # 400 pieces, the checkpoint's vocabulary
    big_spiece: Path  # 430 pieces: more than the model's vocabulary
    small_spiece: Path  # 99 pieces: fewer than the model's vocabulary
    conv: Path  # convert output: model.onnx, model.ort, model.tflite (when tensorflow is there), manifest.json
    corpus: Path  # English text
    cls: Path  # classification .csv
    tags: Path  # token-classification .jsonl
    qa: Path  # qa .jsonl

    @property
    def onnx(self) -> Path:
        return self.conv / "model.onnx"

    @property
    def ort(self) -> Path:
        return self.conv / "model.ort"

    @property
    def tflite(self) -> Path:
        return self.conv / "model.tflite"

    def fields(self, scratch: Path) -> dict[str, str]:
        names = ("ckpt", "spiece", "big_spiece", "small_spiece", "conv", "corpus", "cls", "tags", "qa", "onnx",
                 "ort", "tflite")
        return {"scratch": str(scratch), **{n: str(getattr(self, n)) for n in names}}


def snapshot(*roots: Path) -> dict[str, tuple]:
    """Every file and directory under ``roots`` (hidden ones too) with its size and mtime: two
    equal snapshots mean nothing was written, renamed, left behind or removed."""
    seen: dict[str, tuple] = {}
    for root in roots:
        if not root.exists():
            seen[str(root)] = ("absent",)
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                path = Path(dirpath) / name
                st = path.lstat()
                seen[str(path)] = ("dir",) if path.is_dir() else (st.st_size, st.st_mtime_ns)
    return seen


def leftovers(root: Path) -> list[str]:
    """Temporary names albert-edge writes under while working; none may outlive a command."""
    marks = (".tmp", "albert-edge-tmp", ".albert-edge-convert-", ".checkpoint-")
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if any(m in p.name for m in marks))


def _halve(data: bytes) -> bytes:
    return data[: len(data) // 2]


# Ways to damage a model file, by name: each takes the real file's bytes.
DAMAGES = {
    "truncated": _halve,
    "first-64-bytes": lambda data: data[:64],
    "empty": lambda data: b"",
    "zeros": lambda data: bytes(len(data)),
    "random": lambda data: random.Random(0).randbytes(4096),
    "text": lambda data: b"this is not a model file\n" * 10,
}


def damage(source: Path, target: Path, how: str) -> Path:
    """Write ``source`` damaged ``how`` to ``target``; "renamed" copies it whole under the
    other format's suffix, "directory" makes a directory of that name."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if how == "directory":
        target.mkdir()
    elif how == "renamed":
        shutil.copyfile(source, target)
    else:
        target.write_bytes(DAMAGES[how](source.read_bytes()))
    return target


def _mount(*args: str) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


@contextlib.contextmanager
def mounted(path: Path, kind: str) -> Iterator[str | None]:
    """``path`` as a read-only bind mount ("readonly") or a small tmpfs filled up ("full").
    Yields None when mounted, else the reason it could not be (the cases then skip)."""
    path.mkdir(parents=True, exist_ok=True)
    if kind == "readonly":
        ok = _mount("--bind", str(path), str(path))
        ok = ok and (_mount("-o", "remount,bind,ro", str(path)) or not _umount(path))
    else:
        ok = _mount("-t", "tmpfs", "-o", "size=256k", "tmpfs", str(path))
        if ok:
            fill(path)
    if not ok:
        yield f"cannot mount a {kind} file system here (needs root and mount)"
        return
    try:
        yield None
    finally:
        _umount(path)


def _umount(path: Path) -> bool:
    return subprocess.run(["umount", str(path)], capture_output=True).returncode == 0


def fill(path: Path) -> None:
    """Fill the file system of ``path`` up to its last byte."""
    with open(path / ".filler", "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 4096)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path
