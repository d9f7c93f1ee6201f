"""``pipeline.json``: what each step of a pipeline directory produced, with the sha256 of its
inputs and outputs, so a re-run can skip a step whose outputs are complete and unchanged and
whose inputs are still the ones it was made from."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..formats.manifest import sha256_of
from ..errors import AlbertEdgeError
from ..files import atomic_write

__all__ = ["PipelineError", "STATE_NAME", "STATE_SCHEMA", "State", "digest"]

STATE_NAME = "pipeline.json"
STATE_SCHEMA = "albert-edge.pipeline/1"


class PipelineError(AlbertEdgeError):
    """Pipeline input or output directory the user must fix."""


def digest(paths: list[Path], root: Path) -> dict[str, str]:
    """{path relative to root: sha256} of files; directories contribute each file inside."""
    out: dict[str, str] = {}
    for path in paths:
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for f in files:
            out[str(f.relative_to(root))] = sha256_of(f)
    return out


@dataclass
class State:
    root: Path
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)  # "model/step" -> record
    source: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def open(cls, root: Path, force: bool) -> State:
        """The state of ``root``; refuses a non-empty directory the pipeline did not write
        unless ``force``."""
        if root.exists() and not root.is_dir():
            raise PipelineError(f"--out {root} exists and is not a directory")
        path = root / STATE_NAME
        if path.is_file():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                if data.get("schema") != STATE_SCHEMA:
                    raise ValueError(f"schema {data.get('schema')!r}")
                return cls(root, dict(data["steps"]), dict(data.get("source", {})))
            except (ValueError, KeyError, TypeError) as exc:
                if not force:
                    raise PipelineError(f"{path} is not a pipeline state file ({exc}); pass --force to start "
                                        "over in that directory") from None
                return cls(root)
        if root.is_dir() and any(root.iterdir()) and not force:
            raise PipelineError(f"--out {root} holds files the pipeline did not write; choose an empty or new "
                                "directory, or pass --force")
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PipelineError(f"cannot create --out {root}: {exc.strerror or exc}") from None
        return cls(root)

    def save(self) -> None:
        data = {"schema": STATE_SCHEMA, "source": self.source, "steps": self.steps}
        atomic_write(self.root / STATE_NAME, json.dumps(data, indent=2) + "\n")

    def is_done(self, key: str, inputs: dict[str, str]) -> bool:
        """Whether step ``key`` ran on these inputs and every output is there, unchanged."""
        record = self.steps.get(key)
        if not record or record.get("inputs") != inputs:
            return False
        for rel, sha in record.get("outputs", {}).items():
            path = self.root / rel
            if not path.is_file() or sha256_of(path) != sha:
                return False
        return True

    def record(self, key: str, inputs: dict[str, str], outputs: dict[str, str], **info: Any) -> None:
        self.steps[key] = {"inputs": inputs, "outputs": outputs, **info}
        self.save()

    def outputs(self, key: str) -> dict[str, str]:
        return dict(self.steps.get(key, {}).get("outputs", {}))
