"""The model files a running demo has loaded, watched for faults: a file deleted or changed under
the server, a switch to a variant whose file is gone or cannot be loaded. Device side only."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from albert_edge.errors import AlbertEdgeError

from .engine import ALL_VARIANTS, TASK_DIRS, Engine, Variant

__all__ = ["Fault", "LoadedFiles"]

log = logging.getLogger(__name__)


class Fault(Exception):
    """A fault of the server's own files (deleted, changed, unreadable): 503 with the reason."""


class LoadedFiles:
    """The model files the engine has loaded, as they were when loaded (size, time, inode). One
    deleted or changed under the server is a fault: said once in the log, and the reason of every
    503 until a switch loads good files. Switches go only to variants whose files are all there."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self._tasks = {v.key: [t for t in TASK_DIRS if v in engine.bundle.variants(t)] for v in ALL_VARIANTS}
        self._lock = threading.Lock()
        self._said: str | None = None
        self._seen = self._snapshot()

    def _snapshot(self) -> dict[str, tuple[int, int, int] | None]:
        variant = self.engine.variant
        paths = [self.engine.bundle.file(t, variant) for t in self._tasks.get(variant.key, [])] if variant else []
        return {str(p): _fingerprint(p) for p in paths}

    def fault(self) -> str | None:
        """Why the loaded files cannot be trusted any more (None: they can)."""
        with self._lock:
            problem = None
            for path, seen in self._seen.items():
                now = _fingerprint(Path(path))
                if now != seen:
                    name = os.path.relpath(path, self.engine.bundle.path)
                    problem = (f"the model file {name} was deleted while the demo served it" if now is None else
                               f"the model file {name} changed while the demo served it")
                    problem += "; restart the demo, or switch to another model"
                    break
            if problem != self._said:
                self._said = problem
                if problem:
                    log.error("%s", problem)
            return problem

    def switch(self, key: str) -> Variant:
        """engine.select(key), refused (a fault) when a file of that variant is gone or cannot be loaded."""
        variant = Variant.parse(key)
        missing = [self.engine.bundle.file(t, variant) for t in self._tasks.get(variant.key, [])
                   if not self.engine.bundle.file(t, variant).is_file()]
        if missing:
            name = os.path.relpath(missing[0], self.engine.bundle.path)
            log.error("refused a switch to %s: %s is missing", variant.key, name)
            raise Fault(f"cannot switch to {variant.key}: {name} is missing; the loaded files keep serving")
        try:
            chosen = self.engine.select(variant)
        except AlbertEdgeError:
            raise
        except Exception as exc:  # a damaged file: the runtime cannot load it
            message = f"cannot switch to {variant.key}: its files cannot be loaded ({_one_line(exc)})"
            log.error("%s", message)
            raise Fault(message) from None
        with self._lock:
            self._seen, self._said = self._snapshot(), None
        return chosen


def _fingerprint(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns, st.st_ino


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."
